"""The MPCDF tutorial's Comet flags and config keys run unchanged: they choose --logger comet, its key goes into
COMET_API_KEY with a warning, and the key reaches no file, no setting and no output of the run."""

import hashlib
import importlib.util
import json
import os
import textwrap

import pytest

from helpers import SRC, run_script
from scalelab import config
from scalelab.train import loggers

KEY = "planted-comet-key-5c1e9a"
# the tutorial's job line (slurm_jobs/*.sh) with its Comet flags
TUTORIAL_LINE = ["--max_epochs", "50", "--batch_size", "32", "--learning_rate", "0.0001", "--hidden_dims", "64", "32",
                 "16", "--dropout", "0.2", "--num_samples", "10000", "--num_workers", "4", "--output_dir", "outputs"]
COMET_FLAGS = ["--comet_api_key", KEY, "--comet_project", "mpcdf-raven-tutorial", "--comet_workspace", "my-team",
               "--experiment_name", "spiral_mlp_1gpu"]
# the keys of the tutorial's configs/default_config.yaml, its commented-out workspace and key set
TUTORIAL_YAML = textwrap.dedent("""\
    num_samples: 10000
    noise: 0.2
    hidden_dims: [64, 32, 16]
    dropout: 0.2
    max_epochs: 50
    batch_size: 32
    learning_rate: 0.001
    num_workers: 4
    comet_project: "mpcdf-raven-tutorial"
    output_dir: "outputs"
    seed: 42
    """)
WARNING = ("train.py: warning: --comet_api_key puts the key where others can read it (ps, SLURM's accounting, a "
           "config file); the environment variable COMET_API_KEY is safer: export it in the job's environment instead")


def test_the_tutorial_line_with_its_comet_flags_chooses_comet_and_keeps_no_key(monkeypatch, capsys):
    monkeypatch.setenv("COMET_API_KEY", "from-the-environment")
    cfg = config.parse_config(TUTORIAL_LINE + COMET_FLAGS)
    assert cfg.logger == "comet"
    assert (cfg.comet_project, cfg.comet_workspace, cfg.experiment_name) == (
        "mpcdf-raven-tutorial", "my-team", "spiral_mlp_1gpu")
    assert (cfg.max_epochs, cfg.batch_size, cfg.learning_rate, cfg.hidden_dims) == (50, 32, 0.0001, [64, 32, 16])
    assert os.environ["COMET_API_KEY"] == KEY  # where comet_ml reads it; the flag wins, as in the tutorial
    assert KEY not in repr(cfg) and KEY not in config.settings_yaml(cfg)
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [WARNING]


def test_the_tutorial_config_file_loads_and_chooses_comet(tmp_path, capsys):
    (tmp_path / "default_config.yaml").write_text(TUTORIAL_YAML)
    cfg = config.parse_config(["--config", str(tmp_path / "default_config.yaml")])
    assert (cfg.logger, cfg.comet_project, cfg.comet_workspace, cfg.experiment_name) == (
        "comet", "mpcdf-raven-tutorial", None, None)
    assert (cfg.noise, cfg.dropout, cfg.num_workers, cfg.max_epochs, cfg.num_samples) == (0.2, 0.2, 4, 50, 10000)
    assert capsys.readouterr().err == ""  # no key given: nothing to warn about


