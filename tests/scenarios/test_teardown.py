"""The result is on disk before anything is torn down (train/run.py).

A Trainer's teardown copied the model and optimizer state to host memory after the last step and before the
result was written: on a GPU node with a site memory default, ranks killed there lost every timing. Here rank 0
writes result.json as soon as the loop (and validation) ends and the ranks' figures are gathered. (What the end
of a run costs in memory is measured by benchmarks/end_of_run_memory.py.)
"""

import pytest

from helpers import load_results, run_script

pytestmark = pytest.mark.slow
GPT = ["--model", "gpt", "--preset", "tiny", "--max_steps", "20", "--warmup_steps", "2", "--timeout", "60"]


def test_the_result_is_complete_when_teardown_starts(tmp_path):
    """Rank 0 dies (os._exit(3)) the moment its teardown starts: the result it leaves is the whole run's."""
    proc = run_script("train.py", *GPT, "--devices", 2, "--output_dir", tmp_path,
                      env={"SCALELAB_FAULT": "exit@teardown,rank=0"}, timeout=180)
    assert proc.returncode == 3, proc.stderr[-2000:]
    (r,) = load_results(tmp_path)
    assert r["status"] == "completed" and [k["rank"] for k in r["ranks"]] == [0, 1]
    assert r["timing"]["steps"] == 20 and "scalelab: done in" in proc.stdout
