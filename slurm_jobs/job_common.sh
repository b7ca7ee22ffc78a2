# Sourced by every job script, inside the job: site settings, a banner, and the one workload definition.
# The workload arguments are identical in every script, so 1-, 4- and 8-GPU results form one scaling group.
set -euo pipefail
export SCALELAB_ROOT="${SLURM_SUBMIT_DIR:-$PWD}"   # sbatch copies the script away; the repo is where you submitted
cd "$SCALELAB_ROOT"
# This job's own log, wherever --output put it (read once: the check below, gpu_selfcheck.sh's NCCL lines).
JOB_LOG=""
if [ -n "${SLURM_JOB_ID:-}" ]; then
  JOB_LOG=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *StdOut=//p') || JOB_LOG=""  # no answer: none
fi
# A job id can repeat (a controller restarted without its state, another cluster's jobs in this folder): with
# --open-mode=append this job would write on the end of that other job's slurm-N.out. A job's first attempt finds
# its log empty, so anything there is another job's: it is moved aside (a requeued attempt appends, as it should).
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && [ -n "$JOB_LOG" ] && [ -s "$JOB_LOG" ]; then
  _aside="${JOB_LOG%.out}.before-$(date -r "$JOB_LOG" +%Y%m%dT%H%M%S || echo earlier).out"
  if cp -p "$JOB_LOG" "$_aside" && : >"$JOB_LOG"; then
    echo "job: $JOB_LOG held another job ${SLURM_JOB_ID}'s log (the job id repeated): moved to $_aside"
  fi
fi
source slurm_jobs/site.sh
# Since Slurm 22.05 srun no longer inherits --cpus-per-task from sbatch: without this, where the site binds tasks,
# every rank gets one core (Python, autograd, NCCL's proxy thread and data loading share it).
[ -n "${SLURM_CPUS_PER_TASK:-}" ] && export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK

# The default workload follows the node: src/scalelab/configs/default-workload.txt names it for GPUs and for CPU
# (one file, read by submit.py too). MODEL=... PRESET=... or CONFIG=... sbatch ... picks another.
KIND=cpu
if [ -n "$(gpus_visible)" ] && [ "${SCALELAB_ACCELERATOR:-auto}" != cpu ]; then KIND=gpu; fi
DEFAULT_CONFIG=$(awk -v kind=$KIND '$1 == kind { print $2 }' src/scalelab/configs/default-workload.txt)
DEFAULT_PRESET=tiny; [[ $DEFAULT_CONFIG == gpt-* ]] && DEFAULT_PRESET=${DEFAULT_CONFIG#gpt-}
# The workload is a named config of the package (src/scalelab/configs/: the same files the demo and submit.py
# run; `python src/train.py --config gpt-small --print_config` shows one).
case "${MODEL:-}" in
  "")          CONFIG=${CONFIG:-$DEFAULT_CONFIG} ;;
  mlp)         CONFIG=${CONFIG:-mlp} ;;
  gpt|transformer) CONFIG=${CONFIG:-gpt-${PRESET:-$DEFAULT_PRESET}} ;;
  *) echo "job: unknown MODEL=$MODEL (mlp or gpt)" >&2; exit 2 ;;
esac
WORKLOAD=(--config "$CONFIG")

GPUS_PER_NODE=${GPUS_PER_NODE:?set by the job script}
echo "scalelab job ${SLURM_JOB_ID:-?} '${SLURM_JOB_NAME:-}' on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NNODES:-?} node(s) x" \
     "${SLURM_NTASKS_PER_NODE:-?} task(s), ${GPUS_PER_NODE} GPU(s) per node expected, profile ${SCALELAB_PROFILE:-auto} (set: ${SCALELAB_SITE_SET:-nothing})," \
     "config $CONFIG, restart ${SLURM_RESTART_COUNT:-0}"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true
else
  gpus_visible   # AMD GPUs (rocm-smi), if any
fi

# Train with the sizes this script asks for: train.py checks them against SLURM's and fails fast on a mismatch.
run_train() {
  srun --kill-on-bad-exit=1 "${SRUN_BIND[@]}" "$SCALELAB_PYTHON" src/train.py "${WORKLOAD[@]}" \
      --devices "$GPUS_PER_NODE" --num_nodes "$1" --accelerator "${SCALELAB_ACCELERATOR:-auto}" \
      --output_dir "${OUTPUT_DIR:-outputs}" "${@:2}"
}
# The same job on one GPU inside a bigger allocation (gpu_selfcheck.sh's baseline): one task, one GPU, one node.
run_train_one() {
  srun --kill-on-bad-exit=1 "${SRUN_BIND[@]}" --nodes=1 --ntasks=1 --ntasks-per-node=1 --gres=gpu:1 "$SCALELAB_PYTHON" src/train.py \
      "${WORKLOAD[@]}" --devices 1 --num_nodes 1 --accelerator "${SCALELAB_ACCELERATOR:-auto}" \
      --output_dir "${OUTPUT_DIR:-outputs}" "$@"
}
