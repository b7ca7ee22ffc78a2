#!/bin/bash
# All-reduce bus bandwidth, nccl-tests style: 2 node(s) x 4 GPU(s), one task per GPU. Submit from the repo root:
#     export SCALELAB_PROFILE=a100 && source slurm_jobs/site.sh      # your profile (chapter 1), once per shell
#     sbatch slurm_jobs/allreduce_bench.sh                                              # 2 nodes: the inter-node link
#     sbatch --nodes=1 slurm_jobs/allreduce_bench.sh                                    # 1 node: the intra-node link
#     sbatch slurm_jobs/allreduce_bench.sh --max_bytes 1G --dtype bfloat16              # extra flags go to the benchmark
#SBATCH --job-name=sl-allreduce
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --exclusive
#SBATCH --cpus-per-task=4
#SBATCH --time=00:15:00
#SBATCH --output=outputs/slurm-%j.out
GPUS_PER_NODE=4
set -euo pipefail
export SCALELAB_ROOT="${SLURM_SUBMIT_DIR:-$PWD}"   # sbatch copies the script away; the repo is where you submitted
cd "$SCALELAB_ROOT"
source slurm_jobs/site.sh
# Since Slurm 22.05 srun no longer inherits --cpus-per-task from sbatch: without this, where the site binds tasks,
# every rank gets one core (Python, autograd, NCCL's proxy thread and data loading share it).
[ -n "${SLURM_CPUS_PER_TASK:-}" ] && export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK

echo "scalelab all-reduce job ${SLURM_JOB_ID:-?} '${SLURM_JOB_NAME:-}' on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NNODES:-?} node(s) x" \
     "${SLURM_NTASKS_PER_NODE:-?} task(s), ${GPUS_PER_NODE} GPU(s) per node expected, profile ${SCALELAB_PROFILE:-auto} (set: ${SCALELAB_SITE_SET:-nothing})"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true
else
  gpus_visible   # AMD GPUs (rocm-smi), if any
fi

# --devices is the header's tasks per node: allreduce_bench.py checks it against SLURM's and fails fast on a
# mismatch. The node count follows the allocation, so `sbatch --nodes=1` needs no other edit.
srun --kill-on-bad-exit=1 "${SRUN_BIND[@]}" "$SCALELAB_PYTHON" src/allreduce_bench.py \
    --devices "$GPUS_PER_NODE" --num_nodes "${SLURM_NNODES:-1}" --accelerator "${SCALELAB_ACCELERATOR:-auto}" \
    --output_dir "${OUTPUT_DIR:-outputs}" "$@"
