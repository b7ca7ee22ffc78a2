"""The result schema: secrets never written, atomic writes, and a loader that explains every skip."""

import inspect
import itertools
import json
import os
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers import make_result
from scalelab import record, redaction, results
from scalelab.launch import cluster, link_env, slurm_env
from scalelab.report import frames, tables


@pytest.mark.parametrize("name", ["WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "awsSecretAccessKey",
                                  "GITHUB_PAT", "DB_PASSWORD", "NCCL_FAKE_TOKEN", "api_key", "SSH_AUTH_SOCK"])
def test_secret_names_are_recognised(name):
    assert redaction.looks_secret(name)


@pytest.mark.parametrize("name", ["tokens_per_s", "tokens_per_sample", "SLURM_JOB_ID", "NCCL_IB_HCA",
                                  "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "max_steps"])
def test_ordinary_names_are_kept(name):
    assert not redaction.looks_secret(name)


def test_environment_capture_is_an_allow_list_without_secrets():
    env = {"NCCL_DEBUG": "INFO", "SLURM_JOB_ID": "42", "CUDA_VISIBLE_DEVICES": "0,1", "OMP_NUM_THREADS": "4",
           "HOME": "/root", "WANDB_API_KEY": "x", "NCCL_SECRET_TOKEN": "y", "PATH": "/bin"}
    assert redaction.capture_environment(env) == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO",
                                                 "NCCL_SECRET_TOKEN": "<set>", "OMP_NUM_THREADS": "4",
                                                 "SLURM_JOB_ID": "42"}


@pytest.mark.parametrize("name, secret", [
    # a part (split at _ - . and camelCase) that is one of the secret words, or ends in key/token/secret/password
    ("MY_PRIVATE_KEY", True), ("SESSION_ID", True), ("browser-cookie", True), ("db.passwd", True),
    ("LDAP_PWD", True), ("SSO_CREDENTIALS", True), ("AZURE_CREDENTIAL", True), ("X_SIGNATURE", True),
    ("GPG_PASSPHRASE", True), ("MLFLOW_SESSIONID", True), ("myApiToken", True), ("APIKEY", True),
    ("HUGGINGFACEHUB_ACCESSTOKEN", True), ("CLIENTSECRET", True), ("ROOTPASSWORD", True), ("NCCL_AUTH", True),
    # ordinary: a secret word inside a longer part, or a part that merely starts with one
    ("tokens_per_s", False), ("KEYBOARD_LAYOUT", False), ("NCCL_SOCKET_IFNAME", False), ("PATIENCE", False),
    ("SESSIONS_MAX", False), ("TOKENIZERS_PARALLELISM", False), ("AUTHOR", False), ("", False),
])
def test_a_name_is_secret_by_its_parts(name, secret):
    assert redaction.looks_secret(name) is secret


def test_every_allowed_prefix_and_name_is_kept_and_nothing_else():
    allowed = {"NCCL_A": "1", "SLURM_A": "1", "CUDA_A": "1", "OMP_A": "1", "TORCH_A": "1", "TORCHELASTIC_A": "1",
               "PYTORCH_A": "1", "MKL_A": "1", "GLOO_A": "1", "UCX_A": "1", "FI_A": "1", "SUBMITIT_A": "1",
               "MASTER_A": "1", "SCALELAB_A": "1", "SRUN_A": "1", "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0",
               "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "0", "GROUP_RANK": "0",
               # AMD GPUs: SLURM sets ROCR_VISIBLE_DEVICES; HIP_*, HSA_* and RCCL_* steer the runtime and RCCL
               "ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0", "HSA_A": "1", "RCCL_A": "1"}
    dropped = {"SCALELAB_FAULT": "exit@step=1", "XNCCL_A": "1", "nccl_a": "1", "RANKS": "2", "PYTHONPATH": "/x"}
    # allowed names that hold a secret's stem anywhere: recorded as set, never their value (a spelling the old
    # deny-list lacked, a plural, an abbreviation, a stem inside a part)
    present = {"SLURM_JOB_PASSWORD": "p", "CUDA_TOKEN": "t", "GLOO_SOCKET_KEY": "k", "SCALELAB_X_SECRETS": "s",
               "NCCL_API_KEYS": "k", "SLURM_DB_PASS": "p", "TORCH_JWT": "j", "SUBMITIT_CREDS": "c", "NCCL_IB_PKEY": "1"}
    captured = redaction.capture_environment({**dropped, **present, **allowed})
    assert captured == {**allowed, **dict.fromkeys(present, "<set>")}
    assert list(captured) == sorted(captured)  # sorted: equal environments, equal files


def test_scrub_drops_secret_keys_inside_lists_and_tuples_and_keeps_every_value_else():
    data = {"lr": 0.1, "runs": ({"api_key": "k", "steps": 5}, [{"HF_TOKEN": "t"}, 3]), "note": "token",
            "nested": {"password": {"deep": 1}, "ok": None}}
    assert redaction.scrub(data) == {"lr": 0.1, "runs": [{"steps": 5}, [{}, 3]], "note": "token",
                                   "nested": {"ok": None}}


def _training(**changes):
    data = json.loads(json.dumps(make_result()))
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = data
        for parent in parents:
            node = node[parent]
        if value is _DROP:
            del node[key]
        else:
            node[key] = value
    return data


_DROP = object()


@pytest.mark.parametrize("changes, message", [
    ({"schema_version": 0}, "bad schema_version 0"),
    ({"schema_version": -1}, "bad schema_version -1"),
    ({"schema_version": True}, "bad schema_version True"),
    ({"schema_version": "2"}, "bad schema_version '2'"),
    ({"schema_version": 1.0}, "bad schema_version 1.0"),
    ({"schema_version": _DROP}, "bad schema_version None"),
    ({"schema_version": 5}, "schema_version 5 is newer than this scalelab reads (4); upgrade scalelab"),
    ({"schema": "scalelab.report_summary"}, 'not a scalelab result (no "schema": "scalelab.result")'),
    ({"kind": "inference"}, "unknown result kind 'inference'"),
    ({"run_id": ""}, "field run_id: expected a non-empty string, got ''"),
    ({"run_id": 7}, "field run_id: expected a non-empty string, got 7"),
    ({"timing": [1]}, "field timing: expected an object, got [1]"),
    ({"status": _DROP}, "field status missing"),
    ({"status": "done"}, "field status: expected one of completed, failed, preempted, timeout, got 'done'"),
    ({"launch__world_size": 0}, "field launch.world_size: expected an integer from 1 to 1e+06, got 0"),
    ({"launch__world_size": True}, "field launch.world_size: expected an integer from 1 to 1e+06, got True"),
    ({"launch__num_nodes": 1.0}, "field launch.num_nodes: expected an integer from 1 to 1e+06, got 1.0"),
    ({"launch__num_nodes": _DROP}, "field launch.num_nodes missing"),
    ({"timing__samples_per_s": -0.5},
     "field timing.samples_per_s: expected a number from 0 to 1e+30 or null, got -0.5"),
    ({"timing__samples_per_s": "100"},
     "field timing.samples_per_s: expected a number from 0 to 1e+30 or null, got '100'"),
    ({"timing__train_time_s": False},
     "field timing.train_time_s: expected a number from 0 to 1e+30 or null, got False"),
    ({"workload__model": _DROP}, "field workload.model missing"),
    ({"schema_version": 2, "workload__model": [1]},  # an old result whose model is no name: upgraded, then refused
     "field workload.model: expected a string, got [1]"),
])
def test_the_reader_refuses_each_bad_field_with_its_own_line(changes, message):
    with pytest.raises(results.ResultError) as err:
        results.validate(_training(**changes))
    assert str(err.value) == message


@pytest.mark.parametrize("changes", [
    {}, {"schema_version": 1}, {"timing__samples_per_s": 0}, {"timing__samples_per_s": None},
    {"timing__train_time_s": 0.0}, {"launch__world_size": 1, "launch__num_nodes": 1}, {"status": "preempted"},
    {"status": "timeout"}, {"status": "failed"},
])
def test_the_reader_accepts_every_version_and_value_it_knows(changes):
    assert results.validate(_training(**changes))["schema_version"] == results.SCHEMA_VERSION


def test_an_allreduce_result_needs_its_rows_not_a_workload():
    data = {**results.envelope("allreduce", "b1"), "status": "completed", "rows": [],
            "launch": {"world_size": 2, "num_nodes": 1}}
    assert results.validate(data)["kind"] == "allreduce"
    with pytest.raises(results.ResultError, match="^field rows: expected a list, got {}$"):
        results.validate({**data, "rows": {}})


def test_write_scrubs_secret_keys_at_any_depth(tmp_path):
    data = make_result()
    data["config"] = {"lr": 1, "nested": {"api_key": "sk-123", "ok": [{"hf_token": "t"}]}}
    path = results.write(str(tmp_path), data)
    text = open(path).read()
    assert "sk-123" not in text and "hf_token" not in text and '"ok"' in text
    assert not [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".tmp-")]


