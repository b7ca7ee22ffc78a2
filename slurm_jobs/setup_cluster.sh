#!/usr/bin/env bash
# The install on a cluster's login node, in one command (docs/01-setup.md):
#
#   SCALELAB_PROFILE=a100 bash slurm_jobs/setup_cluster.sh [--dry-run]
#
# 1. reads the profile from slurm_jobs/site.sh and loads its modules (SCALELAB_MODULES);
# 2. creates the virtual environment at SCALELAB_VENV (default .venv in the checkout; where the home quota is
#    small, put it on project or scratch space and set SCALELAB_VENV in the profile too, so jobs find it);
# 3. installs torch at the version the Makefile pins, the CUDA build that matches the GPU nodes' driver:
#    SCALELAB_CUDA=cu128 (or cpu; rocmX.Y for AMD GPUs) names it; unset, it is read from `nvidia-smi` (run this on
#    a GPU node, or find it with `srun -p <partition> --gres=gpu:1 nvidia-smi`). The index is
#    https://download.pytorch.org/whl/<variant> (SCALELAB_TORCH_INDEX replaces the whole URL, e.g. a mirror);
# 4. pip install -e . (scalelab and the rest of its requirements), then prints what torch it got.
#
# --dry-run prints every command and runs none. pip runs with --no-cache-dir: its cache would fill a small home.
# Then: SCALELAB_PROFILE=<profile> bash slurm_jobs/preflight.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "setup_cluster.sh: $*" >&2; exit 2; }
DRY=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (use --dry-run or --help)" ;;
  esac
done

# The torch pin: the Makefile's, so the cluster runs the version the tests ran.
TORCH_PIN=$(sed -n 's/^TORCH *?= *//p' Makefile)
[[ $TORCH_PIN == torch==* ]] || die "no 'TORCH ?= torch==X.Y.Z' line in the Makefile"
# The CUDA builds published for that torch (newest last); SCALELAB_CUDA_VARIANTS replaces the list. Check
# https://download.pytorch.org/whl/torch/ for the wheels of your pin when the Makefile's pin changes.
VARIANTS=${SCALELAB_CUDA_VARIANTS:-cu126 cu128 cu130}

# --- 1. the profile ---------------------------------------------------------------------------------------
PROFILE=${SCALELAB_PROFILE:-auto}
SCALELAB_LOAD_MODULES=0 source slurm_jobs/site.sh || exit 2   # site.sh says what is wrong, in one line
VENV=${SCALELAB_VENV:-.venv}
PY=${PYTHON:-python3}

show() {  # the command as you would type it
  local a out="+"
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=+@%,-]+$ ]]; then out+=" $a"; else out+=" '${a//\'/\'\\\'\'}'"; fi
  done
  echo "$out"
}
step() { show "$@"; [ "$DRY" = 1 ] || "$@"; }

