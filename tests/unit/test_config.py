"""Configuration: YAML defaults under the command line, and one-line errors for bad input."""

import argparse
import json
import pickle
import re
import sys

import pytest

from helpers import run_script
from scalelab import config, config_flags
from scalelab.errors import UsageError


def test_model_defaults_fill_in():
    mlp = config.parse_config(["--model", "mlp"])
    assert (mlp.batch_size, mlp.max_epochs, mlp.hidden_dims, mlp.num_samples) == (64, 3, [64, 32, 16], 20000)
    gpt = config.parse_config(["--model", "gpt", "--preset", "tiny"])
    assert (gpt.batch_size, gpt.max_steps, gpt.seq_len, gpt.vocab_size) == (8, 50, 128, 512)


def test_the_gpts_old_model_name_is_read_as_gpt_and_said_once(tmp_path, capsys):
    """`--model transformer` (scripts, a result.json replayed from before schema 3) trains the GPT, with one warning."""
    for argv in (["--model", "transformer"], ["--model=transformer"]):
        assert config.parse_config(argv).model == "gpt"
        assert capsys.readouterr().err == ("train.py: warning: --model transformer is now --model gpt "
                                           "(read as such)\n")
    (tmp_path / "old.json").write_text(json.dumps({"schema": "scalelab.result", "kind": "training",
                                                   "config": {"model": "transformer", "preset": "small"}}))
    cfg = config.parse_config(["--config", str(tmp_path / "old.json")])
    assert (cfg.model, cfg.preset) == ("gpt", "small")
    assert capsys.readouterr().err == "train.py: warning: model: transformer is now model: gpt (read as such)\n"
    assert config.parse_config(["--model", "gpt"]).model == "gpt" and capsys.readouterr().err == ""


def test_only_the_value_of_model_is_renamed_and_the_command_line_is_the_processes_own(monkeypatch, capsys):
    assert config.parse_config(["--run_name", "transformer", "--model", "mlp"]).run_name == "transformer"
    with pytest.raises(UsageError, match="^argument --model: expected one argument$"):  # argparse's, no IndexError
        config.parse_config(["--run_name", "x", "--model"])
    with pytest.raises(UsageError, match="invalid choice: 'x=y'"):  # the value whole, '=' and all
        config.parse_config(["--model=x=y"])
    monkeypatch.setattr(sys, "argv", ["train.py", "--model", "transformer", "--preset", "small"])
    cfg = config.parse_config()  # train.py's own command line: sys.argv after the script's name
    assert (cfg.model, cfg.preset) == ("gpt", "small") and "is now --model gpt" in capsys.readouterr().err


def test_yaml_values_are_defaults_and_cli_wins(tmp_path):
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text("batch_size: 32\nhidden_dims: [8, 4]\nlearning_rate: 0.01\nmax_epochs: 2\n")
    cfg = config.parse_config(["--config", str(cfg_file), "--batch_size", "16"])
    assert cfg.batch_size == 16  # command line wins
    assert cfg.hidden_dims == [8, 4] and cfg.learning_rate == 0.01 and cfg.max_epochs == 2  # YAML beats defaults


