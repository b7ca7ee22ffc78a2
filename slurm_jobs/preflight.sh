#!/usr/bin/env bash
# Before the first sbatch: what the cluster offers, what your profile asks for, and one verdict line.
#
#   SCALELAB_PROFILE=a100 bash slurm_jobs/preflight.sh [--gpu]
#
# Prints the partitions with their GPU types (sinfo), your accounts (sacctmgr), what the profile sets
# (partition, account, constraint, modules, the Python jobs run) and the GPUs the job scripts ask for, then
# READY or NOT READY: <reason>. Pure bash and SLURM's clients: no Python needed on the login node.
# --gpu also runs one short job on one GPU with the profile's partition/account/constraint (srun reads no
# SBATCH_* variable, so they are passed as flags): the driver's CUDA version (nvidia-smi; on AMD nodes rocm-smi
# and the ROCm version) against the CUDA (or ROCm) torch was built for, and whether torch sees the GPU.
# Exit status: 0 READY, 1 NOT READY, 2 a usage error.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GPU_CHECK=0
for arg in "$@"; do
  case "$arg" in
    --gpu) GPU_CHECK=1 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "preflight.sh: unknown argument '$arg' (use --gpu or --help)" >&2; exit 2 ;;
  esac
done

PROFILE=${SCALELAB_PROFILE:-auto}
REASONS=()
not_ready() { REASONS+=("$*"); }
verdict() {
  if ((${#REASONS[@]})); then
    local out="${REASONS[0]}" r
    for r in "${REASONS[@]:1}"; do out+="; $r"; done
    echo "NOT READY: $out"
    exit 1
  fi
  echo "READY: $*"
  exit 0
}

# --- the profile ------------------------------------------------------------------------------------------
if ! SCALELAB_LOAD_MODULES=0 source slurm_jobs/site.sh; then  # site.sh said why, in one line
  echo "NOT READY: profile $PROFILE does not load (slurm_jobs/site.sh, docs/09-adapting-site-sh.md)"
  exit 1
fi
set -u
sets=""
read -r -a names <<< "${SCALELAB_SITE_SET:-}"  # words, never expanded; a word that is no name is not looked up
for v in "${names[@]}"; do [[ $v =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && sets+=" $v=${!v:-}"; done
# The GPUs the job scripts ask for per node: --gres=gpu:N in their headers, any type; the profile's SCALELAB_GPU_TYPE
# names one (sweep.sh and submit.py then ask gpu:TYPE:N).
GRES_TYPE="" GRES_MAX=0
for f in slurm_jobs/single_gpu.sh slurm_jobs/single_node_multi_gpu.sh slurm_jobs/multi_node_multi_gpu.sh; do
  g=$(sed -n 's/^#SBATCH --gres=gpu:\(.*\)$/\1/p' "$f")
  [ -n "$g" ] || continue
  n=${g##*:}
  [[ $g == *:* ]] && GRES_TYPE=${g%:*}
  ((n > GRES_MAX)) && GRES_MAX=$n
done
GRES_TYPE=${SCALELAB_GPU_TYPE:-$GRES_TYPE}
NODES_MAX=$(sed -n 's/^#SBATCH --nodes=\([0-9]*\)$/\1/p' slurm_jobs/*.sh | sort -n | tail -1)
ASK="gpu:${GRES_TYPE:+$GRES_TYPE:}$GRES_MAX"

echo "scalelab preflight: profile $PROFILE (slurm_jobs/site.sh)"
echo "  sets:        ${sets# }"
echo "  partition:   ${SBATCH_PARTITION:-(none: the default partition)}"
echo "  account:     ${SBATCH_ACCOUNT:-(none: your default account)}"
echo "  constraint:  ${SBATCH_CONSTRAINT:-(none)}"
echo "  job scripts: up to $ASK per node (--gres in slurm_jobs/*.sh${SCALELAB_GPU_TYPE:+, the type from SCALELAB_GPU_TYPE})"
if [ -n "${SBATCH_MEM_PER_GPU:-}" ]; then
  echo "  memory:      $SBATCH_MEM_PER_GPU per GPU (--mem-per-gpu)"
else
  echo "  memory:      (none asked: the partition default)"
fi
echo "  modules:     ${SCALELAB_MODULES:-(none)}"
echo "  python:      $SCALELAB_PYTHON"

if [ -n "${SCALELAB_MODULES:-}" ] && ! type module >/dev/null 2>&1 &&
   ! { [ -r /etc/profile.d/lmod.sh ] || [ -r /etc/profile.d/modules.sh ]; }; then
  not_ready "profile $PROFILE names modules but this shell has no 'module' command"
fi
if ! command -v "$SCALELAB_PYTHON" >/dev/null 2>&1; then
  not_ready "no Python at $SCALELAB_PYTHON (bash slurm_jobs/setup_cluster.sh makes it; SCALELAB_VENV says where)"
fi

# --- the cluster ------------------------------------------------------------------------------------------
if ! command -v sinfo >/dev/null 2>&1; then
  not_ready "no sinfo here: run this on the cluster's login node"
  verdict ""
fi
echo "partitions and GPU types (sinfo):"
sinfo -o '%15P %.5a %.6D %.10l  %G' 2>&1 | sed 's/^/  /'
PARTS=$(sinfo -h -o '%P|%a|%D|%G|%m' 2>/dev/null)
[ -n "$PARTS" ] || { not_ready "sinfo lists no partition (is SLURM reachable from here?)"; verdict ""; }

to_mb() {  # a SLURM memory size (32G, 64000 = MB, 500M, 1T) in MB; nothing when it is not one
  local v=${1^^}
  [[ $v =~ ^([0-9]+)([KMGT]?)B?$ ]] || return 0
  case ${BASH_REMATCH[2]:-M} in
    K) echo $((BASH_REMATCH[1] / 1024)) ;; M) echo "${BASH_REMATCH[1]}" ;;
    G) echo $((BASH_REMATCH[1] * 1024)) ;; T) echo $((BASH_REMATCH[1] * 1048576)) ;;
  esac
}
memory_check() {  # the partition's default memory, and whether the profile's --mem-per-gpu fits its nodes
  local rows=$1 defaults node_mb ask_mb
  defaults=$(scontrol show partition "$PART" 2>/dev/null | grep -o '\(Def\|Max\)MemPer[A-Za-z]*=[^ ]*' | paste -sd' ' -)
  node_mb=$(cut -d'|' -f5 <<<"$rows" | tr -d '+' | sort -n | tail -1)
  echo "memory in partition $PART: ${node_mb:+nodes of ${node_mb}M; }${defaults:-no default shown (scontrol show partition)}"
  [ -n "${SBATCH_MEM_PER_GPU:-}" ] || return 0
  ask_mb=$(to_mb "$SBATCH_MEM_PER_GPU")
  if [ -z "$ask_mb" ]; then
    not_ready "SBATCH_MEM_PER_GPU='$SBATCH_MEM_PER_GPU' is not a size (e.g. 32G); set SCALELAB_MEM_PER_GPU in profile $PROFILE"
  elif [[ $node_mb =~ ^[0-9]+$ ]] && ((ask_mb * GRES_MAX > node_mb)); then
    not_ready "profile $PROFILE asks $GRES_MAX x $SBATCH_MEM_PER_GPU of host memory per node but partition '$PART' nodes" \
              "have ${node_mb}M: set SCALELAB_MEM_PER_GPU lower, or none for the partition's default"
  fi
}

USER_NAME=${USER:-$(id -un)}
echo "your accounts (sacctmgr, user $USER_NAME):"
ACCOUNTS=$(sacctmgr -nP show assoc user="$USER_NAME" format=account,partition,qos 2>/dev/null)
if [ -n "$ACCOUNTS" ]; then
  echo "  account|partition|qos"
  sed 's/^/  /' <<<"$ACCOUNTS"
else
  echo "  (none listed: this site keeps no accounts in sacctmgr, or it is not reachable from here)"
fi

# Nodes that can take a job now (idle, mixed, allocated, completing; "~": powered down, it powers up): a drained,
# down or unresponsive node makes a job that needs it pend for good, and `sbatch --wait` wait silently.
node_check() {
  local states usable bad
  states=$(site_node_states "$PART")   # slurm_jobs/site.sh
  [ -n "$states" ] || return 0
  usable=${states%%|*} bad=${states#*|}
  echo "nodes of partition $PART that can take a job: $usable${bad:+; not: $bad}"
  ((usable >= ${NODES_MAX:-1})) ||
    not_ready "partition '$PART' has $usable node(s) that can take a job; the job scripts need ${NODES_MAX:-1}" \
              "(not: $bad): they would wait until one returns (ask the site, or pick another partition)"
}

# The partition jobs will land in: the profile's, else the default one (sinfo marks it with *).
PART=${SBATCH_PARTITION:-}
if [ -z "$PART" ]; then
  PART=$(awk -F'|' '$1 ~ /\*$/ { sub(/\*$/, "", $1); print $1; exit }' <<<"$PARTS")
  [ -n "$PART" ] || not_ready "no partition in the profile and the cluster has no default: set SBATCH_PARTITION in profile $PROFILE"
fi
if [ -n "$PART" ]; then
  ROWS=$(awk -F'|' -v p="$PART" '{ n = $1; sub(/\*$/, "", n) } n == p' <<<"$PARTS")
  if [ -z "$ROWS" ]; then
    not_ready "partition '$PART' is not in sinfo (partitions: $(cut -d'|' -f1 <<<"$PARTS" | tr -d '*' | sort -u | paste -sd' ' -))"
  else
    grep -q '|up|' <<<"$ROWS" || not_ready "partition '$PART' is not up ($(cut -d'|' -f2 <<<"$ROWS" | sort -u | paste -sd' ' -))"
    # Does a node of it have the GPUs the job scripts ask for? gres entries look like gpu:a100:4(S:0-1),gpu:2
    fits=$(cut -d'|' -f4 <<<"$ROWS" | tr ',' '\n' | sed 's/(.*//' | awk -F: -v t="$GRES_TYPE" -v n="$GRES_MAX" '
      $1 == "gpu" { c = $NF + 0; ty = (NF == 3) ? $2 : ""; if ((t == "" || ty == t) && c >= n) { print $0; exit } }')
    offered=$(cut -d'|' -f4 <<<"$ROWS" | sort -u | paste -sd' ' -)
    # The types a node of it offers, as --gres or SCALELAB_GPU_TYPE would name them (gpu:TYPE:N; AutoDetect names
    # such as nvidia_a100-sxm4-80gb included)
    types=$(cut -d'|' -f4 <<<"$ROWS" | tr ',' '\n' | sed 's/(.*//' | awk -F: '$1 == "gpu" && NF == 3 { print $2 }' |
            sort -u | paste -sd' ' -)
    echo "GPU types in partition $PART: ${types:-(none named: gpu:N only)}; the job scripts ask ${GRES_TYPE:-any type}"
    [ -n "$fits" ] || not_ready "partition '$PART' has no node with $ASK (it offers: $offered); pick another partition" \
                                "(SBATCH_PARTITION) or GPU type (SCALELAB_GPU_TYPE) in profile $PROFILE (docs/09-adapting-site-sh.md)"
    memory_check "$ROWS"
    node_check
  fi
fi
if [ -n "${SBATCH_ACCOUNT:-}" ] && [ -n "$ACCOUNTS" ] && ! cut -d'|' -f1 <<<"$ACCOUNTS" | grep -qx "$SBATCH_ACCOUNT"; then
  not_ready "account '$SBATCH_ACCOUNT' is not one of yours ($(cut -d'|' -f1 <<<"$ACCOUNTS" | sort -u | paste -sd' ' -))"
fi

# --- one GPU, with the profile's partition and account ----------------------------------------------------
if ((GPU_CHECK)) && ((${#REASONS[@]} == 0)); then
  FLAGS=(--nodes=1 --ntasks=1 --time=5 "--gres=gpu:${GRES_TYPE:+$GRES_TYPE:}1" "--partition=$PART")
  [ -n "${SBATCH_ACCOUNT:-}" ] && FLAGS+=("--account=$SBATCH_ACCOUNT")
  [ -n "${SBATCH_CONSTRAINT:-}" ] && FLAGS+=("--constraint=$SBATCH_CONSTRAINT")
  echo "one GPU: srun ${FLAGS[*]} ..."
  # A ROCm build of torch has torch.version.hip instead of .cuda, and answers torch.cuda.* for AMD GPUs
  CHECK_PY='import torch; ok = torch.cuda.is_available(); hip = getattr(torch.version, "hip", None)
print("torch:", torch.__version__, "| built for", f"ROCm {hip}" if hip else f"CUDA {torch.version.cuda}", "| sees GPU",
ok, torch.cuda.get_device_name(0) if ok else "")'
  NODE_SH='if command -v nvidia-smi >/dev/null; then echo "driver: $(nvidia-smi | grep -o "CUDA Version: [0-9.]*")"
elif command -v rocm-smi >/dev/null; then echo "driver: ROCm $(cat "${ROCM_PATH:-/opt/rocm}/.info/version" 2>/dev/null || echo "?") (rocm-smi)"
else echo "driver: no nvidia-smi or rocm-smi on $(hostname)"; fi
"$1" -c "$2"'
  OUT=$(srun "${FLAGS[@]}" bash -c "$NODE_SH" bash "$SCALELAB_PYTHON" "$CHECK_PY" 2>&1)
  rc=$?
  sed 's/^/  /' <<<"$OUT"
  if ((rc != 0)); then
    not_ready "the one-GPU job failed (exit $rc): $(tail -1 <<<"$OUT")"
  elif [ "${SCALELAB_ACCELERATOR:-auto}" != cpu ] && ! grep -q "sees GPU True" <<<"$OUT"; then
    not_ready "torch sees no GPU in the job (a CPU build, or a CUDA build newer than the driver: compare the two lines above)"
  fi
fi

verdict "profile $PROFILE, partition $PART, $ASK per node available${SBATCH_ACCOUNT:+, account $SBATCH_ACCOUNT}; next: export SCALELAB_PROFILE=$PROFILE && source slurm_jobs/site.sh && sbatch slurm_jobs/single_gpu.sh"
