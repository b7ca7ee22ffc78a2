# Sourced by start.sh, stop.sh and smoke.sh: where the cluster lives and how to recognise its processes.
# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this

# First argument wins, then $SCALELAB_SLURM_DIR, then a fixed default so CI and the pytest fixture agree.
scalelab_state_dir() {
    local dir=${1:-${SCALELAB_SLURM_DIR:-/tmp/scalelab-slurm}}
    # Absolute path: it is written into slurm.conf and must not depend on the caller's cwd.
    case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
    printf '%s\n' "${dir%/}"
}

CLUSTER_NAME=scalelab
NODES=(node1 node2)
# Fixed ports, so a second cluster needs SCALELAB_SLURM_PORT_OFFSET (e.g. 100) and its own STATE_DIR.
_off=${SCALELAB_SLURM_PORT_OFFSET:-0}
PORT_CTLD=$((16817 + _off))
PORT_DBD=$((16819 + _off))
PORT_DB=$((13306 + _off))
PORT_SLURMD_BASE=$((17000 + _off))   # node K listens on PORT_SLURMD_BASE+K

# Everything start.sh runs, as "PID file name:process name"; the process name guards against a
# recycled PID. (stop.sh ends them in its own order: nodes and controller, slurmdbd, database and munge.)
DAEMONS=(slurmd-node1:slurmd slurmd-node2:slurmd slurmctld:slurmctld slurmdbd:slurmdbd mariadb:mariadbd munged:munged)

# A zombie has exited; it only waits for its parent (init, for daemons) to reap it, which some inits do
# only every couple of seconds. kill -0 still succeeds on it, so look at the state instead.
running() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }   # the field after "(comm)", which may itself contain spaces or parentheses
    [[ ${stat:0:1} != Z ]]
}

# Prints the PID from $STATE_DIR/<name>.pid if that process is running and is really <comm>; else fails.
live_pid() {
    local comm=$2 pidfile=$STATE_DIR/$1.pid pid
    [[ -s $pidfile ]] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    [[ -n $pid ]] && running "$pid" || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm"* ]] || return 1
    printf '%s\n' "$pid"
}