@pytest.mark.parametrize("text, message", [
    ("batch_sizee: 3\n", "unknown key 'batch_sizee'"),
    ("batch_size: -4\n", "batch_size: expected an integer from 1 to 1,048,576"),
    ("model: vit\n", "'vit' is not one of"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("batch_size: [1\n", "not readable YAML"),
])
def test_bad_yaml_is_one_clear_error(tmp_path, text, message):
    cfg_file = tmp_path / "bad.yaml"
    cfg_file.write_text(text)
    with pytest.raises(UsageError, match=message.replace("[", r"\[")):
        config.parse_config(["--config", str(cfg_file)])


def test_strong_scaling_splits_the_global_batch():
    cfg = config.parse_config(["--scaling", "strong", "--batch_size", "64"])
    assert cfg.batch_per_device(4) == 16
    with pytest.raises(UsageError, match="does not divide"):
        cfg.batch_per_device(3)
    weak = config.parse_config(["--batch_size", "64"])
    assert weak.batch_per_device(4) == 64


def test_workload_identity_ignores_launch_fields():
    one = config.parse_config(["--model", "gpt", "--devices", "1", "--output_dir", "a", "--seed", "1"])
    four = config.parse_config(["--model", "gpt", "--devices", "4", "--output_dir", "b", "--seed", "2"])
    assert one.workload() == four.workload()
    assert "hidden_dims" not in one.workload()  # MLP knobs do not split GPT groups


def test_lora_rank_from_yaml_is_its_own_scaling_group(tmp_path):
    cfg_file = tmp_path / "lora.yaml"
    cfg_file.write_text("model: gpt\nlora_rank: 8\n")
    lora = config.parse_config(["--config", str(cfg_file)])
    full = config.parse_config(["--config", str(cfg_file), "--lora_rank", "0"])  # command line wins
    assert (lora.lora_rank, full.lora_rank) == (8, 0)
    assert lora.workload() != full.workload() and lora.workload()["options"]["lora_rank"] == 8
    cfg_file.write_text("model: gpt\nlora_rank: -1\n")
    with pytest.raises(UsageError, match="lora_rank: expected an integer from 0 to 65,536"):
        config.parse_config(["--config", str(cfg_file)])


@pytest.mark.parametrize("args, message", [
    (["--batch_size", "0"],
     "argument --batch_size: expected an integer from 1 to 1,048,576 (samples in one step), got '0'"),
    (["--model", "vit"], "argument --model: invalid choice: 'vit'"),
    (["--preset", "huge", "--model", "gpt"], "argument --preset: invalid choice: 'huge'"),
    (["--dropout", "1.5"], "argument --dropout: expected a number in [0, 1)"),
    (["--max_steps", "5", "--warmup_steps", "5"], "leaves no timed step"),
    (["--config", "/nonexistent/run.yaml"], "--config /nonexistent/run.yaml: no such file"),
    (["--output_dir", "/etc/hostname"], "is a file, not a folder"),
    (["--num_nodes", "2"], "needs a launcher that starts the other nodes"),
    (["--precision", "16-mixed", "--accelerator", "cpu"], "16-mixed needs a GPU"),
    (["--scaling", "strong", "--batch_size", "65", "--devices", "2"], "does not divide"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--model", "mlp", "--lora_rank", "4"], "--lora_rank applies to --model gpt only"),
    (["--static_graph", "--accumulate_grad_batches", "4"], "--static_graph cannot be used with "
     "--accumulate_grad_batches 4"),
])
def test_train_cli_bad_input_is_one_line_and_exit_2(args, message):
    proc = run_script("train.py", *args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("train.py: error: ") and message in lines[0]


@pytest.mark.parametrize("argv, message", [
    (["--preset", "small"], "--preset applies to --model gpt only"),  # the default model is mlp
    (["--model", "mlp", "--seq_len", "64"], "--seq_len applies to --model gpt only"),
    (["--model", "gpt", "--dropout", "0"], "--dropout applies to --model mlp only"),
    (["--model", "gpt", "--hidden_dims", "128"], "--hidden_dims applies to --model mlp only"),
])
def test_another_workloads_flag_is_refused(argv, message):
    with pytest.raises(UsageError, match=f"^{message}$"):
        config.parse_config(argv)


def test_another_workloads_flag_at_its_default_changes_nothing_and_passes():
    assert config.parse_config(["--model", "mlp", "--preset", "tiny", "--lora_rank", "0"]).model == "mlp"


def test_another_workloads_key_in_yaml_is_refused(tmp_path):
    (tmp_path / "run.yaml").write_text("model: gpt\nhidden_dims: [32, 16]\n")
    with pytest.raises(UsageError, match="^--hidden_dims applies to --model mlp only$"):
        config.parse_config(["--config", str(tmp_path / "run.yaml")])


def test_run_configs_pickle_and_share_no_default_list():
    a, b = config.parse_config(["--model", "mlp"]), config.parse_config(["--model", "mlp"])
    a.hidden_dims.append(8)
    assert b.hidden_dims == [64, 32, 16]
    assert pickle.loads(pickle.dumps(b)) == b  # submitit and multiprocessing pickle what they ship


TORCHRUN_2x2 = {"TORCHELASTIC_RUN_ID": "t", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "RANK": "0",
                "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("args, message", [
    (["--devices", "4"], "--devices 4 does not match torchrun --nproc_per_node=2:"),
    (["--num_nodes", "3"], "--num_nodes 3 does not match torchrun --nnodes=2:"),
])
def test_sizes_that_disagree_with_torchrun_are_refused_before_any_rank_waits(args, message):
    # what torchrun --nnodes 2 --nproc_per_node 2 exports to a rank, without starting the other three
    proc = run_script("train.py", "--model", "mlp", *args, env=TORCHRUN_2x2, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"train.py: error: {message}")


def test_precision_follows_the_hardware_the_run_got_unless_given():
    """One default for every launcher (sbatch scripts, submit.py, the demo): the GPT on GPUs in bf16-mixed."""
    gpt = ["--model", "gpt"]
    assert config.for_accelerator(config.parse_config(gpt), "gpu").precision == "bf16-mixed"
    assert config.for_accelerator(config.parse_config(gpt), "cpu").precision == "32"
    assert config.for_accelerator(config.parse_config(["--model", "mlp"]), "gpu").precision == "32"
    given = config.parse_config([*gpt, "--precision", "32"])
    assert config.for_accelerator(given, "gpu").precision == "32"
    assert config.parse_config(gpt).precision is None  # not decided before the hardware is known


def test_gpu_runs_warm_up_past_ddps_runtime_statistics_at_every_world_size_unless_given():
    """DDP syncs the GPU at the start of forward in its synchronised steps 2-11 (runtime statistics): the GPU
    warm-up covers them; CPU keeps its 5; a run too short for its warm-up is refused, as one given; a given stays."""
    gpt = ["--model", "gpt", "--max_steps", "50"]
    assert config.parse_config(gpt).warmup_steps is None  # not decided before the hardware is known
    assert config.for_accelerator(config.parse_config(gpt), "gpu").warmup_steps == 11
    assert config.for_accelerator(config.parse_config(gpt), "cpu").warmup_steps == 5
    with pytest.raises(UsageError, match="^--warmup_steps 11 leaves no timed step out of --max_steps 11; use fewer"):
        config.for_accelerator(config.parse_config(["--model", "gpt", "--max_steps", "11"]), "gpu")
    with pytest.raises(UsageError, match="^--warmup_steps 5 leaves no timed step out of --max_steps 5; use fewer"):
        config.parse_config(["--model", "gpt", "--max_steps", "5"])  # the CPU default: refused before the launch
    short = config.parse_config(["--model", "gpt", "--max_steps", "5", "--warmup_steps", "3"])  # given: its own
    assert config.for_accelerator(short, "cpu").warmup_steps == 3
    twelve = config.parse_config(["--model", "gpt", "--max_steps", "12"])
    assert config.for_accelerator(twelve, "gpu").warmup_steps == 11
    assert config.for_accelerator(config.parse_config(["--model", "mlp"]), "gpu").warmup_steps == 11  # epochs
    assert config.for_accelerator(config.parse_config([*gpt, "--warmup_steps", "3"]), "gpu").warmup_steps == 3


def test_one_gpu_per_task_is_caught_before_lightning_asks_for_gpus_it_cannot_see():
    from scalelab.launch.cluster import check_visible_gpus

    check_visible_gpus(4, 4, "0,1,2,3")  # every task sees the node's 4 GPUs: fine
    check_visible_gpus(1, 1, "2")
    with pytest.raises(UsageError) as err:
        check_visible_gpus(4, 1, "2")
    assert str(err.value) == ("each task sees 1 GPU(s) (CUDA_VISIBLE_DEVICES=2) but --devices 4 needs every task to "
                              "see the node's 4: run srun with --gpu-bind=none, or request --gres=gpu:4 per node "
                              "instead of --gpus-per-task")


def test_a_named_config_is_what_the_jobs_and_the_demo_run():
    from scalelab import demo

    cfg = config.parse_config(["--config", "gpt-tiny", "--max_steps", "7"])  # the command line still wins
    assert (cfg.model, cfg.preset, cfg.batch_size, cfg.max_steps) == ("gpt", "tiny", 8, 7)
    assert demo.WORKLOADS["gpt"].flags == ["--config", "gpt-tiny"]
    assert demo.WORKLOADS["mlp"].flags == ["--config", "mlp"]
    for name, part in demo.WORKLOADS.items():  # each of the demo's parts runs the workload it is listed as
        assert config.parse_config(part.flags).model == name
    assert set(config.named_configs()) >= {"mlp", "gpt-tiny", "gpt-small", "gpt-medium", "gpt-large", "gpt-xl"}


@pytest.mark.parametrize("name", config.named_configs())
def test_a_named_config_sets_only_what_differs_from_the_defaults(name):
    """One place per default: a named config that repeats a default (warm-up 5, the GPT's batch 8 or 50 steps) would
    keep the old value when the default changes. Each key it sets must change the resolved run, but those its name
    states (gpt-tiny: the model gpt and the preset tiny, whatever the defaults become)."""
    import yaml

    with open(config._config_path(name), encoding="utf-8") as fh:
        keys = yaml.safe_load(fh)
    assert name == "-".join(str(keys[k]) for k in ("model", "preset") if k in keys)
    resolved = config.parse_config(["--config", name]).to_dict()
    for key in keys:
        if key in ("model", "preset"):
            continue
        without = {k: v for k, v in keys.items() if k != key}
        argv = [f"--{k}={v}" for k, v in without.items()]
        assert config.parse_config(argv).to_dict()[key] != resolved[key], f"{name}: {key} repeats its default"


def test_model_mlp_and_config_mlp_are_the_same_job():
    """The demo and the CPU jobs run --config mlp; a participant types --model mlp: 3 epochs of 20,000 samples both."""
    by_model, by_name = config.parse_config(["--model", "mlp"]), config.parse_config(["--config", "mlp"])
    assert (by_model.max_epochs, by_model.num_samples) == (by_name.max_epochs, by_name.num_samples) == (3, 20000)
    assert by_model.workload() == by_name.workload()  # one scaling group, not two


def test_print_config_reads_back_as_the_same_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        config.parse_config(["--config", "gpt-small", "--accumulate_grad_batches", "4", "--print_config"])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "preset: small" in printed and "accumulate_grad_batches: 4" in printed and "hidden_dims" not in printed
    (tmp_path / "again.yaml").write_text(printed)
    again = config.parse_config(["--config", str(tmp_path / "again.yaml")])
    original = config.parse_config(["--config", "gpt-small", "--accumulate_grad_batches", "4"])
    assert printed == config.settings_yaml(original) and not printed.endswith("\n\n")  # no blank line after it
    assert again.workload() == original.workload()


def test_a_result_json_re_runs_that_run(run, tmp_path, capsys):
    out = tmp_path / "first"
    proc = run("train.py", "--config", "mlp", "--num_samples", "2000", "--max_epochs", "1", "--hidden_dims", "16",
               "--output_dir", out, "--run_name", "first")
    assert proc.returncode == 0, proc.stderr
    (result,) = out.glob("*/result.json")
    replay = config.parse_config(["--config", str(result)])
    first = config.parse_config(["--config", "mlp", "--num_samples", "2000", "--max_epochs", "1",
                                 "--hidden_dims", "16"])
    assert replay.workload() == config.for_accelerator(first, "cpu").workload()  # precision as that run resolved it
    assert replay.output_dir == "outputs" and replay.run_name is None  # where it lands is the new run's choice
    bench = json.loads(result.read_text()) | {"kind": "allreduce"}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    with pytest.raises(UsageError, match="a scalelab allreduce result, not a training run's"):
        config.parse_config(["--config", str(tmp_path / "bench.json")])


def test_an_unknown_config_name_lists_the_named_ones():
    with pytest.raises(UsageError, match=r"--config gpt-huge: no such file, nor a named config \(gpt-large, "):
        config.parse_config(["--config", "gpt-huge"])


@pytest.mark.parametrize("args, message", [
    (["--batch_size", "0"],
     "argument --batch_size: expected an integer from 1 to 1,048,576 (samples in one step), got '0'"),
    (["--model", "vit"], "argument --model: invalid choice: 'vit' (choose from 'mlp', 'gpt', 'resnet50', 'bert')"),
    (["--dropout", "1.5"], "argument --dropout: expected a number in [0, 1), got '1.5'"),
    (["--max_steps", "5", "--warmup_steps", "5"],
     "--warmup_steps 5 leaves no timed step out of --max_steps 5; use fewer warm-up steps or more steps"),
    (["--config", "/nonexistent/run.yaml"], "--config /nonexistent/run.yaml: no such file, nor a named config "
     "(gpt-large, gpt-medium, gpt-small, gpt-tiny, gpt-xl, mlp)"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--model", "mlp", "--lora_rank", "4"], "--lora_rank applies to --model gpt only"),
    (["--static_graph", "--accumulate_grad_batches", "2"], "--static_graph cannot be used with "
     "--accumulate_grad_batches 2: the first batch would run under DDP's no_sync, which a static graph does not "
     "allow; drop one of them"),
])
def test_bad_flags_are_refused_in_process_with_the_same_line(args, message):
    with pytest.raises(UsageError) as err:
        config.parse_config(args)
    assert str(err.value) == message


WHY_NOT_DDP = "DDP's, not FSDP's (it all-gathers each block's parameters and reduce-scatters their gradients itself)"


@pytest.mark.parametrize("args, message", [
    (["--model", "mlp", "--strategy", "fsdp"], "--strategy fsdp: --model mlp declares nothing to shard "
     "(WorkloadSpec.shards, and its module's shard method); use --strategy ddp"),
    (["--model", "gpt", "--strategy", "fsdp", "--comm_hook", "bf16"],
     f"--comm_hook: {WHY_NOT_DDP}; drop it or use --strategy ddp"),
    (["--model", "gpt", "--strategy", "fsdp", "--bucket_cap_mb", "50", "--static_graph"],
     f"--bucket_cap_mb, --static_graph: {WHY_NOT_DDP}; drop it or use --strategy ddp"),
    (["--model", "gpt", "--strategy", "fsdp", "--precision", "16-mixed"], "--precision 16-mixed: Lightning's FSDP2 "
     "strategy takes 32, bf16-mixed (or 16-true); use bf16-mixed, or --strategy ddp"),
    (["--model", "gpt", "--strategy", "fsdp", "--comm_probe_every", "5"], "--comm_probe_every 5: no probe step "
     "under --strategy fsdp (a no-sync step still all-gathers every block and keeps its gradients for the next "
     "reduce-scatter); drop it"),
])
def test_what_fsdp_cannot_run_is_refused_in_one_whole_line(args, message):
    """Each --strategy fsdp refusal names every flag at fault, says why and what to run instead: a DDP knob let
    through would be silently ignored by FSDP, and a line cut short or emptied leaves the user guessing."""
    with pytest.raises(UsageError) as err:
        config.parse_config(args)
    assert str(err.value) == message


def test_a_static_graph_goes_with_one_batch_per_step_only(tmp_path):
    """K = 1 (every backward synchronised) keeps --static_graph; K > 1 without it keeps accumulating; both together
    are refused, from a config file too."""
    assert config.parse_config(["--static_graph", "--accumulate_grad_batches", "1"]).static_graph is True
    assert config.parse_config(["--accumulate_grad_batches", "4"]).accumulate_grad_batches == 4
    path, error = config_error(tmp_path, "static_graph: true\naccumulate_grad_batches: 3\n")
    assert error.startswith("--static_graph cannot be used with --accumulate_grad_batches 3: ")


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "expected a mapping of flag names to values"),
    ("batch_size: [1, 2]", "batch_size: expected one value, got a list"),
    ("hidden_dims: [[1]]", "hidden_dims: expected a value, got [1]"),
    ("static_graph: 1", "static_graph: expected true or false, got 1"),
    ("batch_size: 0", "batch_size: expected an integer from 1 to 1,048,576 (samples in one step), got '0'"),
    ("model: vit", "model: 'vit' is not one of mlp, gpt, resnet50, bert"),
    ("bogus_flag: 1", "unknown key 'bogus_flag' (keys are flag names, e.g. batch_size)"),
    ("Xbatch_size: 8", "unknown key 'Xbatch_size' (keys are flag names, e.g. batch_size)"),  # only dashes dropped
    ("a: [", "not readable YAML (while parsing a flow node)"),  # the first line of yaml's own message
    ('{"schema": "scalelab.result", "kind": "allreduce"}', "a scalelab allreduce result, not a training run's"),
])
def test_a_bad_config_file_says_which_key_and_why(tmp_path, text, message):
    path, error = config_error(tmp_path, text)
    assert error == f"--config {path}: {message}"


