#!/usr/bin/env bash
# Smoke test of the running local cluster: submits real jobs and checks what SLURM made of them.
#
#   tests/slurm_cluster/smoke.sh [STATE_DIR]      # no STATE_DIR: $SLURM_CONF, else the default STATE_DIR
#
# The torch part uses the python3 on PATH (activate the project's venv first); it is skipped with a
# message when that python has no torch. Exits non-zero with a message on the first failed check; the last
# line counts the checks that passed and names any that were skipped.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"
STATE_DIR=$(scalelab_state_dir "${1:-}")
# An explicit STATE_DIR wins over an exported SLURM_CONF.
if [[ -n ${1:-} || -z ${SLURM_CONF:-} ]]; then export SLURM_CONF=$STATE_DIR/slurm.conf; fi
JOB_TIMEOUT_S=${SCALELAB_SMOKE_JOB_TIMEOUT_S:-120}

say() { echo "[smoke] $*"; }
PASSED=0
SKIPPED=()   # "check N" for each check that could not run here
passed() { PASSED=$((PASSED + 1)); }   # not ((PASSED++)): it returns 1 from 0, and set -e would end the script
fail() {
    echo "[smoke] FAIL: $*" >&2
    exit 1
}

timeout 10 sinfo -h >/dev/null 2>&1 || fail "no cluster answers for SLURM_CONF=$SLURM_CONF (run start.sh first)"

WORK=$(mktemp -d /tmp/scalelab-smoke.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# submit_wait ARGS...: sbatch --wait with a bound (a stuck job must fail the smoke test, not hang CI);
# prints the job id. sbatch --wait exits with the job's exit code, so it is not checked here.
submit_wait() {
    local out rc=0
    out=$(timeout "$JOB_TIMEOUT_S" sbatch --wait --parsable --time=5 --chdir="$WORK" "$@" 2>"$WORK/sbatch.err") || rc=$?
    ((rc != 124)) || fail "job did not finish within ${JOB_TIMEOUT_S}s: sbatch $*"
    [[ $out =~ ^[0-9]+ ]] || fail "sbatch $* did not submit (rc=$rc): $(cat "$WORK/sbatch.err")"
    echo "${out%%;*}"
}

# sacct_state ID EXPECTED: sacct lags behind squeue, so poll until the job's own line shows EXPECTED.
sacct_state() {
    local id=$1 want=$2 line=
    for _ in $(seq 1 40); do
        line=$(sacct -j "$id" --format=JobID,State,ExitCode -n -P 2>/dev/null | grep "^$id|" || true)
        [[ $line == "$id|$want|"* ]] && { echo "$line"; return 0; }
        sleep 0.5
    done
    fail "sacct for job $id: expected $want, got '${line:-nothing}'"
}

# 1. Two nodes x two tasks with four fake A100s each: every task sees its node's name and all 4 GPUs.
say "check 1: 2 nodes x 2 tasks, --gres=gpu:a100:4"
id1=$(submit_wait --nodes=2 --ntasks-per-node=2 --gres=gpu:a100:4 --output="$WORK/job1.out" \
    --wrap 'srun bash -c "echo \$(hostname) \$SLURM_PROCID \$CUDA_VISIBLE_DEVICES"')
out=$(sort -k2n "$WORK/job1.out")
echo "$out" | sed 's/^/    /'
expected=$'node1 0 0,1,2,3\nnode1 1 0,1,2,3\nnode2 2 0,1,2,3\nnode2 3 0,1,2,3'
[[ $out == "$expected" ]] || fail "job $id1 output differs from the expected:"$'\n'"$expected"
passed

# 2. Real cross-node communication: torch gloo all_reduce over 2 nodes x 2 tasks, rendezvous on node1.
if python3 -c 'import torch' 2>/dev/null; then
    say "check 2: torch gloo all_reduce, 2 nodes x 2 tasks ($(command -v python3))"
    cat >"$WORK/allreduce.py" <<'EOF'
import os, socket
import torch
import torch.distributed as dist

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", rank=rank, world_size=world)  # env://: MASTER_ADDR, MASTER_PORT
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(socket.gethostname(), rank, int(t.item()), flush=True)
dist.destroy_process_group()
EOF
    cat >"$WORK/allreduce.sbatch" <<'EOF'
#!/bin/bash
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))
srun python3 allreduce.py
EOF
    id2=$(submit_wait --nodes=2 --ntasks-per-node=2 --output="$WORK/job2.out" "$WORK/allreduce.sbatch")
    out=$(grep -E '^node[0-9]+ [0-9]+ [0-9]+$' "$WORK/job2.out" | sort -k2n || true)
    echo "$out" | sed 's/^/    /'
    expected=$'node1 0 10\nnode1 1 10\nnode2 2 10\nnode2 3 10'
    [[ $out == "$expected" ]] || fail "job $id2 all_reduce output wrong; job output:"$'\n'"$(cat "$WORK/job2.out")"
    line=$(sacct_state "$id2" COMPLETED)
    passed
else
    say "check 2: SKIPPED (python3 on PATH, $(command -v python3 || echo none), cannot import torch)"
    SKIPPED+=("check 2")
fi

# 3. A request no node can satisfy must be refused at submit time, as on a real cluster.
say "check 3: --gres=gpu:h100:8 must be refused"
if out=$(sbatch --parsable --chdir="$WORK" --gres=gpu:h100:8 --wrap true 2>&1); then
    scancel "${out%%;*}" 2>/dev/null || true
    fail "sbatch --gres=gpu:h100:8 was accepted (job $out)"
fi
echo "    refused: $out"
passed

# 4. Accounting: the first job is COMPLETED, a job exiting 3 is FAILED with exit code 3.
say "check 4: sacct shows job $id1 COMPLETED"
line=$(sacct_state "$id1" COMPLETED)   # not inside echo's arguments: set -e would miss a failure
echo "    $line"
passed
say "check 5: a job exiting 3 must be FAILED"
id4=$(submit_wait --output=/dev/null --wrap 'exit 3')
line=$(sacct_state "$id4" FAILED)
echo "    $line"
[[ $line == "$id4|FAILED|3:0" ]] || fail "job $id4: expected exit code 3:0, got '$line'"
passed

if ((${#SKIPPED[@]})); then
    say "$PASSED checks passed, ${#SKIPPED[@]} skipped (${SKIPPED[*]})"
else
    say "all $PASSED checks passed"
fi
