# Sourced by every job script, inside the job: site settings, a banner, and the one workload definition.
# The workload arguments are identical in every script, so 1-, 4- and 8-GPU results form one scaling group.
set -euo pipefail
export SCALELAB_ROOT="${SLURM_SUBMIT_DIR:-$PWD}"   # sbatch copies the script away; the repo is where you submitted
cd "$SCALELAB_ROOT"
source slurm_jobs/site.sh
# Since Slurm 22.05 srun no longer inherits --cpus-per-task from sbatch: without this, where the site binds tasks,
# every rank gets one core (Python, autograd, NCCL's proxy thread and data loading share it).
[ -n "${SLURM_CPUS_PER_TASK:-}" ] && export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK

# The default workload follows the node: on GPUs the GPT `small` (the MLP and `tiny` are host-bound there: a
# GPU step of theirs times Python, not the GPU); on CPU the MLP. MODEL=... PRESET=... sbatch ... picks another.
if [ -n "$(gpus_visible)" ] && [ "${SCALELAB_ACCELERATOR:-auto}" != cpu ]; then
  MODEL=${MODEL:-transformer}; PRESET=${PRESET:-small}
fi
MODEL=${MODEL:-mlp}
case "$MODEL" in
  mlp)         WORKLOAD=(--model mlp --num_samples 20000 --max_epochs 3 --batch_size 64 --warmup_steps 5) ;;
  # batch per GPU: what fits a 40 GB A100 in bf16 with AdamW (python src/predict.py --preset P --batch_per_gpu B)
  transformer) case "${PRESET:-tiny}" in large) BATCH=4 ;; xl) BATCH=2 ;; *) BATCH=8 ;; esac
               WORKLOAD=(--model transformer --preset "${PRESET:-tiny}" --max_steps 50 --batch_size "$BATCH" --warmup_steps 5) ;;
  *) echo "job: unknown MODEL=$MODEL (mlp or transformer)" >&2; exit 2 ;;
esac

GPUS_PER_NODE=${GPUS_PER_NODE:?set by the job script}
echo "scalelab job ${SLURM_JOB_ID:-?} '${SLURM_JOB_NAME:-}' on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NNODES:-?} node(s) x" \
     "${SLURM_NTASKS_PER_NODE:-?} task(s), ${GPUS_PER_NODE} GPU(s) per node expected, profile ${SCALELAB_PROFILE:-auto} (set: ${SCALELAB_SITE_SET:-nothing})," \
     "model $MODEL${PRESET:+ $PRESET}, restart ${SLURM_RESTART_COUNT:-0}"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true
fi

# Train with the sizes this script asks for: train.py checks them against SLURM's and fails fast on a mismatch.
run_train() {
  srun --kill-on-bad-exit=1 "$SCALELAB_PYTHON" src/train.py "${WORKLOAD[@]}" \
      --devices "$GPUS_PER_NODE" --num_nodes "$1" --accelerator "${SCALELAB_ACCELERATOR:-auto}" \
      --output_dir "${OUTPUT_DIR:-outputs}" "${@:2}"
}
