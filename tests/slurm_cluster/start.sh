#!/usr/bin/env bash
# Start a real 2-node SLURM cluster on this one machine (Debian 12, root), for the tests and CI.
#
#   eval "$(tests/slurm_cluster/start.sh [STATE_DIR])"     # default ${SCALELAB_SLURM_DIR:-/tmp/scalelab-slurm}
#
# Runs its own mariadb, munged, slurmdbd, slurmctld and two slurmd (node1, node2) with configs, PID files,
# logs (STATE_DIR/log/) and spool under STATE_DIR; system services are neither used nor touched.
# Progress goes to stderr; stdout is a single line, `export SLURM_CONF=<STATE_DIR>/slurm.conf`, the only
# thing a client needs. Idempotent: an already running cluster is left as it is; of a partly-up one (a slurmd
# killed) only what died is started again, its queue, job ids and accounting kept.
#
# Linked mode: SCALELAB_SLURM_LINK_GBIT=<rate> (e.g. 0.2) puts each slurmd in its own network namespace,
# pinned to its own core(s), the two nodes joined by a veth pair that tc tbf shapes to <rate> Gbit/s in each
# direction; stop.sh removes the namespaces, veths and routes again. Beside a plain cluster it needs its own
# STATE_DIR and SCALELAB_SLURM_PORT_OFFSET:
#   SCALELAB_SLURM_LINK_GBIT=0.2 SCALELAB_SLURM_PORT_OFFSET=200 tests/slurm_cluster/start.sh /tmp/scalelab-slurm-link
# docs/10-rehearsing-locally.md says why the pieces are set up this way (and the pitfalls it avoids).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"
STATE_DIR=$(scalelab_state_dir "${1:-}")
WAIT_S=${SCALELAB_SLURM_WAIT_S:-60}
LINK_GBIT=${SCALELAB_SLURM_LINK_GBIT:-}   # empty: the plain cluster (all on the host's network)
export SLURM_CONF=$STATE_DIR/slurm.conf

say() { echo "[slurm-cluster] $*" >&2; }

# --- packages ---------------------------------------------------------------------------------------
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
BINARIES=(slurmctld slurmd slurmstepd slurmdbd sbatch srun sacct sacctmgr munged mungekey mariadbd
          mariadb-install-db mariadb mariadb-admin unshare)
if [[ -n $LINK_GBIT ]]; then
    PACKAGES+=(iproute2)   # ip and tc; nsenter and taskset come with util-linux (essential)
    BINARIES+=(ip tc nsenter taskset)
fi

packages_missing() {
    local p b
    for p in "${PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) == ii* ]] || return 0
    done
    for b in "${BINARIES[@]}"; do
        PATH=$PATH:/usr/sbin:/sbin command -v "$b" >/dev/null || return 0
    done
    return 1
}

install_packages() {
    local apt_log=$STATE_DIR/log/apt.log added_policy=
    # Installing must not start the system's own munge/mariadb/slurm services: a policy-rc.d that
    # refuses every start does that (Docker images ship one already; only add ours if there is none).
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT   # also when interrupted
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        added_policy=1
    fi
    say "installing ${PACKAGES[*]} (log: $apt_log)"
    local rc=0
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "${PACKAGES[@]}" >"$apt_log" 2>&1 || rc=$?
    if ((rc != 0)); then
        # Most likely stale or absent package lists (fresh CI image): refresh once and retry.
        say "apt-get install failed (rc=$rc); running apt-get update and retrying"
        rc=0
        { apt-get update && apt-get install -y --no-install-recommends "${PACKAGES[@]}"; } >>"$apt_log" 2>&1 || rc=$?
    fi
    if [[ -n $added_policy ]]; then
        rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    fi
    if ((rc != 0)); then
        say "ERROR: package installation failed (rc=$rc); last lines of $apt_log:"
        tail -n 30 "$apt_log" >&2
        exit 1
    fi
}

# --- helpers ----------------------------------------------------------------------------------------
cluster_up() {
    local d
    for d in "${DAEMONS[@]}"; do live_pid "${d%%:*}" "${d##*:}" >/dev/null || return 1; done
    timeout 10 sinfo -h >/dev/null 2>&1
}

