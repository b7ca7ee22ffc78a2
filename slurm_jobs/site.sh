# scalelab site settings: the ONE file to edit for your cluster. Every job script sources it inside the job,
# and `python src/submit.py` reads it too. Pick a profile with SCALELAB_PROFILE (default: auto).
#
# Partition/account/constraint: exported as SBATCH_* input variables, which sbatch reads when it runs, so
# source this file in your shell before `sbatch` (submit.py does that for you):
#     source slurm_jobs/site.sh && sbatch slurm_jobs/single_gpu.sh
# Never put an API key or token in this file: it lives in the repository.

# What a previous `source` of this file set is undone first, so one profile never leaks into the next (a
# partition of `cpu` left behind under `a100`); a variable you exported yourself is left alone.
for _v in ${SCALELAB_SITE_SET:-}; do unset "$_v"; done
export SCALELAB_SITE_SET=""
site_export() {  # export NAME VALUE, remembered in SCALELAB_SITE_SET (the job banner prints what a profile set)
  export "$1=$2"
  SCALELAB_SITE_SET="${SCALELAB_SITE_SET:+$SCALELAB_SITE_SET }$1"
}
gpus_visible() {  # the GPUs this node shows, by name (nvidia-smi -L): empty on a CPU node or a login node
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep '^GPU ' || true
}

# Host memory per GPU, as sbatch --mem-per-gpu (sbatch reads SBATCH_MEM_PER_GPU): a site variable rather than a
# header, because what a node has and what a site allows differ (some sites refuse --mem). Set it in your shell
# (SCALELAB_MEM_PER_GPU=32G) or in your profile below; unset, the site's default applies.
[ -n "${SCALELAB_MEM_PER_GPU:-}" ] && site_export SBATCH_MEM_PER_GPU "$SCALELAB_MEM_PER_GPU"

case "${SCALELAB_PROFILE:-auto}" in
  auto)
    # --- The default: the accelerator follows the hardware the job got (GPUs visible: NCCL; none: CPU, gloo).
    site_export SCALELAB_ACCELERATOR auto
    ;;
  a100)
    # --- Example: an A100 cluster with InfiniBand (adapt the names to your site) ---------------------
    # site_export SBATCH_PARTITION gpu          # sbatch --partition
    # site_export SBATCH_ACCOUNT my_project     # sbatch --account
    # site_export SBATCH_CONSTRAINT a100        # sbatch --constraint
    site_export SBATCH_MEM_PER_GPU "${SCALELAB_MEM_PER_GPU:-64G}"  # host memory per GPU (data loading, checkpoints)
    # module purge && module load cuda/12.4 nccl/2.21   # modules your site needs
    # source "$HOME/venvs/scalelab/bin/activate"        # where torch (CUDA build) + scalelab live
    site_export NCCL_DEBUG "${NCCL_DEBUG:-WARN}"     # INFO prints rings/transports: proof that IB is used
    # site_export NCCL_IB_HCA mlx5                   # the InfiniBand adapters NCCL may use
    # site_export NCCL_SOCKET_IFNAME ib0             # bootstrap interface (not the slow ethernet)
    # site_export NCCL_IB_TIMEOUT 22                 # longer IB timeout on busy fabrics
    site_export SCALELAB_ACCELERATOR gpu
    ;;
  cpu)
    # --- CPU rehearsal: the local test cluster (tests/slurm_cluster/start.sh) or any cluster without GPUs.
    # The GPU headers stay as they are (the local cluster has fake a100 gres); each "GPU" becomes a CPU
    # process talking gloo. On a node with real GPUs that would train on CPU while holding them: refused.
    if [ -n "$(gpus_visible)" ] && [ "${SCALELAB_CPU_ON_GPU:-0}" != 1 ]; then
      echo "site.sh: profile cpu on a node with GPUs ($(gpus_visible | head -1 | cut -d'(' -f1)...): the job would" \
           "train on CPU while holding them; use SCALELAB_PROFILE=auto, or SCALELAB_CPU_ON_GPU=1 to rehearse on CPU" >&2
      return 2 2>/dev/null || exit 2
    fi
    site_export SCALELAB_ACCELERATOR cpu
    ;;
  *)
    echo "site.sh: unknown SCALELAB_PROFILE='${SCALELAB_PROFILE}' (use auto, a100 or cpu)" >&2
    return 2 2>/dev/null || exit 2
    ;;
esac
unset _v

# The Python that runs train.py: an activated environment wins, else the repo's .venv (from `make`).
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x "${SCALELAB_ROOT:-.}/.venv/bin/python" ]; then
  export SCALELAB_PYTHON="${SCALELAB_ROOT:-.}/.venv/bin/python"
else
  export SCALELAB_PYTHON="${SCALELAB_PYTHON:-python}"
fi
