#!/bin/bash
# The sweep's report, as a job: slurm_jobs/sweep.sh submits it with --dependency=afterany:<the training jobs>, so
# it starts once they have all ended, however they ended. It lists each job's final state (sacct), then runs
# src/benchmark.py on the output folder (tables in this log, CSV/Markdown under <output>/report/). By hand:
#     sbatch --mem=4G --dependency=afterany:101:102:103 slurm_jobs/report.sh 101 102 103
# (--mem: this job has no GPU, so the profile's --mem-per-gpu, SBATCH_MEM_PER_GPU, cannot size it; sbatch refuses it)
# Exit status 1 when a job did not complete (the tables then hold the ones that did).
#SBATCH --job-name=sl-report
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --time=00:10:00
#SBATCH --output=outputs/slurm-%j.out
set -uo pipefail
export SCALELAB_ROOT="${SLURM_SUBMIT_DIR:-$PWD}"   # sbatch copies the script away; the repo is where you submitted
cd "$SCALELAB_ROOT" || exit 2
source slurm_jobs/site.sh || exit 2
OUT=${OUTPUT_DIR:-outputs}
(($#)) || { echo "report.sh: no job ids given (sweep.sh passes them: report.sh 101 102 103)" >&2; exit 2; }
echo "scalelab report job ${SLURM_JOB_ID:-?}: jobs $*, results in $OUT/"

final_state() {  # sacct's State once the job has ended; accounting can lag its end by a few seconds
  # A job that ends within a second or two of starting can reach slurmdbd before its start record does: for a
  # few seconds sacct then shows a stand-in row named "allocation" on the first node only (measured on the
  # local cluster: up to 4 s), so that name counts as not recorded yet, like an empty state.
  local row="" state="" tries=0
  while ((tries++ < 60)); do
    row=$(sacct -j "$1" -X -n -P --format=JobName,State 2>/dev/null | head -1)
    state=${row#*|}
    state=${state%% *}   # "CANCELLED by 1000" -> CANCELLED
    [ "${row%%|*}" = allocation ] && state=""
    case "$state" in ""|PENDING|RUNNING|COMPLETING|REQUEUED|RESIZING|SUSPENDED) sleep 1 ;; *) break ;; esac
  done
  echo "${state:-UNKNOWN}"
}

BAD=()
for id in "$@"; do
  state=$(final_state "$id")
  [ "$state" = COMPLETED ] && continue
  name=$(sacct -j "$id" -X -n -P --format=JobName 2>/dev/null | head -1)
  log=$OUT/slurm-$id.out   # where sweep.sh puts each job's log
  if [ -f "$log" ]; then   # the job's own one-line error (scalelab's are "<script>: error: ..."), else its last line
    why=$(grep -E '^[A-Za-z_.-]+\.(py|sh): error: ' "$log" | tail -1)
    why=${why:-$(grep -v '^[[:space:]]*$' "$log" | tail -1)}
  else
    why="no log ($log): it never started"
  fi
  BAD+=("job $id ($name) $state: $why")
done
IDS=$(IFS=,; echo "$*")
sacct -X -j "$IDS" --format=JobID,JobName%24,State%14,ExitCode,Elapsed,NNodes,NodeList%16
echo

"$SCALELAB_PYTHON" src/benchmark.py --output_dir "$OUT" --export "$OUT/report"
rc=$?
if ((${#BAD[@]} == $#)); then
  echo "report.sh: none of the $# job(s) completed; why each did not:" >&2
  printf 'report.sh: %s\n' "${BAD[@]}" >&2
  exit 1
elif ((${#BAD[@]})); then
  echo "report.sh: ${#BAD[@]} of $# job(s) did not complete; the tables hold the ones that did:" >&2
  printf 'report.sh: %s\n' "${BAD[@]}" >&2
  exit 1
fi
exit "$rc"