any_running() {
    local d
    for d in "${DAEMONS[@]}"; do live_pid "${d%%:*}" "${d##*:}" >/dev/null && return 0; done
    return 1
}

# Clear failure message + the log that explains it, then tear down whatever this run started.
die() {
    local msg=$1 logf=${2:-}
    say "ERROR: $msg"
    if [[ -n $logf && -f $logf ]]; then
        say "last lines of $logf:"
        tail -n 40 "$logf" >&2
    fi
    say "stopping what was started (logs kept in $STATE_DIR/log)"
    SCALELAB_SLURM_LOCK_HELD=1 "$HERE/stop.sh" "$STATE_DIR" >&2 || true
    exit 1
}

# wait_until DESCRIPTION LOGFILE CMD...: poll CMD until it succeeds or the shared deadline passes.
wait_until() {
    local desc=$1 logf=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < DEADLINE)) || die "timed out after ${WAIT_S}s waiting for $desc" "$logf"
        sleep 0.2
    done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Run a daemon detached from our stdout/stderr: a caller that captures this script's output (pytest's
# subprocess.run, `eval "$(...)"`) would otherwise wait for EOF until the daemon exits.
# The lock fd is closed too, or the daemons would hold the lock for their whole life.
detached() { setsid "$@" </dev/null >>"$STATE_DIR/log/launch.log" 2>&1 9>&-; }

# Both nodes registered and responding (idle, or running the jobs a repair left queued).
nodes_answer() {
    local states
    states=$(sinfo -h -N -p debug -o '%N %t' 2>/dev/null | sort -u)
    [[ $(wc -l <<<"$states") == 2 && $states != *'*'* && $states != *down* && $states != *unk* ]]
}

nodes_idle() {
    local states
    states=$(sinfo -h -N -p debug -o '%N %t' 2>/dev/null | sort -u)
    [[ $states == $'node1 idle\nnode2 idle' ]]
}

# --- linked mode ------------------------------------------------------------------------------------
# The CPUs this script may use (its affinity list, e.g. "0-3,6" in /proc), one per line.
allowed_cpus() {
    local part
    for part in $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' ' '); do
        if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
    done
}

ip2int() {
    local IFS=. a
    read -ra a <<<"$1"
    echo $(((a[0] << 24) + (a[1] << 16) + (a[2] << 8) + a[3]))
}

