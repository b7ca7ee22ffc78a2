"""scalelab/entry.py's env_rank: the global rank a launcher announced, in the order the variables are trusted."""

import pytest

from scalelab import entry
from scalelab.launch import cluster


@pytest.mark.parametrize("environ, rank", [({}, 0), ({"LOCAL_RANK": "3"}, 3),
                                           ({"SLURM_PROCID": "5", "LOCAL_RANK": "1"}, 5),
                                           ({"RANK": "7", "SLURM_PROCID": "5", "LOCAL_RANK": "1"}, 7),
                                           ({"RANK": "0", "SLURM_PROCID": "5"}, 0)])
def test_env_rank_trusts_torchrun_then_srun_then_the_local_rank(environ, rank):
    assert entry.env_rank(environ) == rank


def test_env_rank_reads_this_process_environment_by_default(monkeypatch):
    for name in entry.RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "2")
    assert entry.env_rank() == 2 and cluster.env_rank() == 2  # launch.cluster hands on the same function