# --- 2. which torch build ---------------------------------------------------------------------------------
# "CUDA Version: 12.8" in nvidia-smi's header (top right) is the newest CUDA the driver runs.
driver_cuda() { nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -1; }
variant_version() { local v=${1#cu}; echo "${v:0:${#v}-1}.${v: -1}"; }  # cu128 -> 12.8, cu118 -> 11.8
pick_variant() {  # the newest variant the driver runs; else the oldest of its major (CUDA minor compatibility)
  local drv=$1 best="" same_major="" v maj min dmaj=${1%%.*} dmin=${1#*.}
  for v in $VARIANTS; do
    IFS=. read -r maj min <<<"$(variant_version "$v")"
    if ((maj < dmaj || (maj == dmaj && min <= dmin))); then best=$v; fi
    if ((maj == dmaj)) && [ -z "$same_major" ]; then same_major=$v; fi
  done
  echo "${best:-$same_major}"
}

if [ -n "${SCALELAB_CUDA:-}" ]; then
  CUDA=$SCALELAB_CUDA
  [[ $CUDA =~ ^(cu[0-9]{3}|cpu|rocm[0-9]+\.[0-9]+(\.[0-9]+)?)$ ]] ||
    die "SCALELAB_CUDA='$CUDA' is not cuXYZ (e.g. cu126, cu128), rocmX.Y (AMD GPUs, e.g. rocm6.4) or cpu"
  WHY="SCALELAB_CUDA"
elif [ "${SCALELAB_ACCELERATOR:-auto}" = cpu ]; then
  CUDA=cpu WHY="profile $PROFILE trains on CPU"
elif command -v nvidia-smi >/dev/null 2>&1; then
  DRIVER=$(driver_cuda)
  [ -n "$DRIVER" ] || die "nvidia-smi printed no 'CUDA Version: X.Y' (no GPU or no driver here?): set SCALELAB_CUDA=cuXYZ"
  CUDA=$(pick_variant "$DRIVER")
  [ -n "$CUDA" ] || die "the driver runs CUDA $DRIVER, older than every build of $TORCH_PIN ($VARIANTS): ask your site" \
                        "for a newer driver, or set SCALELAB_CUDA"
  WHY="nvidia-smi: the driver runs CUDA $DRIVER; builds of $TORCH_PIN: $VARIANTS"
elif command -v rocm-smi >/dev/null 2>&1; then
  # AMD GPUs: torch's ROCm builds live at download.pytorch.org/whl/rocmX.Y (RCCL, under torch's backend name
  # "nccl"). Which ROCm versions a torch release is built for changes with each release: named, not guessed.
  ROCM=$(sed -n '1s/^\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' "${ROCM_PATH:-/opt/rocm}/.info/version" 2>/dev/null)
  die "an AMD GPU node (rocm-smi${ROCM:+, ROCm $ROCM here}): set SCALELAB_CUDA=rocmX.Y, a ROCm build of $TORCH_PIN" \
      "(https://download.pytorch.org/whl/torch/ lists its +rocmX.Y wheels${ROCM:+; e.g. SCALELAB_CUDA=rocm$ROCM if listed})"
else
  # srun reads no SBATCH_*: the profile's partition and account go on its command line, or it lands elsewhere.
  probe="srun -N1 --gres=gpu:1 --time=5${SBATCH_PARTITION:+ -p $SBATCH_PARTITION}${SBATCH_ACCOUNT:+ -A $SBATCH_ACCOUNT}"
  die "no nvidia-smi here (a login node without GPUs?): read 'CUDA Version' from '$probe nvidia-smi'" \
      "and set SCALELAB_CUDA (e.g. SCALELAB_CUDA=cu128 for 12.8 or newer), or run this on a GPU node"
fi
INDEX=${SCALELAB_TORCH_INDEX:-https://download.pytorch.org/whl/$CUDA}

echo "setup_cluster.sh: profile $PROFILE, venv $VENV, $TORCH_PIN from $INDEX ($WHY)"
if [ -n "${SCALELAB_MODULES:-}" ]; then
  show module purge
  show module load $SCALELAB_MODULES
  [ "$DRY" = 1 ] || site_load_modules || exit 2
else
  echo "# profile $PROFILE loads no modules (SCALELAB_MODULES in slurm_jobs/site.sh): python3 is $(command -v "$PY" || echo missing)"
fi

# --- 3. the environment -----------------------------------------------------------------------------------
# The oldest Python scalelab claims (setup.cfg's python_requires) is the one its tests run under; an older python3
# (RHEL 8's 3.6, RHEL 9's 3.9) would fail later inside pip with a page of output.
NEED=$(sed -n 's/^python_requires *= *>= *\([0-9.]*\).*/\1/p' setup.cfg)
if [ "$DRY" != 1 ] || [ -z "${SCALELAB_MODULES:-}" ]; then  # a dry run loads no modules: their python is unknown
  HAVE=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || die "no '$PY' to make the venv with: load a Python $NEED module (SCALELAB_MODULES in slurm_jobs/site.sh) or set PYTHON"
  [ "$(printf '%s\n%s\n' "$NEED" "$HAVE" | sort -V | head -1)" = "$NEED" ] || die "$PY is Python $HAVE; scalelab needs $NEED or newer: load a newer Python module (SCALELAB_MODULES in slurm_jobs/site.sh) or set PYTHON=python$NEED"
fi
parent=$(dirname "$VENV")
if [ "$DRY" != 1 ] && [ -d "$parent" ]; then
  free_gb=$(df -Pk "$parent" | awk 'NR == 2 { printf "%d", $4 / 1048576 }')
  echo "# $free_gb GB free where the venv goes ($parent); a CUDA torch takes about 6 GB (quota: your site's command, e.g. 'quota -s')"
fi
if [ -x "$VENV/bin/python" ]; then
  echo "# $VENV exists: reused"
else
  step "$PY" -m venv "$VENV"
fi
step "$VENV/bin/python" -m pip install --no-cache-dir "$TORCH_PIN" --index-url "$INDEX"
step "$VENV/bin/python" -m pip install --no-cache-dir -e .
step "$VENV/bin/python" -c 'import torch; print("torch", torch.__version__, "| built for CUDA", torch.version.cuda, "| ROCm", torch.version.hip)'
case "$VENV" in
  .venv|./.venv) ;;
  *) echo "# jobs find this venv when the profile says so: site_export SCALELAB_VENV \"$VENV\" in slurm_jobs/site.sh" ;;
esac
echo "# next: SCALELAB_PROFILE=$PROFILE bash slurm_jobs/preflight.sh"