def config_error(tmp_path, text):
    """(the config file, the one line parse_config refuses it with)."""
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        config.parse_config(["--config", str(path)])
    return path, str(err.value)


def test_a_config_file_gets_the_command_lines_types_and_a_result_replays_its_run(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("batch-size: '32'\nhidden_dims: [8, 4]\nstatic_graph: true\nseed: null\n")
    cfg = config.parse_config(["--config", str(path)])
    assert (cfg.batch_size, cfg.hidden_dims, cfg.static_graph) == (32, [8, 4], True)
    path.write_text("")
    assert config.parse_config(["--config", str(path)]).batch_size == config.parse_config([]).batch_size


def test_a_null_in_a_config_file_leaves_the_flags_default(tmp_path):
    """`seed: null` or `accumulate_grad_batches: null` means "not set here": the default (42, one batch per step),
    not a None the run would fail on when it seeds the data or counts samples; and a null static graph's partner
    is then one batch per step, which --static_graph allows."""
    path = tmp_path / "run.yaml"
    path.write_text("static_graph: true\naccumulate_grad_batches: null\nseed: null\nbatch_size: null\n")
    cfg = config.parse_config(["--config", str(path)])
    assert (cfg.static_graph, cfg.accumulate_grad_batches, cfg.seed, cfg.batch_size) == (True, 1, 42, 64)


def test_a_result_json_replays_its_runs_settings_but_not_where_it_wrote(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"schema": "scalelab.result", "kind": "training", "config": {
        "model": "mlp", "batch_size": 32, "output_dir": "/elsewhere", "run_name": "old", "seed": None}}))
    cfg = config.parse_config(["--config", str(path)])
    assert (cfg.batch_size, cfg.output_dir, cfg.run_name, cfg.seed) == (32, "outputs", None, 42)  # the defaults
    path.write_text(json.dumps({"schema": "scalelab.result", "kind": "training"}))
    with pytest.raises(UsageError) as err:
        config.parse_config(["--config", str(path)])
    assert str(err.value) == f"--config {path}: a scalelab training result, not a training run's"


