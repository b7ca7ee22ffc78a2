"""scalelab/entry.py's env_rank: the global rank a launcher announced, in the order the variables are trusted."""

import pytest
from hypothesis import assume, example, given, settings
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


_KEY = st.from_regex(r"[A-Z0-9]{12,20}", fullmatch=True).flatmap(
    lambda key: st.sampled_from([key, f" {key}", f"{key} x"]))  # a value may hold a space
_NEAR_KEY_NAME = st.one_of(
    st.integers(len("comet_a"), len("comet_api_key")).map(lambda n: "comet_api_key"[:n]),  # abbreviated, or whole
    # (whole, to train.py, it is the key flag itself: taken, with a warning, below)
    st.sampled_from(["comet_api_keys", "comet-api-key", "comet_apikey", "comet_api_kee", "commet_api_key", "api_key",
                     "wandb_token"]))
_NEAR_KEY_FLAG = st.tuples(st.sampled_from(["--", "-", "\u2014", "\u2013\u2013"]), _NEAR_KEY_NAME, st.booleans()).map(
    lambda t: t[0] + (t[1].upper() if t[2] else t[1]))
_OTHER = st.lists(st.sampled_from(["--model", "mlp", "--seed", "1", "--max_step", "3", "stray"]), max_size=4)


def _parse_train(argv):
    from scalelab import config

    config.parse_config(argv)


def _parse_report(argv):
    from scalelab.report import cli

    cli.build_parser().parse_args(argv)


@settings(max_examples=200, deadline=None)
@given(_KEY, _NEAR_KEY_FLAG, st.booleans(), _OTHER, _OTHER, st.sampled_from([_parse_train, _parse_report]))
@example("000000000000", "--comet_api_key", False, [], [], _parse_report)  # the key flag, to what has none
def test_a_key_given_to_a_flag_near_the_key_flag_is_never_repeated_by_the_error(key, flag, joined, before, after,
                                                                                 parse):
    """Flags are whole names now (no abbreviations), so `--comet_api KEY` is an unknown flag: the one-line error
    names the flag, never the key (it lands in a job's log): abbreviated, misspelt, in capitals, with one dash or a
    pasted dash, to train.py or to a command that has no key flag at all (the report)."""
    from scalelab.config_flags import KEY_FLAG
    from scalelab.errors import UsageError

    assume(not (flag == KEY_FLAG and parse is _parse_train))  # the flag itself, not one near it
    given = [f"{flag}={key}"] if joined else [flag, key]
    with pytest.raises(UsageError) as err:
        parse([*before, *given, *after])
    assert key.strip() not in str(err.value)
