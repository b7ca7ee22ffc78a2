# scalelab site settings: the ONE file to edit for your cluster. Every job script sources it inside the job,
# and `python src/submit.py` reads it too. Pick a profile with SCALELAB_PROFILE (default: cpu).
#
# Partition/account/constraint: exported as SBATCH_* input variables, which sbatch reads when it runs, so
# source this file in your shell before `sbatch` (submit.py does that for you):
#     source slurm_jobs/site.sh && sbatch slurm_jobs/single_gpu.sh
# Never put an API key or token in this file: it lives in the repository.

case "${SCALELAB_PROFILE:-cpu}" in
  a100)
    # --- Example: an A100 cluster with InfiniBand (adapt the names to your site) ---------------------
    # export SBATCH_PARTITION=gpu              # sbatch --partition
    # export SBATCH_ACCOUNT=my_project         # sbatch --account
    # export SBATCH_CONSTRAINT=a100            # sbatch --constraint
    # module purge && module load cuda/12.4 nccl/2.21   # modules your site needs
    # source "$HOME/venvs/scalelab/bin/activate"        # where torch (CUDA build) + scalelab live
    export NCCL_DEBUG=${NCCL_DEBUG:-WARN}            # INFO prints rings/transports: proof that IB is used
    # export NCCL_IB_HCA=mlx5                        # the InfiniBand adapters NCCL may use
    # export NCCL_SOCKET_IFNAME=ib0                  # bootstrap interface (not the slow ethernet)
    # export NCCL_IB_TIMEOUT=22                      # longer IB timeout on busy fabrics
    export SCALELAB_ACCELERATOR=gpu
    ;;
  cpu)
    # --- CPU rehearsal: the local test cluster (tests/slurm_cluster/start.sh) or any cluster without GPUs.
    # The GPU headers stay as they are (the local cluster has fake a100 gres); each "GPU" becomes a CPU
    # process talking gloo.
    export SBATCH_PARTITION=${SBATCH_PARTITION:-debug}
    export SCALELAB_ACCELERATOR=cpu
    ;;
  *)
    echo "site.sh: unknown SCALELAB_PROFILE='${SCALELAB_PROFILE}' (use a100 or cpu)" >&2
    return 2 2>/dev/null || exit 2
    ;;
esac

# The Python that runs train.py: an activated environment wins, else the repo's .venv (from `make`).
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x "${SCALELAB_ROOT:-.}/.venv/bin/python" ]; then
  export SCALELAB_PYTHON="${SCALELAB_ROOT:-.}/.venv/bin/python"
else
  export SCALELAB_PYTHON="${SCALELAB_PYTHON:-python}"
fi
