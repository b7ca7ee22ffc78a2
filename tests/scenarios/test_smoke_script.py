"""tests/slurm_cluster/smoke.sh's last line counts what it checked: against fake SLURM tools on PATH that answer as
the local cluster does, with and without torch for its check 2."""

import os
import subprocess

import pytest

from helpers import SLURM_CLUSTER

SBATCH = r"""#!/bin/bash
# job ids 1, 2, ...; sacct answers from the job's file; the outputs the cluster's jobs print
dir=$(dirname "$0")
n=$(( $(cat "$dir/ids" 2>/dev/null || echo 0) + 1 ))
out= gres=
for a in "$@"; do case $a in --output=*) out=${a#--output=} ;; --gres=*) gres=${a#--gres=} ;; esac; done
if [[ $gres == gpu:h100:8 ]]; then
    echo "sbatch: error: Batch job submission failed: Requested node configuration is not available" >&2
    exit 1
fi
echo "$n" >"$dir/ids"
if [[ $* == *"exit 3"* ]]; then echo "$n|FAILED|3:0" >"$dir/job$n"; else echo "$n|COMPLETED|0:0" >"$dir/job$n"; fi
[[ $gres == gpu:a100:4 ]] && printf 'node1 0 0,1,2,3\nnode1 1 0,1,2,3\nnode2 2 0,1,2,3\nnode2 3 0,1,2,3\n' >"$out"
[[ ${!#} == *allreduce.sbatch ]] && printf 'node1 0 10\nnode1 1 10\nnode2 2 10\nnode2 3 10\n' >"$out"
echo "$n"
"""


@pytest.mark.parametrize("torch, last", [(True, "[smoke] all 5 checks passed"),
                                         (False, "[smoke] 4 checks passed, 1 skipped (check 2)")])
def test_the_last_line_counts_the_checks_that_passed_and_the_skipped_ones(tmp_path, torch, last):
    tools = {"sbatch": SBATCH, "sacct": '#!/bin/bash\ncat "$(dirname "$0")/job$2"\n', "sinfo": "#!/bin/sh\n",
             "python3": f"#!/bin/sh\nexit {0 if torch else 1}\n"}  # python3 -c 'import torch'
    for name, text in tools.items():
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_CONF": str(tmp_path / "slurm.conf")}
    proc = subprocess.run(["bash", str(SLURM_CLUSTER / "smoke.sh")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == last
    assert ("[smoke] check 2: SKIPPED" in proc.stdout) is not torch
    assert [line for line in lines if line.startswith("[smoke] check ")][-1] == "[smoke] check 5: a job exiting 3 " \
                                                                               "must be FAILED"
