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

# --- linked mode (SCALELAB_SLURM_LINK_GBIT set) -------------------------------------------------------
# Each slurmd in its own network namespace; node-to-node traffic over one veth pair shaped with tc tbf.
# Only documentation ranges, never one the host uses: 203.0.113.0/24 (TEST-NET-3) for the control veths
# between the host and each node, 198.51.100.0/24 (TEST-NET-2) for the shaped link between the nodes.
# The names and addresses are fixed, so there is one linked cluster per machine (start.sh checks).
LINK_NETNS_PREFIX=scalelab-slurm-n   # + K: /run/netns/scalelab-slurm-n1, ...
LINK_HOST_ADDR=203.0.113.254         # the host's end of every control veth (slurmctld's address)
LINK_CTL_NET=203.0.113               # .K: node K's end of its control veth
LINK_DATA_NET=198.51.100             # .K: node K's end of the shaped link (its NodeAddr)
link_netns() { echo "$LINK_NETNS_PREFIX$1"; }
link_host_if() { echo "scl-h$1"; }   # host side of node K's control veth
link_node_if() { echo "scl-n$1"; }   # node side of it
link_data_if() { echo "scl-d$1"; }   # node K's end of the shaped link
# STATE_DIR/link.made lists what start.sh created ("netns NAME", "veth NAME"), written before each is made,
# so stop.sh removes exactly that, also after a start that failed halfway. STATE_DIR/link.gbit: the rate.
