#!/bin/bash
# The whole scaling sweep from the login node, plain bash (no Python needed there): the 1-GPU, 1-node and 2-node
# jobs, then a report job that SLURM starts once all three have ended (--dependency=afterany: also after a failed
# or cancelled one, so the report says which). Run it from anywhere in the checkout:
#     bash slurm_jobs/sweep.sh                                        # default workload, results in outputs/
#     CONFIG=gpt-small bash slurm_jobs/sweep.sh --output_dir /scratch/$USER/sweep1 -- --max_steps 200
# Options: --output_dir DIR (results and job logs; default $OUTPUT_DIR or outputs), --wait (stay until the report
# job has ended, print its log, exit with its status, as `sbatch --wait` does), then `--` and arguments for
# every src/train.py. The site profile (SCALELAB_PROFILE, slurm_jobs/site.sh) and the variables job_common.sh
# reads (CONFIG, MODEL, PRESET) apply to every job: sbatch passes your environment on.
set -uo pipefail

die() { echo "sweep.sh: $*" >&2; exit 2; }
OUTPUT_DIR=${OUTPUT_DIR:-outputs}
WAIT=
TRAIN_ARGS=()
while (($#)); do
  case "$1" in
    --output_dir) (($# >= 2)) || die "--output_dir needs a folder"; OUTPUT_DIR=$2; shift 2 ;;
    --output_dir=*) OUTPUT_DIR=${1#*=}; shift ;;
    --wait) WAIT=1; shift ;;
    -h|--help) sed -n '2,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; TRAIN_ARGS=("$@"); break ;;
    *) die "unknown argument '$1' (options: --output_dir DIR, --wait; arguments for src/train.py go after --)" ;;
  esac