def test_run_ids_are_unique_and_carry_the_slurm_job():
    ids = {results.new_run_id("mlp", 8, job=None) for _ in range(200)}
    assert len(ids) == 200
    rid = results.new_run_id("mlp", 8, run_name="a b/c", job="123")
    assert "job123" in rid and "a-b-c" in rid and "/" not in rid


@pytest.mark.parametrize("content, reason", [
    ("", "empty file"),
    ('{"schema": "scalelab.result", "schema_ver', "not valid JSON"),
    ("[1, 2]", "not a JSON object but list"),
    ('{"name": "some other tool"}', "not a scalelab result"),
    ('{"schema": "scalelab.result", "schema_version": 99}', "newer than this scalelab reads"),
])
def test_loader_explains_what_it_skips(tmp_path, content, reason):
    path = tmp_path / "bad" / "result.json"
    path.parent.mkdir()
    path.write_text(content)
    results.write(str(tmp_path), make_result("good"))
    found, skipped = results.scan(str(tmp_path))
    assert [r["run_id"] for r in found] == ["good"]
    assert len(skipped) == 1 and reason in skipped[0][1] and skipped[0][0] == str(path)


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(1, 20000), brackets=st.sampled_from(["[]", '{"a":}']), field=st.sampled_from(
    ["extra", "workload", "metrics"]))
def test_a_value_nested_to_any_depth_is_read_or_skipped_in_one_line(depth, brackets, field):
    """However deep a file nests (a thousand levels pass Python's stack in as_read, five thousand msgspec's): the
    result, or a ResultError of one line, from the bytes (index.py) as from the file; never a RecursionError."""
    open_, close = (brackets[0], brackets[1]) if brackets == "[]" else ('{"a":', "}")
    data = json.dumps(make_result("deep"))
    raw = (data[:-1] + f', "{field}": ' + open_ * depth + "1" + close * depth + "}").encode()
    try:
        results.parse(raw)
    except results.ResultError as exc:
        assert "\n" not in str(exc) and str(exc)


def test_validate_rejects_wrong_types():
    data = make_result()
    data["launch"]["world_size"] = "2"
    with pytest.raises(results.ResultError, match="world_size"):
        results.validate(json.loads(json.dumps(data)))


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_results_follow_the_umask_like_any_file(tmp_path, umask):
    """An instructor reads participants' outputs: 0644 under the usual umask, not mkstemp's private 0600."""
    old = os.umask(umask)
    try:
        path = results.write(str(tmp_path), make_result())
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask


def test_version_1_results_are_read_under_the_current_names(tmp_path):
    """A folder written before the first rename (schema_version 1) reports exactly as a new one."""
    old = _version_2("v1")
    old["schema_version"] = 1
    old["timing"]["comm"] = {"probe_steps": 2, "compute_s": 0.1, "synced_s": 0.104, "exposed_comm_s": 0.004,
                             "comm_busy_s": 0.008, "comm_alone_s": 0.005, "hidden_comm_s": 0.004, "overlap": 0.5,
                             "comm_share": 0.04, "step_s": 0.104, "grad_bytes": 8_000_000, "bucket_bytes": [8_000_000],
                             "buckets": 1, "train_busbw_GBps": 1.0}
    old["ranks"] = [{"rank": k, "comm_busy_s": [0.008], "comm_alone_s": [0.005], "step_times_s": [0.104]}
                    for k in range(2)]
    path = tmp_path / "v1" / "result.json"
    path.parent.mkdir()
    path.write_text(json.dumps(old))
    data = results.load(str(path))
    assert data["schema_version"] == results.SCHEMA_VERSION == 4
    assert data["timing"]["comm"] == {"probe_steps": 2, "compute_s": 0.1, "synced_s": 0.104, "waited_s": 0.004,
                                      "allreduce_s": 0.008, "allreduce_alone_s": 0.005, "hidden_s": 0.004,
                                      "hidden_fraction": 0.5, "comm_share": 0.04,
                                      "grad_bytes": 8_000_000, "bucket_bytes": [8_000_000], "buckets": 1,
                                      "ddp_busbw_GBps": 1.0}
    assert data["ranks"] == [{"rank": k, "allreduce_times_s": [0.008], "allreduce_alone_times_s": [0.005],
                              "step_times_s": [0.104]} for k in range(2)]
    new = make_result("v2", 2, model="gpt")
    new["timing"]["comm"] = data["timing"]["comm"]
    reports = []
    for found in ([data], [new]):
        runs = frames.runs_frame(found)
        assert runs.loc[0, ["waited_s", "allreduce_s", "allreduce_alone_s", "hidden_fraction",
                            "ddp_busbw_GBps"]].tolist() == [0.004, 0.008, 0.005, 0.5, 1.0]
        reports.append(tables.render(runs, frames.scaling_frame(runs)).replace("v1", "v2"))
    assert reports[0] == reports[1] and "waited ms" in reports[0]


def _version_2(run_id):
    """A training result as scalelab wrote it under schema_version 2, every field the rename touches at its old name
    (the GPT was `transformer`), with make_result's values."""
    return {"schema": "scalelab.result", "schema_version": 2, "kind": "training", "run_id": run_id,
            "created": "2026-11-20T10:00:00+00:00", "status": "completed", "error": None,
            "workload": {"model": "transformer", "batch_size": 64, "scaling": "weak", "precision": "32",
                         "describe": "transformer", "params": 1000, "batch_per_device": 64, "global_batch": 128},
            "config": {"model": "transformer", "devices": 2, "threads": 1},
            "launch": {"launcher": "local", "world_size": 2, "num_nodes": 1, "procs_per_node": 2,
                       "accelerator": "cpu", "device_names": ["cpu"], "threads_per_proc": 1},
            "timing": {"samples_per_s": 100.0, "tokens_per_s": None, "train_time_s": 10.0,
                       "step_time_s": {"median": 0.01}, "epoch_times_s": [1.0], "time_to_first_step_s": 3.0,
                       "whole_run_s": 5.0,
                       "comm": {"compute_s": 0.008, "allreduce_s": 0.003, "waited_s": 0.002, "step_s": 0.01}},
            "metrics": {"final_train_loss": 0.5, "val_loss": 0.6, "val_acc": 0.9},
            "ranks": [{"rank": k, "step_times_s": [0.01], "grads_ready_s": [0.008], "allreduce_s": [0.003],
                       "allreduce_alone_s": [0.002]} for k in range(2)]}