def test_a_key_in_the_config_file_beside_logger_csv_is_used_nowhere(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMET_API_KEY", "from-the-environment")
    (tmp_path / "c.yaml").write_text(TUTORIAL_YAML + f"comet_workspace: my-team\ncomet_api_key: {KEY}\n")
    cfg = config.parse_config(["--config", str(tmp_path / "c.yaml"), "--logger", "csv"])
    assert (cfg.logger, cfg.comet_project, cfg.comet_workspace) == ("csv", None, None)
    assert os.environ["COMET_API_KEY"] == "from-the-environment"  # not comet: the key is not even passed on
    assert capsys.readouterr().err.splitlines() == [
        WARNING, "train.py: warning: --comet_project, --comet_workspace, --comet_api_key apply to --logger comet "
                 "only: not used with --logger csv"]


@pytest.mark.parametrize("argv, kept", [
    (["--model", "mlp", "--comet_api_key", KEY, "--seed", "1"], ["--model", "mlp", "--seed", "1"]),
    ([f"--comet_api_key={KEY}", "--comet_project", "p"], ["--comet_project", "p"]),
    (["--comet_api", KEY, "--experiment_name", "e"], ["--experiment_name", "e"]),  # abbreviated (refused by train.py)
    (["--comet_workspace", "w"], ["--comet_workspace", "w"]),
])
def test_without_key_drops_the_flag_and_its_value_only(argv, kept):
    assert loggers.without_key(argv) == kept


@pytest.fixture
def fake_comet(tmp_path):
    """A stand-in comet_ml (Lightning's CometLogger checks the distribution's version) that records what it was
    given: the project, workspace and name, and a hash of the key it found in the environment."""
    root = tmp_path / "fake"
    (root / "comet_ml").mkdir(parents=True)
    (root / "comet_ml-3.47.0.dist-info").mkdir()
    (root / "comet_ml-3.47.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: comet-ml\n"
                                                                  "Version: 3.47.0\n")
    (root / "comet_ml" / "__init__.py").write_text(textwrap.dedent("""\
        import hashlib, json, os

        class ExperimentConfig:
            def __init__(self, **kwargs):
                self.kwargs = kwargs

        class Experiment:
            def __init__(self, project):
                self.project_name = project

            def get_key(self):
                return "fake-experiment"

            def __getattr__(self, name):  # log_other, __internal_api__log_metrics__, flush, ...
                return lambda *args, **kwargs: None

        def start(api_key=None, workspace=None, project=None, experiment_config=None, **kwargs):
            key = api_key or os.environ.get("COMET_API_KEY", "")
            with open(os.environ["FAKE_COMET_RECORD"], "w") as fh:
                json.dump({"project": project, "workspace": workspace, "name": experiment_config.kwargs.get("name"),
                           "key_sha256": hashlib.sha256(key.encode()).hexdigest()}, fh)
            return Experiment(project)
        """))
    return root


def test_a_real_run_with_the_tutorials_flags_logs_to_comet_and_writes_the_key_nowhere(tmp_path, fake_comet,
                                                                                      monkeypatch):
    monkeypatch.delenv("COMET_API_KEY", raising=False)
    out, record = tmp_path / "outputs", tmp_path / "comet.json"
    flags = [f if f != "outputs" else str(out) for f in TUTORIAL_LINE]
    proc = run_script("train.py", *flags, "--max_epochs", "1", "--num_workers", "0", "--num_samples", "640",
                      *COMET_FLAGS, env={"PYTHONPATH": str(fake_comet), "FAKE_COMET_RECORD": str(record)},
                      timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [WARNING]
    assert json.loads(record.read_text()) == {"project": "mpcdf-raven-tutorial", "workspace": "my-team",
                                              "name": "spiral_mlp_1gpu",
                                              "key_sha256": hashlib.sha256(KEY.encode()).hexdigest()}
    files = [p for p in out.rglob("*") if p.is_file()]
    assert [p.name for p in files] == ["result.json"]
    result = json.loads(files[0].read_text())
    assert result["config"]["logger"] == "comet" and result["config"]["experiment_name"] == "spiral_mlp_1gpu"
    assert "comet_api_key" not in result["config"]
    for text, where in [(proc.stdout, "stdout"), (proc.stderr, "stderr")] + [(p.read_text(), p) for p in files]:
        assert KEY not in text, f"the key leaked into {where}"


def test_the_tutorial_config_without_comet_ml_names_the_flag_that_chose_it(tmp_path):
    if importlib.util.find_spec("comet_ml"):
        pytest.skip("comet_ml is installed here")
    (tmp_path / "default_config.yaml").write_text(TUTORIAL_YAML)
    proc = run_script("train.py", "--config", tmp_path / "default_config.yaml", "--output_dir", tmp_path / "out")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "train.py: error: --logger comet (chosen by --comet_project) needs the comet_ml package, which is not "
        "installed: pip install comet_ml, or use --logger csv (no package, no service)"]


@pytest.mark.slow
def test_submit_passes_the_key_to_its_jobs_in_their_environment_only(tmp_path, fake_comet, monkeypatch):
    monkeypatch.delenv("COMET_API_KEY", raising=False)
    out, record = tmp_path / "outputs", tmp_path / "comet.json"
    proc = run_script("submit.py", "--cluster", "local", "--shapes", "1x1", "--output_dir", out, "--", "--model",
                      "mlp", "--num_samples", "640", "--max_epochs", "1", *COMET_FLAGS,
                      env={"PYTHONPATH": os.pathsep.join([str(fake_comet), str(SRC)]),  # the jobs import this src
                           "FAKE_COMET_RECORD": str(record)}, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert WARNING.replace("train.py", "submit.py") in proc.stderr.splitlines()
    assert json.loads(record.read_text())["key_sha256"] == hashlib.sha256(KEY.encode()).hexdigest()
    for path in (p for p in out.rglob("*") if p.is_file()):  # the result, submitit's logs and pickles
        assert KEY.encode() not in path.read_bytes(), f"the key leaked into {path}"
    assert KEY not in proc.stdout + proc.stderr
