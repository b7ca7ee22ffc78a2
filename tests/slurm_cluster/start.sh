#!/usr/bin/env bash
# Start a real 2-node SLURM cluster on this one machine (Debian 12, root), for the tests and CI.
#
#   eval "$(tests/slurm_cluster/start.sh [STATE_DIR])"     # default ${SCALELAB_SLURM_DIR:-/tmp/scalelab-slurm}
#
# Runs its own mariadb, munged, slurmdbd, slurmctld and two slurmd (node1, node2) with configs, PID files,
# logs (STATE_DIR/log/) and spool under STATE_DIR; system services are neither used nor touched.
# Progress goes to stderr; stdout is a single line, `export SLURM_CONF=<STATE_DIR>/slurm.conf`, the only
# thing a client needs. Idempotent: an already running cluster is left as it is.
# docs/10-rehearsing-locally.md says why the pieces are set up this way (and the pitfalls it avoids).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"
STATE_DIR=$(scalelab_state_dir "${1:-}")
WAIT_S=${SCALELAB_SLURM_WAIT_S:-60}
export SLURM_CONF=$STATE_DIR/slurm.conf

say() { echo "[slurm-cluster] $*" >&2; }

# --- packages ---------------------------------------------------------------------------------------
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
BINARIES=(slurmctld slurmd slurmstepd slurmdbd sbatch srun sacct sacctmgr munged mungekey mariadbd
          mariadb-install-db mariadb mariadb-admin unshare)

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

nodes_idle() {
    local states
    states=$(sinfo -h -N -p debug -o '%N %t' 2>/dev/null | sort -u)
    [[ $states == $'node1 idle\nnode2 idle' ]]
}

# --- main -------------------------------------------------------------------------------------------
((EUID == 0)) || { say "ERROR: must run as root (daemons, mknod, unshare, apt-get)"; exit 1; }
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
    say "cluster already running from $STATE_DIR"
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
fi
if any_running; then
    say "cluster in $STATE_DIR is only partly up: restarting it"
    SCALELAB_SLURM_LOCK_HELD=1 "$HERE/stop.sh" "$STATE_DIR" >&2
fi