@pytest.mark.parametrize("key", ["config", "help", "print_config", "version"])
def test_a_config_file_cannot_set_what_only_the_command_line_does(tmp_path, key):
    path, error = config_error(tmp_path, f"{key}: x\n")
    assert error == f"--config {path}: unknown key {key!r} (keys are flag names, e.g. batch_size)"


def test_flag_spellings_and_hooks_a_config_file_accepts(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("--batch-size: 8\n")
    assert config.parse_config(["--config", str(path)]).batch_size == 8
    hooks = ("none", "fp16", "bf16", "powersgd", "powersgd:1", "powersgd:4")
    assert [config_flags.comm_hook_type(t) for t in hooks] == [
        "none", "fp16", "bf16", "powersgd:1", "powersgd:1", "powersgd:4"]
    for bad in ("fp16:2", "powersgd:0", "powersgd:x", "int8"):
        with pytest.raises(argparse.ArgumentTypeError) as err:
            config_flags.comm_hook_type(bad)
        assert str(err.value) == f"expected none, fp16, bf16 or powersgd[:RANK], got {bad!r}"


def test_the_printed_settings_are_this_workloads_in_flag_order_and_steps_stay_unset_where_epochs_are():
    text = config.settings_yaml(config.parse_config(["--model", "mlp", "--batch_size", "8"]))
    assert text.splitlines()[:5] == ["model: mlp", "num_samples: 20000", "batch_size: 8", "learning_rate: 0.001",
                                     "max_epochs: 3"]  # the flags' order, not sorted; unset ones left out
    assert "preset:" not in text and "max_steps" not in text and "hidden_dims:" in text
    gpt = config.parse_config(["--model", "gpt"])
    assert (gpt.max_steps, gpt.max_epochs) == (50, None)  # a step budget: no epoch count made up
    assert config.parse_config(["--model", "mlp", "--batch_size", "64"]).batch_per_device(4) == 64
    strong = config.parse_config(["--model", "mlp", "--scaling", "strong", "--batch_size", "64"])
    assert strong.batch_per_device(4) == 16 and isinstance(strong.batch_per_device(4), int)


def test_python_m_scalelab_train_names_itself_train_py(monkeypatch, capsys):
    """Under `python -m scalelab.train` argv[0] is the package's __main__.py: --version and the usage line
    still say train.py, the name the tutorial uses."""
    from scalelab import __version__

    monkeypatch.setattr(sys, "argv", ["/site-packages/scalelab/train/__main__.py"])
    with pytest.raises(SystemExit):
        config.parse_config(["--version"])
    assert capsys.readouterr().out == f"train.py (scalelab) {__version__}\n"
    with pytest.raises(SystemExit):
        config.parse_config(["--help"])
    assert capsys.readouterr().out.startswith("usage: train.py ")


def test_the_default_workload_file_reads_as_utf8_whatever_the_locale(tmp_path, monkeypatch):
    """The sbatch scripts and submit.py share configs/default-workload.txt; a note in it written in UTF-8 (an em
    dash) must not stop a job on a node whose locale is plain ASCII."""
    import locale

    note = "# GPUs \u2014 the GPT; CPUs \u2014 the MLP\n"
    (tmp_path / "default-workload.txt").write_text(note + "gpu gpt-small\ncpu mlp\n", encoding="utf-8")
    monkeypatch.setattr(config, "CONFIG_DIR", str(tmp_path))
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # open()'s default encoding is now ASCII
    try:
        assert (config.default_config("gpu"), config.default_config("cpu")) == ("gpt-small", "mlp")
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


@pytest.mark.parametrize("key", ["output_dir", "output-dir", "--output_dir", "--output-dir", "run-name", "logger",
                                 "devices", "num_nodes", "threads", "timeout", "num_workers", "comet_project"])
def test_a_replayed_result_never_says_where_or_how_the_run_writes_and_launches(tmp_path, key):
    """Issue 37's second cause: a crafted result.json spelling `"output-dir"` or `"--output_dir"` slipped past the
    filter that kept output_dir out of a replay, and the replay wrote where the file said. A replay takes an
    allow-list (config.REPLAYED_COMMON and the workloads' options), however a key is spelled."""
    value = {"logger": "tensorboard", "devices": 64, "num_nodes": 9, "threads": 64, "timeout": 1e9,
             "num_workers": 100000}.get(key.lstrip("-").replace("-", "_"), str(tmp_path / "elsewhere"))
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"schema": "scalelab.result", "kind": "training",
                                "config": {"model": "mlp", "batch_size": 16, key: value}}))
    cfg = config.parse_config(["--config", str(path)])
    defaults = config.parse_config([])
    assert cfg.batch_size == 16
    for field in ("output_dir", "run_name", "logger", "devices", "num_nodes", "threads", "timeout", "num_workers",
                  "comet_project"):
        assert getattr(cfg, field) == getattr(defaults, field), field