def test_a_version_2_file_gets_the_version_3_name_of_every_renamed_field():
    old = _version_2("v2")
    kept = json.dumps(old)
    new = results.validate(old)
    assert new["schema_version"] == results.SCHEMA_VERSION and json.dumps(old) == kept  # the caller's dict untouched
    assert new["workload"]["model"] == "gpt" and new["workload"]["describe"] == "gpt"
    assert new["config"] == {"model": "gpt", "devices": 2, "threads": 1}  # a replayed config: --model gpt
    assert new["launch"] == {"launcher": "local", "world_size": 2, "num_nodes": 1, "devices": 2, "accelerator": "cpu",
                             "device_names": ["cpu"], "threads": 1}
    assert new["timing"] == {"samples_per_s": 100.0, "tokens_per_s": None, "train_time_s": 10.0,
                             "step_s": {"median": 0.01}, "epoch_times_s": [1.0], "first_step_s": 3.0,
                             "whole_run_s": 5.0,  # comm's step_s was step_s.median again: dropped
                             "comm": {"compute_s": 0.008, "allreduce_s": 0.003, "waited_s": 0.002}}
    assert new["metrics"] == {"train_loss": 0.5, "val_loss": 0.6, "val_acc": 0.9}
    assert new["ranks"] == [{"rank": k, "step_times_s": [0.01], "grads_ready_times_s": [0.008],
                             "allreduce_times_s": [0.003], "allreduce_alone_times_s": [0.002]} for k in range(2)]
    assert results.validate(dict(old, workload=dict(old["workload"], model="mlp", describe="transformer x")))[
        "workload"]["describe"] == "transformer x"  # only the GPT's own name is renamed


def test_a_version_2_folder_reports_exactly_as_the_same_runs_written_now():
    four = _version_2("r2")
    four["ranks"] = [dict(four["ranks"][0], rank=k) for k in range(4)]
    old = [_version_2("r1"), dict(four, launch=dict(four["launch"], world_size=4, procs_per_node=4))]
    new = [make_result("r1", 2, model="gpt"), make_result("r2", 4, model="gpt")]
    for r in new:
        r["workload"]["global_batch"] = 128
        r["timing"].update(train_time_s=10.0, comm={"compute_s": 0.008, "allreduce_s": 0.003, "waited_s": 0.002})
        r["launch"]["devices"] = r["launch"]["world_size"]
    reports = []
    for found in (old, new):
        runs = frames.runs_frame([results.validate(r) for r in found])
        reports.append(tables.render(runs, frames.scaling_frame(runs)))
    assert reports[0] == reports[1] and "gpt" in reports[0] and "transformer" not in reports[0]


def _attempt(run_id, created, restarts, job="77", array_job=None, task=None, step="0", status="preempted"):
    """One attempt of a SLURM job (one that SLURM requeued: its record says "preempted")."""
    r = make_result(run_id, 4, status=status)
    r["created"] = created
    r["slurm"] = {"job_id": job, "array_job_id": array_job, "array_task_id": task, "step_id": step,
                  "restart_count": restarts}
    return r


def test_requeue_supersede_rule_is_the_newest_attempt_not_the_last_seen():
    newer = _attempt("try1", "2026-11-23T10:05:00+00:00", 1)
    older = _attempt("try0", "2026-11-23T10:00:00+00:00", 0)
    assert [r["run_id"] for r in results.latest_attempts([newer, older])[0]] == ["try1"]  # newer listed first


def test_requeue_supersede_keeps_each_array_task():
    # two tasks of one job array: each its own job id in SLURM_JOB_ID, the same SLURM_ARRAY_JOB_ID
    a = _attempt("task0", "2026-11-23T10:00:00+00:00", 0, job="101", array_job="100", task="0")
    b = _attempt("task1", "2026-11-23T10:00:01+00:00", 0, job="102", array_job="100", task="1")
    b_again = _attempt("task1-requeued", "2026-11-23T10:09:00+00:00", 1, job="102", array_job="100", task="1")
    kept = [r["run_id"] for r in results.latest_attempts([b_again, a, b])[0]]
    assert sorted(kept) == ["task0", "task1-requeued"]


def test_two_results_of_one_restart_count_are_two_jobs_that_got_the_same_id_and_both_count():
    # a workshop's dry run: a controller restarted without its state, job ids began again, and the new job 12
    # hid the old job 12's completed 8-device run
    first = _attempt("early", "2026-11-23T10:00:00+00:00", 0)
    late = _attempt("late", "2026-11-23T10:30:00+00:00", 0)
    for order in ([late, first], [first, late]):
        kept, superseded = results.latest_attempts(order)
        assert [r["run_id"] for r in kept] == [r["run_id"] for r in order] and superseded == []


def test_a_repeated_job_id_keeps_each_jobs_latest_attempt_and_names_what_it_superseded():
    a0 = _attempt("a0", "2026-11-23T10:00:00+00:00", 0)
    a1 = _attempt("a1", "2026-11-23T10:10:00+00:00", 1)
    b0 = _attempt("b0", "2026-11-24T09:00:00+00:00", 0)  # the id again, a day later: another job
    b1 = _attempt("b1", "2026-11-24T09:10:00+00:00", 1)
    b2 = _attempt("b2", "2026-11-24T09:20:00+00:00", 2)
    kept, superseded = results.latest_attempts([b2, a0, b0, a1, b1])
    assert [r["run_id"] for r in kept] == ["b2", "a1"]
    assert sorted((old["run_id"], new["run_id"]) for old, new in superseded) == [("a0", "a1"), ("b0", "b2"),
                                                                                 ("b1", "b2")]


def test_a_completed_run_is_never_superseded_by_a_later_job_that_got_its_id():
    # the old job 12 completed; the new job 12's first attempt wrote nothing, its requeued attempt did
    old8 = _attempt("old8", "2026-11-20T10:00:00+00:00", 0, status="completed")
    new1 = make_result("new1", 1)
    new1.update(created="2026-11-26T10:00:00+00:00", slurm=dict(old8["slurm"], restart_count=1))
    kept, superseded = results.latest_attempts([old8, new1])
    assert [r["run_id"] for r in kept] == ["old8", "new1"] and superseded == []
    cut = _attempt("cut", "2026-11-20T10:00:00+00:00", 0)
    cut["status"] = "timeout"
    other_shape = make_result("shape", 8)  # a requeue runs the same job: another world size is another job
    other_shape.update(created="2026-11-20T10:09:00+00:00", slurm=dict(cut["slurm"], restart_count=1))
    assert len(results.latest_attempts([cut, other_shape])[0]) == 2
    again = _attempt("again", "2026-11-20T10:09:00+00:00", 1)
    assert [r["run_id"] for r in results.latest_attempts([cut, again])[0]] == ["again"]


def test_a_completed_run_of_the_same_shape_is_never_superseded_either():
    """The same job id, workload and world size, a higher restart count: still another job when the earlier one
    completed (SLURM requeues no finished job), so both runs count."""
    done = _attempt("done", "2026-11-20T10:00:00+00:00", 0, status="completed")
    later = _attempt("later", "2026-11-26T10:00:00+00:00", 1)
    kept, superseded = results.latest_attempts([done, later])
    assert [r["run_id"] for r in kept] == ["done", "later"] and superseded == []


