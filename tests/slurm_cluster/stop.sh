#!/usr/bin/env bash
# Stop the cluster that start.sh started from STATE_DIR (default ${SCALELAB_SLURM_DIR:-/tmp/scalelab-slurm}).
#
# Ends only processes named by its PID files (and job processes inside its nodes' private namespaces):
# TERM, up to ~10 s grace, then KILL. Safe to run twice or when nothing runs; other munge/mariadb/slurm
# processes on the machine are left alone. Logs stay in STATE_DIR/log for post-mortems.
# A linked cluster's network (namespaces, veths and the host routes over them) is removed too: exactly what
# start.sh listed in STATE_DIR/link.made. Exits 1 if any of it is still there afterwards.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"
STATE_DIR=$(scalelab_state_dir "${1:-}")
GRACE_S=${SCALELAB_SLURM_STOP_GRACE_S:-10}
PATH=$PATH:/usr/sbin:/sbin   # ip

say() { echo "[slurm-cluster] $*" >&2; }

[[ -d $STATE_DIR ]] || { say "nothing to stop ($STATE_DIR does not exist)"; exit 0; }
# Wait for a start.sh in progress (unless that start.sh is our caller, cleaning up after a failure).
if [[ -z ${SCALELAB_SLURM_LOCK_HELD:-} ]]; then
    exec 9>"$STATE_DIR/.lock"
    flock 9
fi

# Processes in a node's private mount namespace were all started by that node's slurmd (slurmstepd and
# the job's tasks); slurmstepd outlives slurmd and ignores TERM, so they are ended here explicitly.
ns_processes() {
    local ns=$1 p
    for p in /proc/[0-9]*; do
        [[ $(readlink "$p/ns/mnt" 2>/dev/null) == "$ns" ]] && echo "${p#/proc/}"
    done
    return 0
}

# A namespace id can be reused once its processes are gone: only trust a recorded one while a slurm
# daemon (slurmd/slurmstepd) still lives in it.
node_namespace() {
    local ns_file=$1 ns p
    [[ -s $ns_file ]] || return 0
    ns=$(cat "$ns_file")
    for p in $(ns_processes "$ns"); do
        [[ $(cat "/proc/$p/comm" 2>/dev/null) == slurm* ]] && { echo "$ns"; return 0; }
    done
    return 0
}

# end_group PID...: TERM all, wait up to GRACE_S for all of them, KILL what is left.
end_group() {
    (($#)) || return 0
    kill -TERM "$@" 2>/dev/null || true
    local deadline=$((SECONDS + GRACE_S)) p alive
    while :; do
        alive=()
        for p in "$@"; do running "$p" && alive+=("$p"); done
        ((${#alive[@]})) || return 0
        ((SECONDS < deadline)) || break
        sleep 0.1
    done
    say "killing (no exit after ${GRACE_S}s TERM): ${alive[*]}"
    kill -KILL "${alive[@]}" 2>/dev/null || true
}

pids_of() {
    local d name comm
    for d in "$@"; do
        name=${d%%:*} comm=${d##*:}
        live_pid "$name" "$comm" || true
    done
}

# The network namespaces start.sh recorded that still exist (every process in them is the cluster's).
link_namespaces() {
    local kind name
    [[ -s $STATE_DIR/link.made ]] || return 0
    while read -r kind name; do
        [[ $kind == netns && -e /run/netns/$name ]] && echo "$name"
    done <"$STATE_DIR/link.made"
    return 0
}

# Remove what link.made lists: the host end of a veth takes its peer and the host routes over it along;
# a namespace goes once its mount in /run/netns is gone and no process is left in it (ended above).
link_down() {
    local made=$STATE_DIR/link.made kind name left=()
    [[ -s $made ]] || { rm -f "$made" "$STATE_DIR/link.gbit"; return 0; }
    while read -r kind name; do
        [[ $kind == veth ]] && ip link show "$name" >/dev/null 2>&1 && { ip link del "$name" || true; }
    done <"$made"
    while read -r kind name; do
        [[ $kind == netns && -e /run/netns/$name ]] && { ip netns del "$name" || true; }
    done <"$made"
    while read -r kind name; do
        case $kind in
            veth) ip link show "$name" >/dev/null 2>&1 && left+=("veth $name") ;;
            netns) [[ -e /run/netns/$name ]] && left+=("namespace $name") ;;
        esac
    done <"$made"
    if ((${#left[@]})); then
        say "ERROR: could not remove ${left[*]} (kept in $made: run stop.sh again)"
        return 1
    fi
    say "removed the linked network: $(awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}' "$made")"
    rm -f "$made" "$STATE_DIR/link.gbit"
}

stopped=0
node_ns=()
mapfile -t net_ns < <(link_namespaces)
for n in "${NODES[@]}"; do
    ns=$(node_namespace "$STATE_DIR/slurmd-$n.mntns")
    [[ -n $ns ]] && node_ns+=("$ns")
done

# Controller and nodes together (one after the other would only make stopping slower), then the jobs
# left on the nodes, then slurmdbd (it flushes to the database), then the database and munge.
for tier in "slurmd-node1:slurmd slurmd-node2:slurmd slurmctld:slurmctld" jobs "slurmdbd:slurmdbd" "mariadb:mariadbd munged:munged"; do
    if [[ $tier == jobs ]]; then
        # The cluster is wiped on the next start, so jobs get no grace period; loop in case a task forks.
        for i in $(seq 1 50); do
            mapfile -t pids < <({ for ns in "${node_ns[@]}"; do ns_processes "$ns"; done
                                  for ns in "${net_ns[@]}"; do ip netns pids "$ns" 2>/dev/null; done; } | sort -un)
            ((${#pids[@]})) || break
            ((i > 1)) || stopped=$((stopped + ${#pids[@]}))
            kill -KILL "${pids[@]}" 2>/dev/null || true
            sleep 0.1
        done
        continue
    fi
    # shellcheck disable=SC2086
    mapfile -t pids < <(pids_of $tier)
    stopped=$((stopped + ${#pids[@]}))
    end_group "${pids[@]}"
done

# Every PID file is stale now (or was already): remove them so the next start.sh begins clean.
for d in "${DAEMONS[@]}"; do rm -f "$STATE_DIR/${d%%:*}.pid"; done
rm -f "$STATE_DIR"/slurmd-*.mntns "$STATE_DIR/mysql.sock"
say "stopped $stopped process(es) of the cluster in $STATE_DIR"
link_down