for port in "$PORT_DB" "$PORT_DBD" "$PORT_CTLD" $(seq $((PORT_SLURMD_BASE + 1)) $((PORT_SLURMD_BASE + ${#NODES[@]}))); do
    port_busy "$port" && die "port $port on 127.0.0.1 is already in use (another cluster? a second one needs its own STATE_DIR and SCALELAB_SLURM_PORT_OFFSET)"
done

# Every start is a fresh cluster: stale job state or a half-written database from an earlier run only
# causes confusing failures. Only paths this script creates are removed (STATE_DIR may be user-given).
(cd "$STATE_DIR" && rm -rf mysql munge dev spool ./*.pid ./*.mntns slurm.conf gres.conf slurmdbd.conf my.cnf hosts &&
    find log -mindepth 1 -maxdepth 1 ! -name apt.log -exec rm -rf {} +)
mkdir -p "$STATE_DIR"/{log,mysql,munge,dev,spool/ctld}
for n in "${NODES[@]}"; do mkdir -p "$STATE_DIR/spool/slurmd-$n"; done   # slurmd does not create %n dirs
chmod 755 "$STATE_DIR" "$STATE_DIR/munge"   # munged refuses a socket dir others can write to
DEADLINE=$((SECONDS + WAIT_S))
HOST=$(hostname -s)
MUNGE_SOCKET=$STATE_DIR/munge/munge.socket

# Fake GPUs: character devices aliasing /dev/null. gres/gpu needs File= entries that are char devices to
# count them and to set CUDA_VISIBLE_DEVICES; nothing ever opens them.
for i in 0 1 2 3; do mknod -m 666 "$STATE_DIR/dev/nvidia$i" c 1 3; done

# --- configuration ----------------------------------------------------------------------------------
cat >"$STATE_DIR/slurm.conf" <<EOF
# Generated by tests/slurm_cluster/start.sh; rewritten on every start.
ClusterName=$CLUSTER_NAME
# The controller must be named after this host; the address keeps it off external interfaces.
SlurmctldHost=$HOST(127.0.0.1)
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
# Each node is a separate slurmd on this host (MULTIPLE_SLURMD) with its own port and loopback address.
EOF
for i in "${!NODES[@]}"; do
    k=$((i + 1))
    echo "NodeName=${NODES[$i]} NodeHostname=${NODES[$i]} NodeAddr=127.0.1.$k Port=$((PORT_SLURMD_BASE + k)) CPUs=16 RealMemory=16000 Gres=gpu:a100:4 State=UNKNOWN"
done >>"$STATE_DIR/slurm.conf"
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
{
    echo "127.0.0.1 localhost $HOST"
    for i in "${!NODES[@]}"; do echo "127.0.1.$((i + 1)) ${NODES[$i]}"; done
    echo "::1 localhost ip6-localhost ip6-loopback"
} >"$STATE_DIR/hosts"

# --- daemons ----------------------------------------------------------------------------------------
say "starting cluster in $STATE_DIR"
cd "$STATE_DIR"   # daemons keep their cwd: not the caller's, which may be a temporary directory

mungekey -c -k "$STATE_DIR/munge/munge.key" 2>>"$STATE_DIR/log/launch.log" || die "mungekey failed" "$STATE_DIR/log/launch.log"
detached munged --socket="$MUNGE_SOCKET" --key-file="$STATE_DIR/munge/munge.key" \
    --pid-file="$STATE_DIR/munged.pid" --log-file="$STATE_DIR/log/munged.log" \
    --seed-file="$STATE_DIR/munge/munged.seed" || die "munged failed to start" "$STATE_DIR/log/munged.log"
wait_until "munged" "$STATE_DIR/log/munged.log" bash -c 'munge -S "$1" -n | unmunge -S "$1"' _ "$MUNGE_SOCKET"

mariadb-install-db --defaults-file="$STATE_DIR/my.cnf" --auth-root-authentication-method=socket \
    --skip-test-db >>"$STATE_DIR/log/mariadb-install.log" 2>&1 ||
    die "mariadb-install-db failed" "$STATE_DIR/log/mariadb-install.log"
# mariadbd does not daemonize itself.
setsid mariadbd --defaults-file="$STATE_DIR/my.cnf" </dev/null >>"$STATE_DIR/log/mariadb.log" 2>&1 9>&- &
# Record the PID now (setsid execs mariadbd in place), not when mariadbd gets round to it: a failed start
# must still be able to stop it.
echo $! >"$STATE_DIR/mariadb.pid"
wait_until "mariadb" "$STATE_DIR/log/mariadb.log" mariadb-admin --no-defaults --socket="$STATE_DIR/mysql.sock" ping
mariadb --no-defaults --socket="$STATE_DIR/mysql.sock" -u root <<'EOF' 2>>"$STATE_DIR/log/launch.log" || die "creating the slurm database user failed" "$STATE_DIR/log/launch.log"
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF

detached slurmdbd || die "slurmdbd failed to start" "$STATE_DIR/log/slurmdbd.log"
wait_until "slurmdbd (sacctmgr show cluster)" "$STATE_DIR/log/slurmdbd.log" sacctmgr -n show cluster
# The cluster must exist in the database before slurmctld registers, or its first job records are lost.
sacctmgr -i add cluster "$CLUSTER_NAME" >>"$STATE_DIR/log/launch.log" 2>&1 ||
    die "sacctmgr add cluster failed" "$STATE_DIR/log/launch.log"

detached slurmctld || die "slurmctld failed to start" "$STATE_DIR/log/slurmctld.log"
wait_until "slurmctld (sinfo)" "$STATE_DIR/log/slurmctld.log" sinfo -h

# Each slurmd gets its own hostname (UTS namespace) and its own /etc/hosts (mount namespace); the job
# steps it starts inherit both, so they look like processes on separate machines.
for n in "${NODES[@]}"; do
    detached unshare --uts --mount --propagation private -- \
        sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec slurmd -N "$1"' sh "$n" "$STATE_DIR/hosts" ||
        die "slurmd $n failed to start" "$STATE_DIR/log/slurmd-$n.log"
done
for n in "${NODES[@]}"; do
    wait_until "slurmd $n PID file" "$STATE_DIR/log/slurmd-$n.log" live_pid "slurmd-$n" slurmd
    # Remember the node's mount namespace: stop.sh uses it to find job processes left behind by slurmd.
    readlink "/proc/$(live_pid "slurmd-$n" slurmd)/ns/mnt" >"$STATE_DIR/slurmd-$n.mntns"
done
wait_until "node1 and node2 idle in sinfo" "$STATE_DIR/log/slurmctld.log" nodes_idle

for d in "${DAEMONS[@]}"; do
    live_pid "${d%%:*}" "${d##*:}" >/dev/null || die "${d%%:*} is not running after start" "$STATE_DIR/log/${d%%:*}.log"
done
say "cluster up: partition debug, nodes node[1-2] (took ${SECONDS}s)"
echo "export SLURM_CONF=$SLURM_CONF"