def test_a_later_attempt_of_another_workload_is_another_job():
    """A requeue runs the same training job: under the same job id, at the same world size, a higher restart count
    of another workload (here another batch size) is a job that got the id again, and both runs count."""
    cut = _attempt("cut", "2026-11-20T10:00:00+00:00", 0)
    other = _attempt("other", "2026-11-20T10:09:00+00:00", 1)
    other["workload"]["batch_size"] = 32
    kept, superseded = results.latest_attempts([cut, other])
    assert [r["run_id"] for r in kept] == ["cut", "other"] and superseded == []
    other["workload"]["batch_size"] = cut["workload"]["batch_size"]  # the same job: the requeue supersedes
    assert [r["run_id"] for r in results.latest_attempts([cut, other])[0]] == ["other"]


def test_the_same_job_id_on_two_clusters_is_two_jobs():
    here = _attempt("here", "2026-11-23T10:00:00+00:00", 0)
    there = _attempt("there", "2026-11-23T10:05:00+00:00", 1)
    here["slurm"]["cluster"], there["slurm"]["cluster"] = "alps", "leonardo"
    assert [r["run_id"] for r in results.latest_attempts([here, there])[0]] == ["here", "there"]
    there["slurm"]["cluster"] = "alps"
    assert [r["run_id"] for r in results.latest_attempts([here, there])[0]] == ["there"]


def test_an_atomic_write_interrupted_before_the_rename_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "run" / "result.json"

    def interrupted(src, dst):
        raise KeyboardInterrupt  # Ctrl-C (or a SIGTERM turned into an exception) between write and rename

    monkeypatch.setattr(results.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        results.atomic_write_json(str(target), {"a": 1})
    assert list((tmp_path / "run").iterdir()) == []  # neither the result nor a temporary file


def test_versions_name_python_torch_lightning_submitit_and_scalelab():
    import platform

    import lightning
    import submitit
    import torch

    import scalelab

    v = results.versions()
    assert v == {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                 "lightning": lightning.__version__, "submitit": submitit.__version__, "scalelab": scalelab.__version__}


def test_versions_on_a_gpu_build_name_cuda_and_nccl(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    v = results.versions()
    assert (v["cuda"], v["nccl"]) == ("12.4", "2.21.5")


def test_versions_on_a_rocm_build_name_hip_and_a_build_without_the_attribute_names_none(monkeypatch):
    """A ROCm build's "nccl" is RCCL: the result names the HIP version so no reader takes it for NVIDIA's. A torch
    whose torch.version has no `hip` at all (older builds) still gives versions, without the key."""
    import torch

    monkeypatch.setattr(torch.version, "hip", "6.0.32830-d62f6a171", raising=False)
    assert results.versions()["hip"] == "6.0.32830-d62f6a171"
    monkeypatch.delattr(torch.version, "hip")
    assert "hip" not in results.versions()


def test_a_run_id_says_when_what_where_and_is_safe_as_a_folder_name():
    import re

    rid = results.new_run_id("transformer", 8, run_name="my run/α" + "x" * 50,
                             job="120_3")
    name = "my-run-" + "x" * 33  # every other character -> "-", cut at 40
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{name}-transformer-8x-job120_3-pid{os.getpid()}-[0-9a-f]{{8}}", rid), rid
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-mlp-1x-job9-pid{os.getpid()}-[0-9a-f]{{8}}",
                        results.new_run_id("mlp", 1, job="9"))
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-mlp-2x-job9_1-pid{os.getpid()}-[0-9a-f]{{8}}",
                        results.new_run_id("mlp", 2, job="9_1"))
    assert "-Run_A.1-mlp-" in results.new_run_id("mlp", 1, run_name="Run_A.1", job=None)  # kept as written
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-mlp-2x-pid{os.getpid()}-[0-9a-f]{{8}}", results.new_run_id("mlp", 2,
                                                                                                    job=None))


def test_the_output_folder_is_made_or_refused_in_one_line(tmp_path):
    made = tmp_path / "a" / "b"
    results.ensure_output_dir(str(made))
    assert made.is_dir() and not list(made.iterdir())  # the probe folder is gone again
    (tmp_path / "file").write_text("x")
    with pytest.raises(results.UsageError) as err:
        results.ensure_output_dir(str(tmp_path / "file"), "--plot")
    assert str(err.value) == f"--plot {tmp_path / 'file'} is a file, not a folder"
    with pytest.raises(results.UsageError) as err:
        results.ensure_output_dir(str(tmp_path / "file" / "sub"))
    assert str(err.value) == f"--output_dir {tmp_path / 'file' / 'sub'} cannot be created (Not a directory)"
    # a folder that exists but where even root cannot make one (sysfs): found before any run starts
    with pytest.raises(results.UsageError) as err:
        results.ensure_output_dir("/sys/kernel")
    assert re.fullmatch(r"--output_dir /sys/kernel is not writable: a folder cannot be made in it \((Operation not "
                        r"permitted|Permission denied)\)", str(err.value)), str(err.value)  # root, or not


def test_a_claimed_folder_is_never_shared(tmp_path):
    out = str(tmp_path / "out")
    first = results.claim_folder(out, make_result("run"))
    second = results.claim_folder(out, make_result("run"))
    assert first == str(tmp_path / "out" / "run") and os.path.dirname(second) == out
    assert os.path.basename(second).startswith("run-") and len(os.path.basename(second)) == len("run-") + 4
    path = results.write(out, make_result("run"))
    assert os.path.basename(os.path.dirname(path)).startswith("run-")
    for folder in (first, second, os.path.dirname(path)):  # each holds its own record, named as its folder
        assert json.load(open(os.path.join(folder, "result.json")))["run_id"] == os.path.basename(folder)
    assert sorted(os.listdir(out)) == sorted(map(os.path.basename, (first, second, os.path.dirname(path))))


def test_a_run_folder_appears_with_its_record_already_on_disk(tmp_path, monkeypatch):
    """The record is written and synced before the folder is made, and moved in by the next call: a process killed
    at any moment (rank 0 at start-up, issue 59's CI) leaves a folder with a record or none, never an empty one.
    Whatever fails on the way leaves neither a folder nor a temporary file."""
    out, seen = str(tmp_path), []
    real_mkdir, real_rename = os.mkdir, os.rename

    def mkdir(path, *args):
        if path != out:  # not os.makedirs(out, exist_ok=True) at the start
            temps = [n for n in os.listdir(out) if n.startswith(".tmp-")]
            seen.append([json.load(open(os.path.join(out, n)))["run_id"] for n in temps])
        real_mkdir(path, *args)

    monkeypatch.setattr(os, "mkdir", mkdir)
    results.claim_folder(out, make_result("a"))
    results.claim_folder(out, make_result("a"))  # taken: a second name, its record rewritten with that name
    assert seen[0] == ["a"] and seen[1] == ["a"] and len(seen) == 3 and seen[2][0].startswith("a-")
    assert sorted(n for n in os.listdir(out)) == sorted(["a", seen[2][0]])

    def refused(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", refused)
    with pytest.raises(OSError):
        results.claim_folder(out, make_result("b"))
    monkeypatch.setattr(os, "rename", real_rename)
    assert sorted(os.listdir(out)) == sorted(["a", seen[2][0]])  # no folder b, no .tmp- file

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)  # a full disk as the record is written: said of the file it was for
    with pytest.raises(OSError) as err:
        results.claim_folder(out, make_result("c"))
    assert err.value.filename == os.path.join(out, "c", "result.json") and err.value.errno == 28
    assert sorted(os.listdir(out)) == sorted(["a", seen[2][0]])


