#!/bin/bash
# The self-check for a first GPU allocation, before the real sweep: the all-reduce benchmark on 2 nodes x 4 GPUs,
# a short GPT on 1 GPU (the baseline every speedup divides by) and on all of them, then PASS/FAIL per claim
# (docs/01-setup.md). Submit from the repo root:
#     sbatch slurm_jobs/gpu_selfcheck.sh                       # EXPECT_BUSBW=20 sbatch ... judges the link too
#SBATCH --job-name=sl-selfcheck
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --exclusive
#SBATCH --cpus-per-task=4
#SBATCH --time=00:20:00
#SBATCH --output=outputs/slurm-%j.out
GPUS_PER_NODE=${GPUS_PER_NODE:-4}
MODEL=${MODEL:-gpt}   # no PRESET: the GPT `small` on GPUs, `tiny` on the CPU profile (job_common.sh: default-workload.txt)
source "${SLURM_SUBMIT_DIR:-.}/slurm_jobs/job_common.sh"
export NCCL_DEBUG=INFO   # NCCL names its network (NET/IB, NET/OFI or NET/Socket) in this log: the check reads it,
# and, with TUNING, the algorithm it chose for each collective: the step's all-reduce against the benchmark's
export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,ENV,TUNING}
OUT=${OUTPUT_DIR:-outputs}/selfcheck-${SLURM_JOB_ID:-local}
# Every step runs, whatever the one before it did (a failed training run still leaves the benchmark's figure and
# the check's verdicts); the job fails at the end if any step failed. The benchmark first: it is the short one
# and needs nothing of the training run.
set +e
failed=()
step() {   # step NAME COMMAND...: run it, note it when it fails, go on
  local name=$1 rc
  shift
  "$@"
  rc=$?
  [ "$rc" -ne 0 ] && failed+=("$name (exit $rc)")
  return 0
}
step allreduce_bench srun --kill-on-bad-exit=1 "${SRUN_BIND[@]}" "$SCALELAB_PYTHON" src/allreduce_bench.py \
    --devices "$GPUS_PER_NODE" --num_nodes "${SLURM_NNODES:-1}" --accelerator "${SCALELAB_ACCELERATOR:-auto}" --output_dir "$OUT"
# On GPUs a timed window of seconds, on the fastest too (gpt-small: about 15 ms a step on an H100): NVML's power
# reading is a 1-s average on Ampere and newer, and the energy claim needs a window several times that
# (selfcheck_devices.py); your own --max_steps wins.
STEPS=()
[ "$KIND" = gpu ] && STEPS=(--max_steps "${SELFCHECK_STEPS:-400}")
OUTPUT_DIR=$OUT step train_1gpu run_train_one "${STEPS[@]}" "$@"   # the same job on one GPU of the first node
OUTPUT_DIR=$OUT step train run_train "${SLURM_NNODES:-1}" "${STEPS[@]}" "$@"
# this job's own log (job_common.sh read where --output put it), for NCCL's transport lines
step selfcheck "$SCALELAB_PYTHON" src/selfcheck.py --output_dir "$OUT" ${JOB_LOG:+--log "$JOB_LOG"} \
    ${EXPECT_BUSBW:+--expect_busbw "$EXPECT_BUSBW"}
if [ ${#failed[@]} -gt 0 ]; then
  said=$(printf '%s, ' "${failed[@]}")
  echo "gpu_selfcheck: ${#failed[@]} step(s) failed: ${said%, }" >&2
  exit 1
fi
