"""scalelab/entry.py's env_rank: the global rank a launcher announced, in the order the variables are trusted."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


_KEY = st.from_regex(r"[A-Z0-9]{12,20}", fullmatch=True)
_NEAR_KEY_FLAG = st.one_of(
    st.integers(len("--comet_a"), len("--comet_api_key") - 1).map(lambda n: "--comet_api_key"[:n]),  # abbreviated
    st.sampled_from(["--comet_api_keys", "--comet-api-key", "--comet_apikey", "--comet_api_kee", "--commet_api_key"]))
_OTHER = st.lists(st.sampled_from(["--model", "mlp", "--seed", "1", "--max_step", "3", "stray"]), max_size=4)


@settings(max_examples=200, deadline=None)
@given(_KEY, _NEAR_KEY_FLAG, st.booleans(), _OTHER, _OTHER)
def test_a_key_given_to_a_flag_near_the_key_flag_is_never_repeated_by_the_error(key, flag, joined, before, after):
    """Flags are whole names now (no abbreviations), so `--comet_api KEY` is an unknown flag: the one-line error
    names the flag and its fix, never the key (it lands in a job's log)."""
    from scalelab import config
    from scalelab.errors import UsageError

    given = [f"{flag}={key}"] if joined else [flag, key]
    with pytest.raises(UsageError) as err:
        config.parse_config([*before, *given, *after])
    assert key not in str(err.value)