def test_a_replayed_results_values_are_checked_as_the_flags_are(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"schema": "scalelab.result", "kind": "training",
                                "config": {"model": "mlp", "batch-size": -3}}))
    with pytest.raises(UsageError, match=r"^--config .*: batch_size: .*-3"):
        config.parse_config(["--config", str(path)])


@pytest.mark.parametrize("flag, value, bound", [
    ("--num_workers", "100000", "from 0 to 64 (DataLoader processes each rank starts)"),
    ("--devices", "100000", "from 1 to 256"), ("--num_nodes", "5000", "from 1 to 4,096"),
    ("--threads", "5000", "from 1 to 1,024"), ("--timeout", "1e12", "from 0.001 to 86400"),
    ("--batch_size", "2000000", "from 1 to 1,048,576"), ("--num_samples", "2000000000", "to 1,000,000,000"),
    ("--seed", "-1", "from 0 to 4,294,967,295"), ("--hidden_dims", "100000", "from 1 to 65,536"),
    ("--max_steps", "10000000000", "to 1,000,000,000"), ("--accumulate_grad_batches", "100000", "to 10,000"),
])
def test_an_absurd_value_is_refused_in_one_line_with_its_bound(flag, value, bound):
    """Issue 37's third cause: --num_workers 100000 forked 928 processes and 15.7 GB before it was killed."""
    with pytest.raises(UsageError) as err:
        config.parse_config([flag, value])
    assert f"argument {flag}: expected" in str(err.value) and bound in str(err.value) and value in str(err.value)
    assert "\n" not in str(err.value)


