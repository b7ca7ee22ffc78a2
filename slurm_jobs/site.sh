# scalelab site settings: the ONE file to edit for your cluster. Every job script sources it inside the job,
# and `python src/submit.py` reads it too. Pick a profile with SCALELAB_PROFILE (default: auto).
#
# Partition/account/constraint: exported as SBATCH_* input variables, which sbatch reads when it runs, so
# source this file in your shell before `sbatch` (submit.py does that for you):
#     source slurm_jobs/site.sh && sbatch slurm_jobs/single_gpu.sh
# The job scripts ask `--gres=gpu:N`, any GPU type: an H100 site, or one whose types are AutoDetect names
# (nvidia_a100-sxm4-80gb), accepts that as it is. A profile picks a type by a node feature (SBATCH_CONSTRAINT;
# `sinfo -o '%G %f'` lists both), or by SCALELAB_GPU_TYPE, which sweep.sh and submit.py put into the --gres of
# each job they submit (`sbatch --gres=gpu:TYPE:N` does it by hand). Never SBATCH_GRES: sbatch's variables
# override the scripts' headers, so every job, the 1-GPU one too, would get the same count.
# Never put an API key or token in this file: it lives in the repository.

# What a previous `source` of this file set is undone first, so one profile never leaks into the next (a
# partition of `cpu` left behind under `a100`); a variable you exported yourself is left alone, and so is one you
# changed since (NCCL_DEBUG=INFO sbatch ... in a shell where the profile had set WARN): only a value still equal
# to what the profile set (kept in _SCALELAB_SET_<NAME>) is undone.
# The list is read as words, never expanded (a `*` in it names no files), and a word that is not a variable's name
# is passed by: `${!x[$(cmd)]}` would run cmd.
read -r -a _names <<< "${SCALELAB_SITE_SET:-}"
for _v in "${_names[@]}"; do
  [[ $_v =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
  _rec="_SCALELAB_SET_$_v"
  [ "${!_v-}" = "${!_rec-}" ] && unset "$_v"
  unset "$_rec"
done
unset _names
export SCALELAB_SITE_SET=""
site_export() {  # export NAME VALUE, remembered in SCALELAB_SITE_SET (the job banner prints what a profile set)
  export "$1=$2"
  export "_SCALELAB_SET_$1=$2"
  case " $SCALELAB_SITE_SET " in *" $1 "*) ;; *) SCALELAB_SITE_SET="${SCALELAB_SITE_SET:+$SCALELAB_SITE_SET }$1" ;; esac
}
gpus_visible() {  # the GPUs this node shows, by name: empty on a CPU node or a login node
  if command -v nvidia-smi >/dev/null 2>&1; then   # "GPU 0: NVIDIA A100-SXM4-40GB (UUID: ...)"
    nvidia-smi -L 2>/dev/null | grep '^GPU ' || true
  elif command -v rocm-smi >/dev/null 2>&1; then   # AMD: "GPU[0]   : Card Series:   AMD Instinct MI250X" -> "GPU 0: ..."
    rocm-smi --showproductname 2>/dev/null |
      sed -n 's/^GPU\[\([0-9]*\)\][[:space:]]*:[[:space:]]*Card [Ss]eries:[[:space:]]*\(.*[^[:space:]]\)[[:space:]]*$/GPU \1: \2/p' || true
  fi
}

# How srun places each task (rank) on its node's cores: in order, one block of --cpus-per-task cores per task
# (--distribution=block:block), each task bound to its own (--cpu-bind=cores), so local rank k sits on the socket
# of GPU k (GPUs are numbered along the sockets). srun's default deals a node's tasks round its sockets
# (block:cyclic): at a site that binds tasks, rank 1 lands across the socket link from GPU 1, and the self-check
# fails it ("cores per rank"). Every job script and submit.py pass these to srun where the cluster binds tasks at
# all (TaskPlugin other than task/none: there srun would say "cluster configuration lacks support for cpu binding"
# and bind nothing); SCALELAB_SRUN_BIND="" passes none (the site's own binding), or give your own flags.
srun_bind_default() {
  local plugin
  plugin=$(scontrol show config 2>/dev/null | sed -n 's/^TaskPlugin *= *//p') || plugin=""
  case "$plugin" in ""|task/none) ;; *) echo "--cpu-bind=cores --distribution=block:block" ;; esac
}
export SCALELAB_SRUN_BIND="${SCALELAB_SRUN_BIND-$(srun_bind_default)}"  # no profile's: what this cluster takes
read -r -a SRUN_BIND <<< "$SCALELAB_SRUN_BIND"

# Host memory per GPU, as sbatch --mem-per-gpu (sbatch reads SBATCH_MEM_PER_GPU): a site variable rather than a
# header, because what a node has and what a site allows differ (some sites refuse --mem). A GPU profile asks a
# floor (auto: 32G, a100: 64G): a site's default can be a few GB a node, too little for a rank's torch and CUDA
# libraries (about 4 GB) plus, while a checkpoint is written, the model and AdamW state (16 bytes a parameter:
# 20 GB for gpt-xl, the largest named config). SCALELAB_MEM_PER_GPU=48G in your shell or profile asks that
# instead, SCALELAB_MEM_PER_GPU=none asks nothing (the site's default). slurm_jobs/preflight.sh checks it fits.
site_mem_per_gpu() {  # site_mem_per_gpu DEFAULT: SCALELAB_MEM_PER_GPU, else DEFAULT; "none" or empty: no request
  local v=${SCALELAB_MEM_PER_GPU:-$1}
  [ -z "$v" ] || [ "$v" = none ] || site_export SBATCH_MEM_PER_GPU "$v"
}
site_mem_per_gpu ""   # in any profile, the value you set