def test_a_claim_cut_short_by_a_signal_leaves_a_folder_with_its_record_or_none(tmp_path, monkeypatch):
    """A SIGTERM before the loop raises Terminated between any two lines: just after the mkdir, the folder still
    gets its record; before it, nothing is made; over a folder another run holds, that run's record stays."""
    from scalelab.train.guard.signals import Terminated

    out, real_mkdir = str(tmp_path), os.mkdir

    def mkdir_then_signal(path, *args):
        real_mkdir(path, *args)
        if path != out:
            raise Terminated("SIGTERM")

    def signal_first(path, *args):
        if path != out:
            raise Terminated("SIGTERM")
        real_mkdir(path, *args)

    monkeypatch.setattr(os, "mkdir", mkdir_then_signal)
    with pytest.raises(Terminated):
        results.claim_folder(out, make_result("cut"))
    assert os.listdir(out) == ["cut"] and json.load(open(tmp_path / "cut" / "result.json"))["run_id"] == "cut"
    other = make_result("cut")
    other["run_name"] = "another run"
    monkeypatch.setattr(os, "mkdir", real_mkdir)
    results.write(out, other, folder=str(tmp_path / "cut"))
    monkeypatch.setattr(os, "mkdir", signal_first)
    with pytest.raises(Terminated):
        results.claim_folder(out, make_result("early"))
    with pytest.raises(Terminated):
        results.claim_folder(out, make_result("cut"))  # another run's folder by that name: its record stays
    assert os.listdir(out) == ["cut"] and os.listdir(tmp_path / "cut") == ["result.json"]
    assert json.load(open(tmp_path / "cut" / "result.json"))["run_name"] == "another run"


def test_the_group_key_ignores_what_follows_from_the_launch_size_and_keeps_the_hardware():
    a, b = make_result("a", 1), make_result("b", 8, nodes=2)
    b["workload"].update(describe="mlp at 8", params=2000, tokens_per_sample=7)
    assert results.group_key(a) == results.group_key(b)  # describe, params, batches, tokens: derived
    assert json.loads(results.group_key(a)) == {
        "workload": {"model": "mlp", "batch_size": 64, "scaling": "weak", "precision": "32"},
        "hardware": {"accelerator": "cpu", "device": "cpu", "threads": 1}}  # a CPU device: its cores too
    other = make_result("c", 1)
    other["launch"]["device_names"] = ["NVIDIA A100"]
    assert results.group_key(other) != results.group_key(a)
    other["launch"]["device_names"] = []
    assert json.loads(results.group_key(other))["hardware"]["device"] is None
    assert results.group_key(make_result("d", 1, batch_size=32)) != results.group_key(a)


def test_a_version_1_file_gets_the_current_names_in_comm_and_in_each_rank():
    old = make_result("v1")
    old["schema_version"] = 1
    old["timing"]["comm"] = {"exposed_comm_s": 1, "comm_busy_s": 2, "comm_alone_s": 3, "hidden_comm_s": 4,
                             "overlap": 0.5, "train_busbw_GBps": 6, "compute_s": 7}
    old["ranks"] = [{"comm_busy_s": [1], "comm_alone_s": [2], "rank": 0}]
    new = results.validate(old)
    assert new["schema_version"] == results.SCHEMA_VERSION and new["timing"]["comm"] == {
        "waited_s": 1, "allreduce_s": 2, "allreduce_alone_s": 3, "hidden_s": 4, "hidden_fraction": 0.5,
        "ddp_busbw_GBps": 6, "compute_s": 7}
    assert new["ranks"] == [{"allreduce_times_s": [1], "allreduce_alone_times_s": [2], "rank": 0}]
    assert old["schema_version"] == 1 and "exposed_comm_s" in old["timing"]["comm"]  # the caller's dict untouched
    assert results.validate(dict(make_result("v3"), ranks=[{"comm_busy_s": 1}]))["ranks"] == [{"comm_busy_s": 1}]


def test_requeued_attempts_share_a_key_per_job_array_task_and_step():
    def attempt(run_id, **slurm):
        return dict(make_result(run_id, status="preempted"), slurm=slurm)
    assert results.attempt_key(make_result("x")) is None and results.attempt_key(attempt("y", job_id=None)) is None
    assert results.attempt_key(attempt("a", job_id="5", step_id="0")) == (None, "5", None, "0")
    assert results.attempt_key(attempt("b", job_id="7", array_job_id="5", array_task_id="2")) == (None, "5", "2",
                                                                                                  None)
    assert results.attempt_key(attempt("c", job_id="5", step_id="0", cluster="alps")) == ("alps", "5", None, "0")
    found = [attempt("r2", job_id="5", restart_count=2, created="2"), attempt("r0", job_id="5", created="0"),
             attempt("r1", job_id="5", restart_count=1, created="1"), attempt("other", job_id="6", created="1"),
             make_result("free")]
    for r in found:
        r["created"] = r["slurm"].pop("created", "0") if r.get("slurm") else "0"
    # the order written, not the order found; a missing restart count is the first attempt
    assert [r["run_id"] for r in results.latest_attempts(found)[0]] == ["r2", "other", "free"]


def test_an_unreadable_file_says_why(tmp_path):
    with pytest.raises(results.ResultError, match=r"^unreadable \(No such file or directory\)$"):
        results.load(str(tmp_path / "missing.json"))
    (tmp_path / "blank.json").write_text("  \n")
    with pytest.raises(results.ResultError, match="^empty file$"):
        results.load(str(tmp_path / "blank.json"))
    (tmp_path / "bad.json").write_text('{"a": ')
    with pytest.raises(results.ResultError, match=r"^not valid JSON \(Expecting value: line 1 column 7 \(char 6\)\)$"):
        results.load(str(tmp_path / "bad.json"))


def _summary(**changes):
    config = {k: 1 for k in results._SUMMARY_FIELDS}
    config["workload"] = {"model": "mlp"}
    return {"schema": results.SUMMARY_SCHEMA, "schema_version": 2, "configurations": [config], **changes}


@pytest.mark.parametrize("changes, message", [
    ({"schema": "scalelab.result"}, 'not a scalelab report summary (no "schema": "scalelab.report_summary")'),
    ({"schema_version": 3}, "summary schema_version 3 is not one this scalelab reads (2)"),
    ({"schema_version": True}, "summary schema_version True is not one this scalelab reads (2)"),
    ({"schema_version": "1"}, "summary schema_version '1' is not one this scalelab reads (2)"),
    ({"configurations": {}}, 'summary has no "configurations" list'),
    ({"configurations": [{"workload": {}}]}, "summary configuration 0 lacks hardware, describe, scaling, unit, "
     "world_size, num_nodes, throughput, efficiency, baseline_world_size, step_s, comm_share"),
    ({"configurations": [dict(_summary()["configurations"][0], workload=[])]},
     "summary configuration 0 lacks a workload object"),
])
def test_a_summary_is_refused_with_what_it_lacks(tmp_path, changes, message):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_summary(**changes)))
    with pytest.raises(results.ResultError) as err:
        results.load_summary(str(path))
    assert str(err.value) == message
    path.write_text(json.dumps(_summary()))
    assert results.load_summary(str(path))["configurations"][0]["world_size"] == 1