def test_a_replay_asking_for_absurd_values_is_refused_as_the_command_line_is(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("num_workers: 100000\n")
    with pytest.raises(UsageError, match=r"num_workers: expected an integer from 0 to 64"):
        config.parse_config(["--config", str(path)])
    path.write_text(json.dumps({"schema": "scalelab.result", "kind": "training",
                                "config": {"model": "mlp", "hidden_dims": [8, 10**9]}}))
    with pytest.raises(UsageError, match=r"hidden_dims: expected an integer from 1 to 65,536"):
        config.parse_config(["--config", str(path)])



@pytest.mark.parametrize("key", ["batch-size", "--batch-size", "-batch_size", "batch_size"])
def test_a_config_key_is_read_as_the_flag_it_spells(key):
    assert config._dest(key) == "batch_size"
    assert config._dest(f"{key}-") != "batch_size"  # only the leading dashes are the flag's


@pytest.mark.parametrize("argv, steps, epochs", [
    (["--model", "mlp", "--max_steps", "500"], 500, None),  # the dry run: the MLP's 3 epochs ended it at step 117
    (["--model", "mlp"], None, 3),
    (["--model", "mlp", "--max_steps", "500", "--max_epochs", "2"], 500, 2),  # both given: whichever comes first
    (["--model", "gpt", "--max_epochs", "2"], None, 2),  # the GPT's 50 steps would end an epoch budget, too
    (["--config", "gpt-tiny"], 30, None),
    (["--config", "gpt-tiny", "--max_epochs", "1"], 30, 1),  # the config's 30 steps are given as well
])
def test_a_run_length_the_user_gives_is_not_capped_by_the_workloads_other_default(argv, steps, epochs):
    cfg = config.parse_config(argv)
    assert (cfg.max_steps, cfg.max_epochs) == (steps, epochs)


def test_a_run_the_epochs_ended_before_its_max_steps_says_so():
    from scalelab.train.say import epochs_first

    both = config.parse_config(["--model", "mlp", "--max_steps", "500", "--max_epochs", "3"])
    assert epochs_first(both, 117) == ("--max_epochs 3 ended the run at step 117, before --max_steps 500 (give only "
                                       "--max_steps to train that many steps)")
    assert epochs_first(both, 500) is None  # the steps ended it
    assert epochs_first(config.parse_config(["--model", "mlp"]), 117) is None  # epochs only: nothing to say


def test_the_levers_are_the_flags_of_train_pys_levers_group_with_common_configs_defaults():
    group = next(g for g in config.build_parser()._action_groups if g.title.startswith("the levers"))
    assert [a.dest for a in group._group_actions] == list(config.LEVERS)
    assert config.LEVER_DEFAULTS == {"strategy": "ddp", "accumulate_grad_batches": 1, "comm_hook": "none",
                                     "bucket_cap_mb": 25.0, "static_graph": False}
    assert config.LEVER_DEFAULTS == {k: getattr(config.RunConfig(), k) for k in config.LEVERS}


def test_fsdp_drops_a_replayed_probe_cadence_and_refuses_a_typed_one_or_float16(tmp_path):
    """A DDP result.json (or --print_config) says comm_probe_every: 5; replaying it under --strategy fsdp is the
    same job sharded, so the cadence is dropped (FSDP takes no probe step), while one typed on the command line is
    refused; 16-mixed is not a precision Lightning's FSDP2 strategy takes."""
    replay = tmp_path / "ddp.yaml"
    replay.write_text("model: gpt\ncomm_probe_every: 5\n")
    cfg = config.parse_config(["--config", str(replay), "--strategy", "fsdp"])
    assert (cfg.strategy, cfg.comm_probe_every) == ("fsdp", 0)
    assert config.parse_config(["--config", str(replay)]).comm_probe_every == 5  # DDP keeps it
    for extra, said in ((["--comm_probe_every", "5"], "no probe step under --strategy fsdp"),
                        (["--precision", "16-mixed"], "--precision 16-mixed: Lightning's FSDP2 strategy")):
        with pytest.raises(UsageError, match=re.escape(said)):
            config.parse_config(["--model", "gpt", "--strategy", "fsdp", *extra])