case "${SCALELAB_PROFILE:-auto}" in
  auto)
    # --- The default: the accelerator follows the hardware the job got (GPUs visible: NCCL; none: CPU, gloo).
    site_export SCALELAB_ACCELERATOR auto
    site_mem_per_gpu 32G
    ;;
  a100)
    # --- Example: an A100 cluster with InfiniBand (adapt the names to your site) ---------------------
    # site_export SBATCH_PARTITION gpu          # sbatch --partition
    # site_export SBATCH_ACCOUNT my_project     # sbatch --account
    # site_export SBATCH_CONSTRAINT a100        # sbatch --constraint: a node feature (sinfo -o '%f')
    # site_export SCALELAB_GPU_TYPE a100        # only where the type must be in --gres (sinfo -o '%G')
    # site_export SBATCH_EXCLUSIVE user         # where whole nodes queue too long: share them with your own jobs
    #                                           # only ('oversubscribe': with anyone; results say the node was shared)
    site_mem_per_gpu 64G                       # host memory per GPU (data loading, checkpoints)
    # site_export SCALELAB_MODULES "python/3.11"   # modules your site needs (`module avail`): loaded below; no CUDA
    #                                              # module for pip's torch (its wheel brings CUDA and NCCL)
    # site_export SCALELAB_VENV "/project/my_project/$USER/scalelab-venv"  # the venv setup_cluster.sh made (default .venv)
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

# Inside a job: whether its nodes are its alone (the multi-GPU scripts ask --exclusive; a profile may share them,
# and a partition with OverSubscribe=EXCLUSIVE gives whole nodes anyway), read once from SLURM and recorded in
# every result's environment (results.slurm_info turns it into slurm.exclusive). A neighbour's job on the node
# shares its PCIe, memory bandwidth and network card: a scaling table from shared nodes says so.
if [ -n "${SLURM_JOB_ID:-}" ]; then
  _job=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null)
  export SCALELAB_JOB_OVERSUBSCRIBE=$(sed -n 's/.*[[:space:]]OverSubscribe=\([^[:space:]]*\).*/\1/p' <<<"$_job" | head -1)
  _part=$(sed -n 's/.*[[:space:]]Partition=\([^[:space:]]*\).*/\1/p' <<<"$_job" | head -1)
  export SCALELAB_PARTITION_OVERSUBSCRIBE=$([ -n "$_part" ] && scontrol show partition "$_part" 2>/dev/null |
    sed -n 's/.*[[:space:]]OverSubscribe=\([^[:space:]]*\).*/\1/p' | head -1)
  : "${SCALELAB_JOB_OVERSUBSCRIBE:=unknown}" "${SCALELAB_PARTITION_OVERSUBSCRIBE:=unknown}"
  # the time limit: what SLURM's warning (SIGUSR1, 90 s ahead) leaves an attempt (src/scalelab/train/guard/requeue.py)
  export SCALELAB_JOB_TIME_LIMIT=$(sed -n 's/.*[[:space:]]TimeLimit=\([^[:space:]]*\).*/\1/p' <<<"$_job" | head -1)
  unset _job _part
fi

# Partition $1's nodes as "COUNT|node2 drain (REASON), ...": how many can take a job now (idle, mixed, allocated or
# completing; "~": powered down, it powers up), then the others (drained, down, "*" not responding). preflight.sh
# counts them; sweep.sh names them beside a job that waits. Nothing where sinfo lists no node.
site_node_states() {
  sinfo -h -N -p "$1" -o '%N|%t|%E' 2>/dev/null | sort -u | awk -F'|' '
    $2 ~ /^(idle|mix|alloc|comp)~?$/ { n++; next }
    { bad = bad sep $1 " " $2 " (" $3 ")"; sep = ", " }
    END { if (NR) printf "%d|%s\n", n, bad }'
}

# Modules: a profile names them in SCALELAB_MODULES; they are loaded here (module purge, then module load), so every
# job and your shell before sbatch get the same, and slurm_jobs/setup_cluster.sh installs against them.
# SCALELAB_LOAD_MODULES=0 only reads the profile (slurm_jobs/preflight.sh, setup_cluster.sh --dry-run).
site_load_modules() {
  local _f
  if ! type module >/dev/null 2>&1; then  # a non-interactive shell may lack the function: the usual init files
    for _f in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh; do [ -r "$_f" ] && . "$_f" && break; done
  fi
  if ! type module >/dev/null 2>&1; then
    echo "site.sh: profile ${SCALELAB_PROFILE:-auto} names modules ($SCALELAB_MODULES) but this shell has no 'module' command" >&2
    return 2
  fi
  module purge >/dev/null 2>&1 || true
  # shellcheck disable=SC2086  # a list of module names
  module load $SCALELAB_MODULES || {
    echo "site.sh: module load $SCALELAB_MODULES failed (module avail lists this site's names)" >&2; return 2; }
}
if [ -n "${SCALELAB_MODULES:-}" ] && [ "${SCALELAB_LOAD_MODULES:-1}" != 0 ]; then
  site_load_modules || { return 2 2>/dev/null || exit 2; }
fi

# The Python that runs train.py: an activated environment wins, else the venv setup_cluster.sh or `make` made
# (SCALELAB_VENV, default the repo's .venv; a relative path is relative to the repository root).
_venv=${SCALELAB_VENV:-.venv}
case "$_venv" in /*) ;; *) _venv="${SCALELAB_ROOT:-.}/$_venv" ;; esac
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x "$_venv/bin/python" ]; then
  export SCALELAB_PYTHON="$_venv/bin/python"
else
  export SCALELAB_PYTHON="${SCALELAB_PYTHON:-python}"
fi
unset _venv