def test_a_version_1_summary_is_read_under_the_version_2_names(tmp_path):
    """A summary.json mailed from a site still on the old names compares against a folder reported now."""
    old = {"group": "A", "workload": {"model": "transformer", "preset": "tiny"}, "describe": "transformer tiny",
           "hardware": "CPU (gloo)", "scaling": "weak", "unit": "tokens/s", "devices": 2, "nodes": 1,
           "throughput": 9000.0, "efficiency": 0.9, "baseline_devices": 1, "step_s": 0.2, "comm_share": 0.1}
    path = tmp_path / "summary.json"
    mlp = dict(old, workload={"model": "mlp"}, describe="mlp 64-32-16")
    odd = dict(old, describe=None)  # a GPT whose description is missing stays without one
    path.write_text(json.dumps({"schema": results.SUMMARY_SCHEMA, "schema_version": 1, "created": "2026-11-01",
                                "configurations": [old, mlp, odd]}))
    data = results.load_summary(str(path))
    assert (data["schema"], data["created"]) == (results.SUMMARY_SCHEMA, "2026-11-01")  # the rest kept
    assert data["configurations"][1] == {**{results.upgrades.SUMMARY_V1.get(k, k): v for k, v in mlp.items()}}
    assert data["configurations"][2]["describe"] is None and data["configurations"][2]["workload"]["model"] == "gpt"
    assert data["schema_version"] == 2 and data["configurations"][:1] == [
        {"letter": "A", "workload": {"model": "gpt", "preset": "tiny"}, "describe": "gpt tiny",
         "hardware": "CPU (gloo)", "scaling": "weak", "unit": "tokens/s", "world_size": 2, "num_nodes": 1,
         "throughput": 9000.0, "efficiency": 0.9, "baseline_world_size": 1, "step_s": 0.2, "comm_share": 0.1}]


def test_a_result_is_stamped_in_utc():
    import datetime as dt

    created = dt.datetime.fromisoformat(results.envelope("training", "r")["created"])
    assert created.utcoffset() == dt.timedelta(0)
    assert abs((dt.datetime.now(dt.timezone.utc) - created).total_seconds()) < 60


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_one(tmp_path, monkeypatch):
    """The new bytes go to a hidden file beside the target (the same filesystem, so the rename is atomic);
    a disk that fails before the rename leaves the old result as it was and nothing else."""
    target = tmp_path / "run" / "result.json"
    results.atomic_write_json(str(target), {"a": 1})
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    seen = []

    def disk_full(fd):
        seen.append(sorted(os.listdir(target.parent)))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        results.atomic_write_json(str(target), {"a": 2})
    assert len(seen[0]) == 2 and seen[0][0].startswith(".tmp-") and seen[0][1] == "result.json"
    assert os.listdir(target.parent) == ["result.json"] and json.loads(target.read_text()) == {"a": 1}
    assert os.listdir(elsewhere) == []


def test_a_result_file_is_indented_one_space_and_writes_any_value_as_text(tmp_path):
    """One key a line, readable with less; a value JSON has no type for (a path, a date) is written as its text."""
    import datetime as dt
    from pathlib import PurePosixPath

    path = tmp_path / "result.json"
    results.atomic_write_json(str(path), {"a": [1], "dir": PurePosixPath("/data/x"), "at": dt.date(2026, 1, 2)})
    assert path.read_text() == '{\n "a": [\n  1\n ],\n "dir": "/data/x",\n "at": "2026-01-02"\n}\n'


def test_the_group_key_does_not_depend_on_key_order_or_on_values_json_lacks():
    """A result read back from its file (keys in the file's order, a path as its text) groups as it did
    in memory."""
    from pathlib import PurePosixPath

    a = make_result("a", 1, data=PurePosixPath("/data/x"))
    b = make_result("b", 2)
    b["workload"] = dict(reversed(list(b["workload"].items())), data="/data/x")
    assert list(a["workload"]) != list(b["workload"])
    assert results.group_key(a) == results.group_key(b)
    assert json.loads(results.group_key(a))["workload"]["data"] == "/data/x"


def test_a_file_that_is_not_utf8_is_skipped_with_its_reason(tmp_path):
    bad = tmp_path / "bad" / "result.json"
    bad.parent.mkdir()
    bad.write_bytes(b'{"a": "\xff"}')  # byte 7: 0xff starts no UTF-8 character
    results.write(str(tmp_path), make_result("good"))
    found, skipped = results.scan(str(tmp_path))
    assert [r["run_id"] for r in found] == ["good"]
    assert skipped == [(str(bad), "not valid JSON ('utf-8' codec can't decode byte 0xff in position 7: invalid "
                                  "start byte)")]


def test_a_long_json_error_is_cut_to_80_characters(tmp_path):
    path = tmp_path / "result.json"
    path.write_text("\n" * 100000 + "{x")
    # "Expecting property name enclosed in double quotes: " is 51 characters, "line 100001 column 2 (char " 27:
    # 2 more make 80, "10" of the position 100001
    with pytest.raises(results.ResultError) as err:
        results.load(str(path))
    assert str(err.value) == ("not valid JSON (Expecting property name enclosed in double quotes: line 100001 "
                              "column 2 (char 10)")


def test_scan_finds_the_result_beside_other_files_and_says_where_each_came_from(tmp_path):
    a = results.write(str(tmp_path), make_result("a"))
    b = results.write(str(tmp_path), make_result("b"))
    for name in ("app.log", "config.yaml", "zz.txt"):  # before and after "result.json" in sorted order
        (tmp_path / "a" / name).write_text("x")
    (tmp_path / "a" / "nested").mkdir()
    (tmp_path / "a" / "nested" / "result.json").write_text("[]")
    found, skipped = results.scan(str(tmp_path))
    assert [(r["run_id"], r["_path"]) for r in found] == [("a", a), ("b", b)]
    assert skipped == [(str(tmp_path / "a" / "nested" / "result.json"), "not a JSON object but list")]


def test_requeue_supersede_looks_past_results_outside_slurm():
    free = make_result("free")
    try0 = _attempt("try0", "2026-11-23T10:00:00+00:00", 0)
    try1 = _attempt("try1", "2026-11-23T10:05:00+00:00", 1)
    kept, superseded = results.latest_attempts([free, try0, try1])
    assert [r["run_id"] for r in kept] == ["free", "try1"] and [(a["run_id"], b["run_id"]) for a, b in superseded] \
        == [("try0", "try1")]
    undated = _attempt("undated", None, 0)  # a file without its date sorts first: an earlier attempt
    del undated["created"]
    assert [r["run_id"] for r in results.latest_attempts([try1, undated])[0]] == ["try1"]


@pytest.mark.parametrize("value, kept", [
    ("https://alice:hunter2@git.example.org/repo.git", "https://<redacted>@git.example.org/repo.git"),
    ("git+https://ghp_abc123@github.com/a/b", "git+https://<redacted>@github.com/a/b"),
    ("sweep token=abc123 on gpu", "sweep token=<redacted> on gpu"),
    ("PASSWORD: hunter2", "PASSWORD: <redacted>"),
    ('db_password="two words"', 'db_password="<redacted>"'),  # the quotes kept: JSON and shell stay valid
    ("https://h/x?access_token=zz&page=2", "https://h/x?access_token=<redacted>&page=2"),
    ("train.py --comet_api_key K123 --max_steps 3", "train.py --comet_api_key <redacted> --max_steps 3"),
    ("curl -H 'Authorization: Bearer eyJ.abc'", "curl -H 'Authorization: Bearer <redacted>'"),
    ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic <redacted>"),
    # ordinary values stay as they are
    ("tokens_per_s: 5", "tokens_per_s: 5"), ("http://proxy:3128", "http://proxy:3128"),
    ("user@host:/scratch/run", "user@host:/scratch/run"), ("the key word", "the key word"),
    ("NCCL_IB_HCA=mlx5_0", "NCCL_IB_HCA=mlx5_0"), ("--max_steps 30", "--max_steps 30"),
])
def test_a_secret_inside_a_value_is_redacted_and_an_ordinary_value_kept(value, kept):
    assert redaction.redact(value) == kept


