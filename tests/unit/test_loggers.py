"""train.py --logger: Lightning's CSV logger writes one row per step into the run's own folder, hyperparameters
without secrets; a logger that cannot run says so in one line before anything starts; the report draws the loss."""

import csv
import importlib.util
import json
import os
from types import SimpleNamespace

import pytest
import yaml

from helpers import FAKE_SECRETS, run_script
from scalelab import results
from scalelab.train.loggers import check
from scalelab.train.metrics import StepMetrics

MLP = ["--config", "mlp", "--max_steps", "12", "--warmup_steps", "2", "--comm_probe_every", "4", "--timeout", "60"]
COLUMNS = {"step", "elapsed_s", "step_s", "samples_per_s", "train_loss", "allreduce_s", "comm_share", "timed"}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same short MLP run with --logger csv (the default) and --logger none, fake secrets in the environment."""
    out = tmp_path_factory.mktemp("outputs")
    for logger in ("csv", "none"):
        proc = run_script("train.py", *MLP, "--logger", logger, "--output_dir", out, env=FAKE_SECRETS, timeout=180)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    found = {}
    for path in out.rglob("result.json"):
        found[json.loads(path.read_text())["config"]["logger"]] = path.parent
    return out, found


def test_csv_logger_writes_one_row_per_step_beside_the_result(two_runs):
    _, folders = two_runs
    folder = folders["csv"]
    result = json.loads((folder / "result.json").read_text())
    assert result["run_id"] == folder.name and result["config"]["logger"] == "csv"
    with open(folder / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert COLUMNS <= set(rows[0])
    steps = [r for r in rows if r["step_s"]]  # the other row: validation's val_loss at the end
    assert [int(r["step"]) for r in steps] == list(range(12)) == list(range(result["timing"]["steps"]))
    # the timer's own figures, not a second measurement
    assert [float(r["step_s"]) for r in steps] == pytest.approx(result["ranks"][0]["step_times_s"])
    assert [float(r["train_loss"]) for r in steps] == pytest.approx(result["ranks"][0]["losses"])
    assert [int(float(r["timed"])) for r in steps] == [0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1]  # warm-up 2, probes 5, 9
    assert float(steps[-1]["elapsed_s"]) == pytest.approx(sum(result["ranks"][0]["step_times_s"]), rel=1e-4)
    assert all(float(r["comm_share"]) == 0 for r in steps)  # one rank: nothing to communicate
    assert all(float(r["samples_per_s"]) == pytest.approx(64 / float(r["step_s"]), rel=1e-4) for r in steps)
    hparams = yaml.safe_load((folder / "hparams.yaml").read_text())
    assert hparams["workload"]["model"] == "mlp" and hparams["workload"]["global_batch"] == 64
    assert hparams["launch"]["world_size"] == 1 and hparams["launch"]["logger"] == "csv"
    assert hparams["run_id"] == result["run_id"]


def test_logger_none_writes_no_curves(two_runs):
    _, folders = two_runs
    assert sorted(p.name for p in folders["none"].iterdir()) == ["result.json"]


def test_no_secret_reaches_the_curves_or_the_hyperparameters(two_runs):
    out, _ = two_runs
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not [n for n, v in FAKE_SECRETS.items() if v in text or n in text], f"a secret leaked into {path}"


def test_plot_draws_loss_against_time_and_notes_the_run_without_a_csv(two_runs, tmp_path):
    out, _ = two_runs
    proc = run_script("benchmark.py", "--output_dir", out, "--plot", tmp_path / "plots")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "plots" / "loss_vs_wall_time_A.png"
    assert f"written: {path}" in proc.stdout and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "benchmark.py: note: 1 run(s) have no metrics.csv" in proc.stderr


@pytest.mark.parametrize("logger", ["wandb", "comet"])
def test_a_service_logger_without_its_package_is_one_line_before_anything_starts(logger, tmp_path):
    if importlib.util.find_spec({"wandb": "wandb", "comet": "comet_ml"}[logger]):
        pytest.skip(f"{logger}'s package is installed here")
    proc = run_script("train.py", *MLP, "--logger", logger, "--output_dir", tmp_path / "out")
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"train.py: error: --logger {logger} needs the {'wandb' if logger == 'wandb' else 'comet_ml'} package, which "
        f"is not installed: pip install {'wandb' if logger == 'wandb' else 'comet_ml'}, or use --logger csv "
        "(no package, no service)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("logger,package,key", [("wandb", "wandb", "WANDB_API_KEY"),
                                                ("comet", "comet_ml", "COMET_API_KEY")])
def test_a_service_logger_without_its_key_is_one_line(logger, package, key, tmp_path, monkeypatch):
    (tmp_path / "fake" / package).mkdir(parents=True)  # the package present (a stand-in), the key absent
    (tmp_path / "fake" / package / "__init__.py").write_text("")
    monkeypatch.delenv(key, raising=False)
    proc = run_script("train.py", *MLP, "--logger", logger, "--output_dir", tmp_path / "out",
                      env={"PYTHONPATH": str(tmp_path / "fake")})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"train.py: error: --logger {logger} reads its API key from the environment variable {key}, which is not "
        "set: export it in the job's environment (scalelab never writes it anywhere), or use --logger csv"]


def test_tensorboard_without_its_package_is_one_line(tmp_path):
    try:
        check("tensorboard")
        pytest.skip("tensorboard is installed here")
    except Exception:  # noqa: BLE001 - the message is what the command line shows
        pass
    proc = run_script("train.py", *MLP, "--logger", "tensorboard", "--output_dir", tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "--logger tensorboard needs the tensorboard or tensorboardX package" in proc.stderr


def test_check_passes_csv_none_and_a_present_key():
    check("csv", {})
    check("none", {})
    if importlib.util.find_spec("wandb") is None:
        return
    check("wandb", {"WANDB_API_KEY": "x"})


class _Logger:
    def __init__(self):
        self.rows, self.hparams = [], None

    def log_metrics(self, row, step):
        self.rows.append((step, row))

    def log_hyperparams(self, params):
        self.hparams = params

    def finalize(self, status):
        self.status = status


def test_step_metrics_sums_accumulated_batches_and_reads_comm_share_in_the_step():
    """--accumulate_grad_batches 2, two ranks: step 1 a probe, step 2 waited 0.004 s after its backward's compute
    (the step's last batch: its ready time less its backward mark), step 0 0.001 s."""
    clock = SimpleNamespace(step_times=[0.01, 0.02, 0.01, 0.01, 0.01, 0.02],
                            ready_times=[0.01, 0.008, 0.01, 0.0, 0.01, 0.014],
                            backward_times=[0.01, 0.007, 0.01, 0.0, 0.01, 0.010],
                            comm_times=[0, 0.005, 0, 0, 0, 0.006], step_ends=[1, 3, 5], probe_steps=[1],
                            losses=[1.0, 3.0, 2.0, 2.0, 1.0, 1.0])
    logger = _Logger()
    cb = StepMetrics(clock, [logger], samples_per_step=128, tokens_per_sample=0, world_size=2, warmup_steps=1)
    cb.log_hyperparams({"workload": {"model": "mlp"}, "WANDB_API_KEY": "x", "launch": {"HF_TOKEN": "y"}})
    assert logger.hparams == {"workload": {"model": "mlp"}, "launch": {}}  # redaction.scrub: no secret-looking key
    cb.flush()
    (s0, r0), (s1, r1), (s2, r2) = logger.rows
    assert (s0, s1, s2) == (0, 1, 2)
    assert r0["step_s"] == pytest.approx(0.03) and r0["train_loss"] == 2.0 and r0["timed"] == 0
    assert r0["allreduce_s"] == pytest.approx(0.005) and r0["comm_share"] == pytest.approx(0.001 / 0.03)
    assert r1["timed"] == 0 and r2["timed"] == 1 and "comm_share" not in r1  # a probe: no sync, nothing waited
    assert r2["comm_share"] == pytest.approx(0.004 / 0.03)
    assert r2["elapsed_s"] == pytest.approx(0.08) and r2["samples_per_s"] == pytest.approx(128 / 0.03)
    cb.finish({}, "success")
    assert len(logger.rows) == 3 and logger.status == "success"  # nothing logged twice; the logger's own end


def test_a_claimed_folder_is_the_run_folder_and_never_shared(tmp_path):
    from helpers import make_result

    a = results.claim_folder(str(tmp_path), make_result("same-id"))
    b = results.claim_folder(str(tmp_path), make_result("same-id"))
    assert a != b and os.path.basename(b).startswith("same-id-")
    path = results.write(str(tmp_path), make_result("same-id"), folder=b)
    assert os.path.dirname(path) == b and json.loads(open(path).read())["run_id"] == os.path.basename(b)


def test_submit_refuses_a_logger_that_cannot_run_before_any_job(tmp_path):
    if importlib.util.find_spec("wandb"):
        pytest.skip("wandb's package is installed here")
    proc = run_script("submit.py", "--cluster", "local", "--output_dir", tmp_path / "out", "--", "--logger", "wandb")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("submit.py: error: --logger wandb needs the wandb package")
    assert not (tmp_path / "out").exists()