done
command -v sbatch >/dev/null 2>&1 || die "sbatch not found: run this on a SLURM login node (or start the local cluster, docs/10)"
[ -n "$OUTPUT_DIR" ] || die "--output_dir is empty"
[[ ${SCALELAB_PENDING_AFTER_S:-20} =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  die "SCALELAB_PENDING_AFTER_S='$SCALELAB_PENDING_AFTER_S': give the seconds a job may wait before it is said why"

# The repository root: the job scripts find their code through SLURM_SUBMIT_DIR, the folder sbatch runs in.
HERE=${BASH_SOURCE[0]%/*}; [ "$HERE" = "${BASH_SOURCE[0]}" ] && HERE=.
cd "$HERE/.." || die "cannot enter the repository root ($HERE/..)"
# shellcheck source=slurm_jobs/site.sh
source slurm_jobs/site.sh || die "slurm_jobs/site.sh failed (profile '${SCALELAB_PROFILE:-auto}')"
export OUTPUT_DIR
mkdir -p "$OUTPUT_DIR" 2>/dev/null || die "cannot create $OUTPUT_DIR"

# every job: its id alone, its log by the results; a % of the folder's own name doubled (sbatch reads %j, %u, ... in
# --output as placeholders, and %% as a %)
SBATCH=(sbatch --parsable --output="${OUTPUT_DIR//%/%%}/slurm-%j.out")
submit() {  # sbatch ARGS... -> the job id (sbatch's own error, one line, on failure)
  local out
  out=$("${SBATCH[@]}" "$@" 2>&1) || die "sbatch $*: ${out//$'\n'/ }"
  echo "${out%%;*}"
}

# The scripts ask --gres=gpu:N, any type; a profile's SCALELAB_GPU_TYPE names one: --gres=gpu:TYPE:N on the command
# line, which wins over the header (slurm_jobs/site.sh says why not SBATCH_GRES).
typed_gres() {
  local n
  [ -n "${SCALELAB_GPU_TYPE:-}" ] || return 0
  n=$(sed -n 's/^#SBATCH --gres=gpu:\([0-9][0-9]*\)$/\1/p' "$1")
  [ -n "$n" ] && echo "--gres=gpu:$SCALELAB_GPU_TYPE:$n"
}

IDS=() NAMES=()
submitted() { ((${#IDS[@]})) && echo "sweep.sh: already submitted: ${IDS[*]} (scancel ${IDS[*]} to withdraw them)" >&2; }
for script in single_gpu.sh single_node_multi_gpu.sh multi_node_multi_gpu.sh; do
  GRES=$(typed_gres "slurm_jobs/$script")
  id=$(submit ${GRES:+"$GRES"} "slurm_jobs/$script" "${TRAIN_ARGS[@]}") || { submitted; exit 2; }
  IDS+=("$id") NAMES+=("$script")
done
DEPS=$(IFS=:; echo "${IDS[*]}")
REPORT_JOB=(--dependency="afterany:$DEPS" slurm_jobs/report.sh "${IDS[@]}")
unset SBATCH_MEM_PER_GPU   # the report asks for one core and no GPU: the profile's --mem-per-gpu would not fit it
if [ -n "$WAIT" ]; then
  # sbatch --wait prints the id once the job is queued and exits, with the job's own status, once it has ended.
  exec 3< <("${SBATCH[@]}" --wait "${REPORT_JOB[@]}" 2>&1; echo "exit $?")
  read -r REPORT <&3
  [[ $REPORT =~ ^[0-9]+ ]] || { submitted; die "sbatch ${REPORT_JOB[*]}: $REPORT"; }
  REPORT=${REPORT%%;*}
else
  REPORT=$(submit "${REPORT_JOB[@]}") || { submitted; exit 2; }
fi

echo "sweep: submitted to SLURM, results and logs in $OUTPUT_DIR/"
for i in "${!IDS[@]}"; do
  printf '  %-8s %s\n' "${IDS[$i]}" "slurm_jobs/${NAMES[$i]}"
done
printf '  %-8s %s\n' "$REPORT" "slurm_jobs/report.sh (starts after ${DEPS//:/, } have ended: afterany)"
echo "watch:  squeue --me        or  sacct -j $(IFS=,; echo "${IDS[*]}"),$REPORT"
echo "report: $OUTPUT_DIR/slurm-$REPORT.out"
[ -n "$WAIT" ] || exit 0

echo "waiting for the report job $REPORT (Ctrl-C stops the waiting, not the jobs)"
# A job that waits in the queue says why (squeue's reason, once per reason), after SCALELAB_PENDING_AFTER_S: a
# drained node must not look like a slow queue. (Waiting on another job, the report's Dependency, is no news.)
# SLURM says "Resources" for a job that waits for a drained node: the partition's nodes that take no job are named.
say_why_waiting() {
  local -A said=()
  local id name reason part out
  sleep "${SCALELAB_PENDING_AFTER_S:-20}"
  while :; do
    while IFS='|' read -r id name reason part; do
      [[ $reason == None || $reason == Dependency ]] && continue
      out=$(site_node_states "$part")   # slurm_jobs/site.sh
      out=${out#*|}
      reason+=${out:+; taking no job in partition $part: $out}
      [[ ${said[$id]:-} == "$reason" ]] && continue
      said[$id]=$reason
      echo "sweep.sh: job $id ($name) is waiting in the queue: $reason (squeue --me)" >&2
    done < <(squeue -h -t PD -j "$1" -o '%i|%j|%r|%P' 2>/dev/null)
    sleep 5
  done
}
say_why_waiting "$(IFS=,; echo "${IDS[*]},$REPORT")" &
WATCH=$!
rc=$(sed -n 's/^exit //p' <&3)
kill "$WATCH" 2>/dev/null
wait "$WATCH" 2>/dev/null
if [ -f "$OUTPUT_DIR/slurm-$REPORT.out" ]; then
  cat "$OUTPUT_DIR/slurm-$REPORT.out"
else
  echo "sweep.sh: the report job $REPORT wrote no log ($OUTPUT_DIR/slurm-$REPORT.out): sacct -j $REPORT says why" >&2
fi
exit "${rc:-1}"