def test_a_secret_inside_a_recorded_variable_never_reaches_the_result(tmp_path):
    """Issue 37's first cause: only names were checked, so a job comment's token or a URL's password was copied
    into every result.json."""
    env = {"SLURM_JOB_COMMENT": "nightly token=abc123", "NCCL_PLUGIN_URL": "https://u:pw@host/p", "RANK": "0"}
    captured = redaction.capture_environment(env)
    assert captured == {"NCCL_PLUGIN_URL": "https://<redacted>@host/p", "RANK": "0",
                        "SLURM_JOB_COMMENT": "nightly token=<redacted>"}
    data = make_result()
    data["environment"] = dict(env)
    data["config"] = {"run_name": "x", "note": ["see https://a:b@c/d"]}
    path = results.write(str(tmp_path), data)
    text = open(path).read()
    assert "abc123" not in text and "pw@" not in text and "a:b@" not in text and "<redacted>" in text


def test_a_block_a_producer_returned_is_written_as_its_fields_and_scrubbed_like_any_other(tmp_path):
    """The producers return their record blocks (launch, launch.link, slurm): `write` turns each, at any depth, into
    the object the file holds before anything else sees the payload, so a secret in one is redacted too."""
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NAME": "nightly token=abc123", "SLURM_RESTART_COUNT": "0"}
    link = {"SCALELAB_LINK": "emulated", "SCALELAB_LINK_GBIT": "0.2"}
    launch = cluster.Launch("local", 1, 1, "cpu")
    data = make_result()
    data["slurm"] = slurm_env.job_record(env)
    data["launch"] = record.Launch(**{**record.plain(launch.record(["cpu"], ["h"])),
                                      "link": link_env.link_record(link)})
    data["config"] = {"kept": (record.Link(gbit=1.0, emulated=False),), "in": [{"deep": record.Slurm(job_id="8")}],
                      "beside": ["a", 1, None, record.Slurm()]}
    written = json.load(open(results.write(str(tmp_path), data)))
    assert written["slurm"] == {"job_id": "7", "job_name": "nightly token=<redacted>", "restart_count": 0}
    assert written["launch"] == {"launcher": "local", "world_size": 1, "num_nodes": 1, "devices": 1,
                                 "accelerator": "cpu", "device_names": ["cpu"], "hostnames": ["h"],
                                 "link": {"gbit": 0.2, "emulated": True}}  # what is null is left out, false kept
    assert written["config"] == {"kept": [{"gbit": 1.0, "emulated": False}], "in": [{"deep": {"job_id": "8"}}],
                                 "beside": ["a", 1, None, {}]}


def test_a_launch_field_a_writer_misspells_fails_where_it_is_built():
    with pytest.raises(TypeError, match="threds"):  # a dict took it, and the file held a field nobody reads
        cluster.Launch("local", 1, 1, "cpu").record([], [], threds=1)


def test_a_secret_in_a_file_written_elsewhere_is_redacted_when_read(tmp_path):
    data = make_result()
    data["run_name"] = "token=abc123"
    data["environment"] = {"SLURM_JOB_COMMENT": "https://u:pw@host"}
    path = tmp_path / "r" / "result.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    loaded = results.load(str(path))
    assert loaded["run_name"] == "token=<redacted>"
    assert loaded["environment"]["SLURM_JOB_COMMENT"] == "https://<redacted>@host"


def test_a_full_disk_names_the_file_it_hit(tmp_path, monkeypatch):
    """Issue 37's ninth cause: `No space left on device` alone, without the file, after a run of an hour."""
    from scalelab.errors import error_line

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results.os, "fsync", disk_full)
    target = tmp_path / "run" / "result.json"
    with pytest.raises(OSError) as err:
        results.atomic_write_json(str(target), {"a": 2})
    assert error_line(err.value) == f"OSError: [Errno 28] No space left on device: '{target}'"


def test_a_result_written_before_a_lever_existed_groups_with_the_runs_at_its_default():
    """Results from before --strategy have no `strategy`: they ran DDP, and a new DDP run keeps its old baseline."""
    from scalelab.config import LEVER_DEFAULTS

    old = make_result("old", world=1)
    old["workload"].pop("strategy", None)
    new = make_result("new", world=2)
    new["workload"]["strategy"] = "ddp"
    assert results.group_key(old, LEVER_DEFAULTS) == results.group_key(new, LEVER_DEFAULTS)
    fsdp = dict(new, workload={**new["workload"], "strategy": "fsdp"})
    assert results.group_key(fsdp, LEVER_DEFAULTS) != results.group_key(old, LEVER_DEFAULTS)


def test_a_csv_cell_a_spreadsheet_would_run_as_a_formula_opens_as_text():
    """redaction.csv_text: every text cell starting with = + - @ tab or carriage return gets a leading ' (OWASP's
    CSV injection), other text and the numbers stay as they are (a negative step time is a number, not a formula)."""
    import pandas as pd

    starts = ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "run-1"]
    text = redaction.csv_text(pd.DataFrame({"name": starts, "step_s": [-0.5, 1, 2, 3, 4, 5, 6]}))
    assert all(f"'{value}" in text for value in starts[:-1]) and "'run-1" not in text and "run-1" in text
    assert text.startswith("name,step_s\n'=1+1,-0.5\n") and "'-0.5" not in text