# overlaps NET/LEN NET/LEN: one range contains the other.
overlaps() {
    local n1=${1%/*} l1=32 n2=${2%/*} l2=32 m
    [[ $1 == */* ]] && l1=${1#*/}
    [[ $2 == */* ]] && l2=${2#*/}
    m=$((l1 < l2 ? l1 : l2))
    ((m == 0)) && return 0
    (($(ip2int "$n1") >> (32 - m) == $(ip2int "$n2") >> (32 - m)))
}

# Refuse before creating anything when the names are taken (another linked cluster: one per machine) or
# when the host already uses part of our two ranges: our /32 routes there would divert the host's traffic.
link_preflight() {
    local k dest range
    for k in 1 2; do
        [[ ! -e /run/netns/$(link_netns "$k") ]] ||
            die "network namespace $(link_netns "$k") exists: another linked cluster runs (one per machine; stop it with stop.sh and its state folder)"
        ! ip link show "$(link_host_if "$k")" >/dev/null 2>&1 ||
            die "interface $(link_host_if "$k") exists: another linked cluster runs (one per machine)"
    done
    # Every destination of every route table, and every address with its prefix ("default" covers all
    # and is fine: our /32 routes are more specific and only lead to our own veths).
    while read -r dest; do
        for range in "$LINK_CTL_NET.0/24" "$LINK_DATA_NET.0/24"; do
            ! overlaps "$dest" "$range" ||
                die "the host already uses $dest, which overlaps $range (linked mode adds routes there); remove it or use the plain cluster"
        done
    done < <({ ip -4 route show table all | awk '{print ($1 ~ /^[0-9]/) ? $1 : $2}'
               ip -4 -o addr show | awk '{print $4}'; } | grep -E '^[0-9.]+(/[0-9]+)?$')
}

# net CMD...: one step of the network set-up; logged, and on failure the start is undone (die -> stop.sh).
net() {
    echo "+ $*" >>"$STATE_DIR/log/network.log"
    "$@" >>"$STATE_DIR/log/network.log" 2>&1 || die "network set-up failed: $*" "$STATE_DIR/log/network.log"
}

# made KIND NAME: record an object in link.made before creating it, so stop.sh removes it even if this
# start dies right after.
made() { echo "$1 $2" >>"$STATE_DIR/link.made"; }

# Per node K: namespace, control veth to the host (/32 addresses and routes: point to point, no subnet on the
# host), and its end of the data veth between the namespaces, shaped by tbf on egress (so both directions).
link_up() {
    local k ns hif nif rate_kbit burst
    rate_kbit=$(awk -v g="$LINK_GBIT" 'BEGIN { printf "%d", g * 1e6 + 0.5 }')
    # tbf's bucket: at least 256 KiB (a few 64 KiB GSO packets), or a millisecond at the rate on fast links.
    burst=$(awk -v k="$rate_kbit" 'BEGIN { b = k / 8; printf "%d", (b > 262144 ? b : 262144) }')
    echo "$LINK_GBIT" >"$STATE_DIR/link.gbit"
    for k in 1 2; do
        ns=$(link_netns "$k") hif=$(link_host_if "$k") nif=$(link_node_if "$k")
        made netns "$ns"
        net ip netns add "$ns"
        net ip -n "$ns" link set lo up
        made veth "$hif"
        net ip link add "$hif" type veth peer name "$nif" netns "$ns"
        net ip addr add "$LINK_HOST_ADDR/32" dev "$hif"
        net ip link set "$hif" up
        net ip -n "$ns" addr add "$LINK_CTL_NET.$k/32" dev "$nif"
        net ip -n "$ns" link set "$nif" up
        # slurmctld reaches node K at its data address (NodeAddr) through K's control veth: the link between
        # the nodes carries only node-to-node traffic, and the host needs no forwarding.
        net ip route add "$LINK_CTL_NET.$k/32" dev "$hif"
        net ip route add "$LINK_DATA_NET.$k/32" dev "$hif"
        net ip -n "$ns" route add "$LINK_HOST_ADDR/32" dev "$nif"
    done
    # Created inside the namespaces: it never exists in the host's.
    net ip link add "$(link_data_if 1)" netns "$(link_netns 1)" type veth peer name "$(link_data_if 2)" netns "$(link_netns 2)"
    for k in 1 2; do
        ns=$(link_netns "$k")
        net ip -n "$ns" addr add "$LINK_DATA_NET.$k/24" dev "$(link_data_if "$k")"
        net ip -n "$ns" link set "$(link_data_if "$k")" up
        net tc -n "$ns" qdisc add dev "$(link_data_if "$k")" root tbf rate "${rate_kbit}kbit" burst "$burst" latency 50ms
    done
}

# --- main -------------------------------------------------------------------------------------------
((EUID == 0)) || { say "ERROR: must run as root (daemons, mknod, unshare, apt-get)"; exit 1; }
if [[ -n $LINK_GBIT ]] && ! { [[ $LINK_GBIT =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v g="$LINK_GBIT" 'BEGIN { exit !(g > 0) }'; }; then
    say "ERROR: SCALELAB_SLURM_LINK_GBIT=$LINK_GBIT: expected a rate in Gbit/s above 0, e.g. 0.2"
    exit 1
fi
mkdir -p "$STATE_DIR/log"
# Parallel callers (pytest-xdist workers, CI steps) must not start the same cluster twice. stop.sh, when
# run from here while we hold the lock, is told so (SCALELAB_SLURM_LOCK_HELD) instead of waiting for it.
exec 9>"$STATE_DIR/.lock"
flock 9
if packages_missing; then
    t0=$SECONDS
    install_packages
    say "packages installed in $((SECONDS - t0))s"
fi
PATH=$PATH:/usr/sbin:/sbin

if cluster_up; then
    # Left as it is, so it must be the kind asked for: a plain cluster where a link was asked for (or another
    # rate) would measure something else without saying so.
    running_gbit=$(cat "$STATE_DIR/link.gbit" 2>/dev/null || true)
    if [[ $running_gbit != "$LINK_GBIT" ]]; then
        say "ERROR: the cluster running from $STATE_DIR has ${running_gbit:+a $running_gbit Gbit/s link}${running_gbit:-no link} but" \
            "${LINK_GBIT:+a $LINK_GBIT Gbit/s link}${LINK_GBIT:-no link} was asked for: stop it first (stop.sh $STATE_DIR)"
        exit 1
    fi
    say "cluster already running from $STATE_DIR"
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
fi
# The daemons that are not running (their PID file names), e.g. "slurmd-node2".
dead_daemons() {
    local d out=""
    for d in "${DAEMONS[@]}"; do live_pid "${d%%:*}" "${d##*:}" >/dev/null || out+="${d%%:*} "; done
    echo "${out% }"
}

# A partly-up cluster (a slurmd killed, a node "failed") is repaired: only what died is started again, from the
# state it left (its queue, job ids and accounting stay). Where the state it needs is gone, it is restarted fresh.
REPAIR=
if any_running; then
    REPAIR=$(dead_daemons)
    running_gbit=$(cat "$STATE_DIR/link.gbit" 2>/dev/null || true)
    for f in slurm.conf gres.conf slurmdbd.conf my.cnf hosts munge/munge.key; do [[ -e $STATE_DIR/$f ]] || REPAIR=; done
    [[ $running_gbit == "$LINK_GBIT" ]] || REPAIR=
    for k in 1 2; do [[ -z $LINK_GBIT || -e /run/netns/$(link_netns "$k") ]] || REPAIR=; done
    if [[ -z $REPAIR ]]; then
        say "cluster in $STATE_DIR is only partly up and its state is not all there: restarting it"
        SCALELAB_SLURM_LOCK_HELD=1 "$HERE/stop.sh" "$STATE_DIR" >&2
    fi
elif [[ -e $STATE_DIR/link.made || -e $STATE_DIR/link.gbit ]]; then
    say "removing the network a failed linked start in $STATE_DIR left behind"
    SCALELAB_SLURM_LOCK_HELD=1 "$HERE/stop.sh" "$STATE_DIR" >&2
fi
if [[ -n $LINK_GBIT ]]; then
    mapfile -t CPUS < <(allowed_cpus)
    ((${#CPUS[@]} >= 2)) || die "linked mode needs 2 CPUs, one per node; this process may use ${#CPUS[@]}"
    CPUS_PER_NODE=$((${#CPUS[@]} / 2))
fi
DEADLINE=$((SECONDS + WAIT_S))
HOST=$(hostname -s)
MUNGE_SOCKET=$STATE_DIR/munge/munge.socket

# A fresh cluster's state: ports checked, folders, fake GPUs, configuration.
fresh_state() {
for port in "$PORT_DB" "$PORT_DBD" "$PORT_CTLD" $(seq $((PORT_SLURMD_BASE + 1)) $((PORT_SLURMD_BASE + ${#NODES[@]}))); do
    port_busy "$port" && die "port $port on 127.0.0.1 is already in use (another cluster? a second one needs its own STATE_DIR and SCALELAB_SLURM_PORT_OFFSET)"
done
[[ -z $LINK_GBIT ]] || link_preflight

# Every start is a fresh cluster: stale job state or a half-written database from an earlier run only
# causes confusing failures. Only paths this script creates are removed (STATE_DIR may be user-given).
(cd "$STATE_DIR" && rm -rf mysql munge dev spool ./*.pid ./*.mntns slurm.conf gres.conf slurmdbd.conf my.cnf hosts &&
    find log -mindepth 1 -maxdepth 1 ! -name apt.log -exec rm -rf {} +)
mkdir -p "$STATE_DIR"/{log,mysql,munge,dev,spool/ctld}
for n in "${NODES[@]}"; do mkdir -p "$STATE_DIR/spool/slurmd-$n"; done   # slurmd does not create %n dirs
chmod 755 "$STATE_DIR" "$STATE_DIR/munge"   # munged refuses a socket dir others can write to

# Fake GPUs: character devices aliasing /dev/null. gres/gpu needs File= entries that are char devices to
# count them and to set CUDA_VISIBLE_DEVICES; nothing ever opens them.
for i in 0 1 2 3; do mknod -m 666 "$STATE_DIR/dev/nvidia$i" c 1 3; done

# --- configuration ----------------------------------------------------------------------------------
# Linked mode: slurmctld stays in the host's namespace and the nodes reach it through their control veths.
# TaskPlugin stays task/none there too: every task inherits its slurmd's taskset, so it already runs on its
# node's cores only. task/affinity would undo that: it maps a node's CPU 0 to the machine's CPU 0 and so
# bound node2's task to node1's core (measured: mask 0x1 on both nodes); binding right needs cgroups.
CTLD_ADDR=127.0.0.1
if [[ -n $LINK_GBIT ]]; then CTLD_ADDR=$LINK_HOST_ADDR; fi
cat >"$STATE_DIR/slurm.conf" <<EOF
# Generated by tests/slurm_cluster/start.sh; rewritten on every start.
ClusterName=$CLUSTER_NAME
# The controller must be named after this host; the address keeps it off external interfaces.
SlurmctldHost=$HOST($CTLD_ADDR)
SlurmctldPort=$PORT_CTLD
SlurmUser=root
SlurmdUser=root
# Our own munged: clients, daemons and job steps all find its socket here.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$STATE_DIR/spool/ctld
SlurmdSpoolDir=$STATE_DIR/spool/slurmd-%n
SlurmctldPidFile=$STATE_DIR/slurmctld.pid
SlurmdPidFile=$STATE_DIR/slurmd-%n.pid
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups on these machines: CPUs, memory and GPUs are scheduling numbers only.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Nodes declare more CPUs/memory than the machine has (a realistic 16-CPU, 4-GPU node).
SlurmdParameters=config_overrides
# Jobs start within a second instead of waiting for the batch scheduler's default delay.
SchedulerParameters=batch_sched_delay=0
GresTypes=gpu
JobRequeue=1
KillWait=5
# sbatch --wait polls every 2 s only while MinJobAge <= 5; larger values stretch its polling to 8 then
# 32 s, so a 3 s job "takes" 10-40 s. Finished jobs stay visible in sacct (and in squeue for >= 5 s).
MinJobAge=5
ReturnToService=2
MessageTimeout=10
# Slurm wants this well above MessageTimeout; it bounds how long a stuck step can hold a node.
UnkillableStepTimeout=120
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
Waittime=0
MailProg=/bin/true
# Accounting through slurmdbd, so sacct works (submitit relies on it to notice killed jobs).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$PORT_DBD
# slurmctld and the sacct/sacctmgr clients take the munge socket for slurmdbd from here, not AuthInfo.
AccountingStoragePass=$MUNGE_SOCKET
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
EOF
if [[ -z $LINK_GBIT ]]; then
    echo "# Each node is a separate slurmd on this host (MULTIPLE_SLURMD) with its own port and loopback address."
    for i in "${!NODES[@]}"; do
        k=$((i + 1))
        echo "NodeName=${NODES[$i]} NodeHostname=${NODES[$i]} NodeAddr=127.0.1.$k Port=$((PORT_SLURMD_BASE + k)) CPUs=16 RealMemory=16000 Gres=gpu:a100:4 State=UNKNOWN"
    done
else
    echo "# Each node is a slurmd in its own network namespace, pinned to $CPUS_PER_NODE core(s) of its own: CPUs= is what it"
    echo "# really has, so jobs cannot oversubscribe it. NodeAddr is its end of the ${LINK_GBIT} Gbit/s link."
    echo "# A job asking for more CPUs than a node has is refused at submission (not left pending forever)."
    echo "EnforcePartLimits=ALL"
    for i in "${!NODES[@]}"; do
        k=$((i + 1))
        echo "NodeName=${NODES[$i]} NodeHostname=${NODES[$i]} NodeAddr=$LINK_DATA_NET.$k Port=$((PORT_SLURMD_BASE + k)) CPUs=$CPUS_PER_NODE RealMemory=16000 Gres=gpu:a100:4 State=UNKNOWN"
    done
fi >>"$STATE_DIR/slurm.conf"
echo "PartitionName=debug Nodes=node[1-${#NODES[@]}] Default=YES MaxTime=INFINITE State=UP" >>"$STATE_DIR/slurm.conf"

cat >"$STATE_DIR/gres.conf" <<EOF
AutoDetect=off
NodeName=node[1-${#NODES[@]}] Name=gpu Type=a100 File=$STATE_DIR/dev/nvidia[0-3]
EOF

# slurmdbd refuses a config that others can read (it holds the database password).
(umask 077 && cat >"$STATE_DIR/slurmdbd.conf" <<EOF
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$PORT_DBD
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
LogFile=$STATE_DIR/log/slurmdbd.log
PidFile=$STATE_DIR/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$PORT_DB
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
)

cat >"$STATE_DIR/my.cnf" <<EOF
[mysqld]
datadir=$STATE_DIR/mysql
socket=$STATE_DIR/mysql.sock
pid-file=$STATE_DIR/mariadb.pid
log-error=$STATE_DIR/log/mariadb.log
port=$PORT_DB
bind-address=127.0.0.1
user=root
skip-name-resolve
# slurmdbd logs "Database settings not recommended values" for these sizes: harmless for a test
# cluster, and a small redo log keeps the datadir (recreated on every start) small.
innodb_buffer_pool_size=128M
innodb_log_file_size=16M
innodb_lock_wait_timeout=900
EOF

# Private name resolution for the nodes (bind-mounted over /etc/hosts in each slurmd's namespace): jobs
# see node1/node2 and `MASTER_ADDR=$(scontrol show hostnames | head -1)` resolves.
# Linked mode: node names resolve to their ends of the shaped link, so SLURM's node-to-node traffic,
# MASTER_ADDR and gloo all cross it.
{
    if [[ -z $LINK_GBIT ]]; then
        echo "127.0.0.1 localhost $HOST"
        for i in "${!NODES[@]}"; do echo "127.0.1.$((i + 1)) ${NODES[$i]}"; done
    else
        echo "127.0.0.1 localhost"
        echo "$LINK_HOST_ADDR $HOST"
        for i in "${!NODES[@]}"; do echo "$LINK_DATA_NET.$((i + 1)) ${NODES[$i]}"; done
    fi
    echo "::1 localhost ip6-localhost ip6-loopback"
} >"$STATE_DIR/hosts"

}
[[ -n $REPAIR ]] || fresh_state

# --- daemons ----------------------------------------------------------------------------------------
# One function per daemon: a fresh start runs them all (after creating their state), a repair only those that died.
start_munged() {
    detached munged --socket="$MUNGE_SOCKET" --key-file="$STATE_DIR/munge/munge.key" \
        --pid-file="$STATE_DIR/munged.pid" --log-file="$STATE_DIR/log/munged.log" \
        --seed-file="$STATE_DIR/munge/munged.seed" || die "munged failed to start" "$STATE_DIR/log/munged.log"
    wait_until "munged" "$STATE_DIR/log/munged.log" bash -c 'munge -S "$1" -n | unmunge -S "$1"' _ "$MUNGE_SOCKET"
}

start_mariadb() {
    # mariadbd does not daemonize itself.
    setsid mariadbd --defaults-file="$STATE_DIR/my.cnf" </dev/null >>"$STATE_DIR/log/mariadb.log" 2>&1 9>&- &
    # Record the PID now (setsid execs mariadbd in place), not when mariadbd gets round to it: a failed start
    # must still be able to stop it.
    echo $! >"$STATE_DIR/mariadb.pid"
    wait_until "mariadb" "$STATE_DIR/log/mariadb.log" mariadb-admin --no-defaults --socket="$STATE_DIR/mysql.sock" ping
}

start_slurmdbd() {
    detached slurmdbd || die "slurmdbd failed to start" "$STATE_DIR/log/slurmdbd.log"
    wait_until "slurmdbd (sacctmgr show cluster)" "$STATE_DIR/log/slurmdbd.log" sacctmgr -n show cluster
}

start_slurmctld() {
    detached slurmctld || die "slurmctld failed to start" "$STATE_DIR/log/slurmctld.log"
    wait_until "slurmctld (sinfo)" "$STATE_DIR/log/slurmctld.log" sinfo -h
}

# Each slurmd gets its own hostname (UTS namespace) and its own /etc/hosts (mount namespace); the job
# steps it starts inherit both, so they look like processes on separate machines. Linked mode: its own network
# namespace and cores too (nsenter --net, not `ip netns exec`: that remounts /sys, and slurmd then finds no
# /sys/fs/cgroup and fails).
start_slurmd() {
    local n=$1 k cores
    if [[ -z $LINK_GBIT ]]; then
        detached unshare --uts --mount --propagation private -- \
            sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec slurmd -N "$1"' sh "$n" "$STATE_DIR/hosts" ||
            die "slurmd $n failed to start" "$STATE_DIR/log/slurmd-$n.log"
    else
        k=${n#node}
        cores=$(IFS=,; echo "${CPUS[*]:(k-1)*CPUS_PER_NODE:CPUS_PER_NODE}")
        detached nsenter --net="/run/netns/$(link_netns "$k")" unshare --uts --mount --propagation private -- \
            sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec taskset -c "$3" slurmd -N "$1"' \
            sh "$n" "$STATE_DIR/hosts" "$cores" ||
            die "slurmd $n failed to start" "$STATE_DIR/log/slurmd-$n.log"
    fi
    wait_until "slurmd $n PID file" "$STATE_DIR/log/slurmd-$n.log" live_pid "slurmd-$n" slurmd
    # Remember the node's mount namespace: stop.sh uses it to find job processes left behind by slurmd.
    readlink "/proc/$(live_pid "slurmd-$n" slurmd)/ns/mnt" >"$STATE_DIR/slurmd-$n.mntns"
}

if [[ -n $REPAIR ]]; then
    say "cluster in $STATE_DIR is only partly up: starting what died ($REPAIR), keeping its queue and accounting"
    cd "$STATE_DIR"
    for d in munged mariadb slurmdbd slurmctld "${NODES[@]}"; do
        case " $REPAIR " in
            *" $d "*) "start_$d" ;;
            *" slurmd-$d "*) start_slurmd "$d" ;;
        esac
    done
    # a restarted node registers and returns to service by itself (ReturnToService=2): wait until both answer
    wait_until "node1 and node2 answering in sinfo" "$STATE_DIR/log/slurmctld.log" nodes_answer
else
    if [[ -n $LINK_GBIT ]]; then
        say "making the network: namespaces $(link_netns 1) and $(link_netns 2), a $LINK_GBIT Gbit/s link (log: $STATE_DIR/log/network.log)"
        link_up
    fi
    say "starting cluster in $STATE_DIR"
    cd "$STATE_DIR"   # daemons keep their cwd: not the caller's, which may be a temporary directory

    mungekey -c -k "$STATE_DIR/munge/munge.key" 2>>"$STATE_DIR/log/launch.log" || die "mungekey failed" "$STATE_DIR/log/launch.log"
    start_munged
    mariadb-install-db --defaults-file="$STATE_DIR/my.cnf" --auth-root-authentication-method=socket \
        --skip-test-db >>"$STATE_DIR/log/mariadb-install.log" 2>&1 ||
        die "mariadb-install-db failed" "$STATE_DIR/log/mariadb-install.log"
    start_mariadb
    mariadb --no-defaults --socket="$STATE_DIR/mysql.sock" -u root <<'EOF' 2>>"$STATE_DIR/log/launch.log" || die "creating the slurm database user failed" "$STATE_DIR/log/launch.log"
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF
    start_slurmdbd
    # The cluster must exist in the database before slurmctld registers, or its first job records are lost.
    sacctmgr -i add cluster "$CLUSTER_NAME" >>"$STATE_DIR/log/launch.log" 2>&1 ||
        die "sacctmgr add cluster failed" "$STATE_DIR/log/launch.log"
    start_slurmctld
    for n in "${NODES[@]}"; do start_slurmd "$n"; done
    wait_until "node1 and node2 idle in sinfo" "$STATE_DIR/log/slurmctld.log" nodes_idle
fi

for d in "${DAEMONS[@]}"; do
    live_pid "${d%%:*}" "${d##*:}" >/dev/null || die "${d%%:*} is not running after start" "$STATE_DIR/log/${d%%:*}.log"
done
if [[ -n $LINK_GBIT ]]; then
    say "cluster up: partition debug, nodes node[1-2] in namespaces $(link_netns 1) and $(link_netns 2)," \
        "$CPUS_PER_NODE core(s) each, joined by a $LINK_GBIT Gbit/s link (took ${SECONDS}s)"
else
    say "cluster up: partition debug, nodes node[1-2] (took ${SECONDS}s)"
fi
echo "export SLURM_CONF=$SLURM_CONF"