def _shown_plainly(obj):
    """as_read by its definition, a call per value: what its remembered strings and whole lists of numbers must
    give."""
    if isinstance(obj, str):
        return redaction.redact(redaction.inert(obj))
    if isinstance(obj, dict):
        return {redaction.inert(k): _shown_plainly(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shown_plainly(v) for v in obj]
    return obj


_PIECES = st.sampled_from(["token=abc1", "\x1b[2J", "https://u:pw@h/x", " ", "x", "é", "\x9b", "--api_key K ", "\n"])
_TEXT = st.lists(_PIECES, max_size=6).map("".join)
_LONG = st.tuples(_TEXT, st.integers(500, 1500)).map(lambda t: t[0] * t[1])  # past what as_read remembers
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT | _LONG,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT | _LONG, inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@example(value="\x1b_token=abc")  # escaped first, then redacted: shown once, its secret was shown
@given(value=_VALUES | st.text())
def test_what_as_read_shows_it_shows_again_as_it_is(value):
    """as_read of what it showed changes nothing: a text read from a file and one read from the index that stored it
    as shown (report/index.py) print the same, and no second pass reveals a secret the first one left."""
    assert redaction.as_read(redaction.as_read(value)) == redaction.as_read(value)
    assert redaction.as_read("\x1b_token=abc") == "\\x1b_token=<redacted>"


@settings(max_examples=200, deadline=None)
@given(value=_VALUES)
def test_as_read_shows_any_value_as_its_definition_does(value):
    """Any JSON value, its strings short (remembered) or long (shown each time), repeated or not, its lists of
    plain numbers or mixed: as_read gives what inert then redact give value by value, and twice the same."""
    assert redaction.as_read(value) == _shown_plainly(value)
    assert redaction.as_read(value) == _shown_plainly(value)  # the second time from what it remembered


_SECRETISH = st.sampled_from(["token", "api_key", "Bearer", "authorization", "https", "//u", "pw", "--password",
                              "=", ":", "@", " ", "\t", "\u2003", "\x85", "\x1b", "\x9b", "\x7f", "x", "é", "-", "_",
                              ".", "/", "'", '"'])


# a secret's name, a separator and a value, with what may stand around them: what redact looks for
_SECRET_PARTS = (["", "x ", "é", "-"], ["token", "--api_key", "Bearer", "https://u", "pw"],
                 ["=", ":", " ", "\t", "\u2003", "://u:", "@"], ["abc", "p@h", "K"], ["", " y", "&z"])


def test_every_secret_shaped_text_is_shown_as_inert_then_redact_show_it():
    """Each of the 1,260 texts a name, a separator and a value make: the shortcut takes none that redact changes."""
    for parts in itertools.product(*_SECRET_PARTS):
        text = "".join(parts)
        assert redaction.as_read(text) == redaction.redact(redaction.inert(text)), text


@settings(max_examples=500, deadline=None)
@given(text=st.lists(_SECRETISH, max_size=8).map("".join) | st.text())
def test_a_text_is_shown_as_inert_then_redact_show_it_whatever_its_characters(text):
    """The shortcut for a text with no = or :, no space and no control character (every pattern of redact needs
    one) gives what inert then redact give, on texts built from secrets' parts with and without those."""
    assert redaction.as_read(text) == redaction.redact(redaction.inert(text))


# what stands before a letter decides whether a pattern of redact may start there: digits, the letters Python's
# case-insensitive [a-z] also matches (a Kelvin sign, a long s, two i's), and texts a timestamp's shortcut must not take
_BEFORE_A_LETTER = st.sampled_from(["0", "9", "T", "2026-12-05T01:14:52.5+00:00", "\u212a", "\u017f", "\u0130",
                                    "\u0131", "é", "_", "-", "+", ".", "@", "ey://u:pw@h/x", "3://1:2@3", "earer abc",
                                    "token=123", "-api_key 1", "uthorization: Basic 1", ":", "=", " ", "\x1b", "Z"])


@settings(max_examples=500, deadline=None)
@example(text="\u212a3://1:2@3")  # a URL whose scheme starts with a Kelvin sign: (?i)[a-z] takes it
@example(text="\u017f3://1:2@3")
@example(text="\u01303://1:2@3")
@example(text="\u01313://1:2@3")
@example(text="1:token=123")
@given(text=st.lists(_BEFORE_A_LETTER, max_size=6).map("".join))
def test_a_text_whose_letters_all_follow_a_letter_or_digit_is_shown_as_inert_then_redact_show_it(text):
    """The timestamp's shortcut (no letter that a letter or a digit does not come before): it gives what inert then
    redact give, on texts that put letters, digits and secrets' parts side by side."""
    assert redaction.as_read(text) == redaction.redact(redaction.inert(text))


def test_a_timestamp_is_shown_without_redact_s_patterns(monkeypatch):
    """100,000 results' creation times are each a new text with a colon: none goes through redact (its patterns
    were a 20th of a 100,000-result report)."""
    monkeypatch.setattr(redaction, "redact", lambda text: pytest.fail(f"redact ran on {text!r}"))
    for text in ("2026-12-05T01:14:52.123456+00:00", "2021-01-01T00:00:00Z", "12:30:01"):
        assert redaction._shown_now(text) == text


_DECLARED = [f for f in record.Workload.__struct_fields__ if f != "options"]
_MAKERS = set(inspect.signature(make_result).parameters)  # make_result's own arguments (nodes, ...) are no option
_OPTION_NAME = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).filter(
    lambda n: n not in _DECLARED and n not in _MAKERS)
_OPTION_VALUE = st.none() | st.booleans() | st.integers(-9, 9) | st.text(max_size=4) | st.lists(st.integers(0, 9),
                                                                                                max_size=3)


@settings(max_examples=60, deadline=None)
@given(options=st.dictionaries(_OPTION_NAME, _OPTION_VALUE, max_size=4), seq=st.booleans())
def test_a_version_3_workloads_own_fields_move_under_options_and_its_group_stays(options, seq):
    """Version 3 kept a workload's options beside its common fields; read now, every field the block does not
    declare is under options, every declared one where it was, and the scaling group's key is the one the version 3
    file had (a reference, a summary and an index name the group as before)."""
    old = make_result("v3", 2, **options)
    old["schema_version"] = 3
    if seq:  # a version 3 file with fields in another order
        old["workload"] = dict(reversed(old["workload"].items()))
    before = results.group_key(old)
    new = results.validate(json.loads(json.dumps(old)))
    assert new["workload"]["options"] == options
    assert {k: v for k, v in new["workload"].items() if k != "options"} == {
        k: v for k, v in old["workload"].items() if k not in options}
    assert results.group_key(new) == before
    assert results.workload_fields(new["workload"]) == old["workload"]


def test_a_kept_version_3_gpt_reads_its_options_and_a_fresh_config_writes_them_there():
    """The kept 2-device GPT of make demo (version 3): preset, seq_len, vocab_size and lora_rank under options;
    what a run of today writes (config.workload) has the same layout and the same group."""
    from scalelab import config

    path = os.path.join(os.path.dirname(__file__), "..", "data", "demo-results",
                        "20261126-190227-gpt-2x-pid29308-4eab1e6c", "result.json")
    new = results.load(path)
    assert new["workload"]["options"] == {"preset": "tiny", "seq_len": 128, "vocab_size": 512, "lora_rank": 0}
    fresh = config.parse_config(["--config", "gpt-tiny"]).workload()
    assert fresh["options"] == new["workload"]["options"] and "preset" not in fresh


@settings(max_examples=25, deadline=None)
@given(tree=st.lists(st.lists(st.sampled_from(["a", "b", "result.json"]), max_size=3), min_size=1, max_size=6),
       spelling=st.sampled_from(["{root}", "{root}/", "{root}//", "./{name}", "./{name}/", ".", "./", ".//"]))
def test_each_result_path_is_its_folder_joined_whatever_the_root_s_spelling(tmp_path_factory, tree, spelling):
    """results.paths builds a result's path from its folder's without os.path.join: for a root given with or
    without trailing separators, relative or absolute, each path is os.path.join's (folder, "result.json"), and a
    folder named result.json below the root is skipped as one."""
    top = tmp_path_factory.mktemp("spelled")
    root = top / "out"
    for parts in tree:
        root.joinpath(*parts).mkdir(parents=True, exist_ok=True)
    for parts in tree:  # a result in each folder where no folder of that name is
        if not root.joinpath(*parts, "result.json").exists():
            root.joinpath(*parts, "result.json").write_text("{}")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root if spelling.startswith(".") and "{name}" not in spelling else top)
        given_as = spelling.format(root=root, name=root.name)
        skipped, walked = [], []
        expected = [os.path.join(folder, "result.json") for folder, _, names in results.files.walk(given_as, walked)
                    if "result.json" in names]
        assert list(results.paths(given_as, skipped)) == expected and expected
        folders = [p for p in root.rglob("result.json") if p.is_dir()]
        assert len(skipped) == len(folders) and all(why == "a folder, not a result file" for _, why in skipped)
