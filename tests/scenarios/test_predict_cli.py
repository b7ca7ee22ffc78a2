"""src/predict.py as a user runs it: the worked example in one command, and one-line errors."""

import pytest

from helpers import run_script

WORKED = ["--params", "2B", "--grad_dtype", "fp32", "--devices", "8", "--num_nodes", "1", "4",
          "--seq_len", "2048", "--global_batch", "16", "--recompute", "--tflops", "312", "--mfu", "0.5"]


def table_row(out, label):
    """The cells of the table row that starts with label."""
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(label)]
    assert len(rows) == 1, out
    return rows[0]


def test_worked_example_one_command():
    res = run_script("predict.py", *WORKED, timeout=60)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert res.stderr == ""
    assert "S = 8 GB" in out
    assert "65.536 TFLOP per GPU per step" in out and "156 TFLOP/s: 0.42 s" in out
    assert "16 at 8 GPUs, 64 at 32 GPUs" in out  # what global batch means at 32 GPUs (weak scaling)
    # scale, GPUs, link, beta, all-reduce GB/GPU, comm s, compute s, ..., comm-bound; a node of 8 GPUs loses 5 % of
    # each step to its host (--node_overhead's default): 0.42 / 0.95 = 0.442 s of compute per GPU there, and no more
    # on more nodes (--node_doubling's default is 0)
    assert table_row(out, "1 GPU")[2:11] == ["1", "none", "-", "0", "0", "0.42", "0.42", "0.42", "no"]
    assert table_row(out, "1 node")[2:11] == ["8", "intra", "300", "14", "0.0467", "0.442", "0.489", "0.442", "no"]
    assert table_row(out, "4 nodes")[2:11] == ["32", "inter", "25", "15.5", "0.62", "0.442", "1.06", "0.62", "yes"]
    assert "2(n-1)/n * S / beta" in out and "unidirectional" in out and "25 GB/s (200 Gbit/s) per node" in out
    verdict = [line for line in out.splitlines() if line.startswith("verdict:")]
    assert verdict == ["verdict: communication-bound from 4 nodes (32 GPUs): all-reduce 0.62 s > compute 0.442 s; "
                       "full overlap needs >= 35.1 GB/s (280 Gbit/s) per node between nodes, or more work per GPU"]
    assert "node overhead: a node running 8 GPUs loses 5 % of each step to its host" in out
    # the 80 % band: each end moved out by exp(1.2816 x √2 x 2.6 %) = 1.0482 (a run and its baseline, each its
    # scatter), the low end further down by exp(0.049) = 1.0502 (the model's own error, docs/12): 1 node
    # 0.42 / 0.489 / 1.0482 / 1.0502 = 78.1 % to 0.95 x 1.0482 = 99.6 %; 4 nodes 0.42 / 1.062 / 1.0482 / 1.0502 to
    # 0.42 / 0.62 x 1.0482
    assert ("80 % band for one run's efficiency against one 1-GPU run: 1 node 78.1%–99.6%, 4 nodes 35.9%–71.0% (no "
            "to full overlap, widened by each run's scatter, 2.6% assumed") in out


def test_no_node_overhead_is_the_link_arithmetic_alone():
    out = run_script("predict.py", *WORKED, "--node_overhead", "0", "--node_doubling", "0", timeout=60).stdout
    assert table_row(out, "1 node")[2:11] == ["8", "intra", "300", "14", "0.0467", "0.42", "0.467", "0.42", "no"]
    assert table_row(out, "4 nodes")[2:11] == ["32", "inter", "25", "15.5", "0.62", "0.42", "1.04", "0.62", "yes"]
    assert "36.9 GB/s (295 Gbit/s)" in out and "node overhead" not in out  # 15.5 GB in 0.42 s
    assert "node doubling" not in out
    doubled = run_script("predict.py", *WORKED, "--node_overhead", "0", "--node_doubling", "0.01",
                         timeout=60).stdout  # 0.42 x 1.02 at 4 nodes
    assert table_row(doubled, "4 nodes")[7] == "0.429" and "36.2 GB/s (289 Gbit/s)" in doubled


def test_the_flags_before_one_name_per_quantity_still_give_the_same_prediction():
    """--gpus_per_node, --nodes and --batch_per_gpu (docs and scripts written before) read as --devices,
    --num_nodes and --batch_per_device, and --help names only the new ones."""
    old = [{"--devices": "--gpus_per_node", "--num_nodes": "--nodes"}.get(a, a) for a in WORKED]
    assert "--gpus_per_node" in old and "--nodes" in old
    assert run_script("predict.py", *old, timeout=60).stdout == run_script("predict.py", *WORKED, timeout=60).stdout
    per_gpu = [a for a in old if a not in ("--global_batch", "16")] + ["--batch_per_gpu", "2"]
    new = [a for a in WORKED if a not in ("--global_batch", "16")] + ["--batch_per_device", "2"]
    assert run_script("predict.py", *per_gpu, timeout=60).stdout == run_script("predict.py", *new, timeout=60).stdout
    shown = run_script("predict.py", "--help").stdout
    assert "--devices" in shown and "--num_nodes" in shown and "--gpus_per_node" not in shown


def test_ndr_halves_the_inter_node_all_reduce():
    res = run_script("predict.py", *WORKED, "--inter_gbit", "400", timeout=60)
    assert res.returncode == 0, res.stderr
    assert table_row(res.stdout, "4 nodes")[2:11] == ["32", "inter", "50", "15.5", "0.31", "0.442", "0.752",
                                                      "0.442", "no"]
    assert "verdict: compute-bound at every scale" in res.stdout


def test_measured_compute_busbw_strong_scaling_budget_and_cost():
    res = run_script("predict.py", "--preset", "tiny", "--compute_s", "0.8", "--devices", "4",
                     "--num_nodes", "2", "--global_batch", "8", "--scaling", "strong", "--busbw_GBps", "1",
                     "--token_budget", "1M", "--gpu_hour_price", "2.5", timeout=60)
    assert res.returncode == 0, res.stderr
    row = table_row(res.stdout, "2 nodes")
    assert row[2:5] == ["8", "1,024", "busbw"]  # strong: tokens per step fixed at 8 x 128
    # compute 0.8 s / 8 GPUs / (1 - 0.05) on nodes of 4 (row[7]: the all-reduce)
    assert row[8] == "0.105"
    assert "train h" in res.stdout and "cost" in res.stdout
    # by hand: tiny = 3,323,392 params, S = 13,293,568 B; comm = 2*7/8 * S / 1 GB/s = 0.02326 s; step 0.1355 s
    # without overlap, 0.1053 s with; 1M tokens / 1,024 per step = 976.5625 steps -> 0.03487 h and 0.02855 h;
    # cost = hours x 8 GPUs x 2.5 = 0.697 and 0.571
    assert row[7] == "0.0233" and row[9:11] == ["0.129", "0.105"]
    assert row[16:20] == ["0.0349", "0.0286", "0.697", "0.571"]
    assert "measured busbw replaces the link figure at 2 nodes: 1 GB/s" in res.stdout


@pytest.mark.parametrize("args, message", [
    (["--params", "0", "--compute_s", "1"], "argument --params: expected a count"),
    (["--params", "-2B", "--compute_s", "1"], "argument --params: expected a count"),
    (["--params", "2X", "--compute_s", "1"], "got '2X'"),
    (["--preset", "huge", "--compute_s", "1"], "argument --preset: invalid choice: 'huge'"),
    (["--params", "2B"], "missing compute inputs"),
    (["--params", "2B", "--seq_len", "2048", "--global_batch", "16", "--tflops", "312"], "(missing --mfu)"),
    (["--params", "2B", "--compute_s", "0"], "argument --compute_s: expected a number from 1e-07 to 100000"),
    (["--params", "2B", "--compute_s", "1", "--devices", "-8"], "argument --devices"),
    (["--params", "2B", "--compute_s", "1", "--num_nodes", "0"], "argument --num_nodes"),
    (["--params", "2B", "--compute_s", "1", "--intra_GBps", "0"], "argument --intra_GBps"),
    (["--params", "2B", "--compute_s", "1", "--tflops", "312", "--mfu", "0.5"], "not both"),
    (["--params", "2B", "--compute_s", "1", "--global_batch", "16", "--scaling", "strong", "--num_nodes", "4"],
     "does not divide evenly over 32 GPUs"),
    (["--params", "2B", "--compute_s", "1", "--token_budget", "1e9"], "--token_budget needs tokens per step"),
    (["--params", "2B", "--compute_s", "1", "--num_nodes", "1", "--busbw_GBps", "20"], "count above 1"),
    (["--compute_s", "1"], "one of the arguments --from --params --preset is required"),
    (["--params", "2B", "--compute_s", "1", "--strategy", "fsdp"], "--strategy fsdp: its units are a preset's blocks"),
    (["--preset", "xl", "--compute_s", "1", "--strategy", "fsdp", "--comm_hook", "bf16"], "DDP's, not FSDP's"),
    (["--preset", "xl", "--compute_s", "1", "--strategy", "fsdp", "--accumulate", "4"], "not modelled for FSDP"),
    (["--preset", "xl", "--compute_s", "1", "--strategy", "fsdp", "--levers"], "--levers sweeps DDP's levers"),
    (["--from", ".", "--strategy", "fsdp"], "--from DIR forecasts each strategy its runs used"),
    (["--from", ".", "--node_overhead", "0"], "measured steps, which hold what a node and the nodes cost: leave "
                                              "--node_overhead out"),
    (["--from", ".", "--node_doubling", "0"], "leave --node_doubling out"),
    (["--params", "2B", "--compute_s", "1", "--node_doubling", "1"], "argument --node_doubling"),
    (["--params", "2B", "--compute_s", "1", "--node_overhead", "1"], "argument --node_overhead"),
])
def test_bad_input_is_one_stderr_line_and_exit_2(args, message):
    res = run_script("predict.py", *args, timeout=60)
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("predict.py: error: "), res.stderr
    assert message in lines[0]


SEED = ["--preset", "xl", "--devices", "2", "--num_nodes", "4", "--inter_gbit", "1", "--batch_per_device", "16",
        "--tflops", "312", "--mfu", "0.5"]


def test_the_seed_scenario_and_its_levers():
    """1.3B GPT, 4 sites x 2 GPUs over 1 Gbit/s, micro batch 16 x 2048, A100 at 50 % MFU, bf16 gradients on the
    wire, accumulation 2: the plan promised 60-75 %; the arithmetic says communication-bound near 10 %."""
    proc = run_script("predict.py", *SEED, "--comm_hook", "bf16", "--accumulate", "2", "--levers")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    (four,) = [line for line in out.splitlines() if line.strip().startswith("4 nodes")]
    eff = float(four.split()[-2].rstrip("%"))
    assert 8 < eff < 11 and " yes " in four  # communication-bound, about a tenth
    assert "(2.632 GB on the wire with --comm_hook bf16), once per 2 batches" in out
    levers = {tuple(line.split()[:2]): line for line in out.splitlines() if line.strip().startswith(
        ("none ", "bf16 ", "powersgd:4 "))}
    none = [float(levers[("none", str(k))].split()[5].rstrip("%")) for k in (1, 2, 4, 8, 16, 32, 64)]
    assert none == sorted(none)  # efficiency rises with K
    assert float(levers[("bf16", "2")].split()[3]) == pytest.approx(float(levers[("none", "2")].split()[3]) / 2,
                                                                    rel=0.01)  # half the bytes, half the time
    assert "levers: none: compute-bound from K = 64; bf16: compute-bound from K = 32; powersgd:4: compute-bound " \
           "from K = 1" in out


def test_powersgd_needs_the_matrix_shapes():
    proc = run_script("predict.py", "--params", "1.3B", "--compute_s", "1", "--comm_hook", "powersgd:4")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "predict.py: error: --comm_hook powersgd:4 compresses each weight matrix by its shape: give --preset")


def test_fsdp_is_predicted_with_its_gathers_and_scatters_as_the_all_reduces_they_cost():
    """--strategy fsdp: the tiny GPT's 9 gathers and 5 scatters in fp32 are all-reduces of 1.475 x DDP's bytes in 7
    calls (a real run moved exactly these: tests/unit/test_sharding.py); in bf16, DDP's fp32 bytes less the
    root's second gather (it is gathered once)."""
    common = ["--preset", "tiny", "--devices", "1", "--num_nodes", "1", "2", "--inter_gbit", "0.2", "--compute_s",
              "0.26", "--batch_per_device", "8"]
    ddp, fsdp = (run_script("predict.py", *common, "--strategy", s, timeout=60) for s in ("ddp", "fsdp"))
    assert ddp.returncode == fsdp.returncode == 0, fsdp.stderr
    assert ("FSDP all-gathers 0.02593 GB (9 calls) and reduce-scatters 0.01329 GB (5) per step: as all-reduces of "
            "S = 0.01961 GB in 7 calls") in fsdp.stdout and "FSDP" not in ddp.stdout.split("\n")[0]
    ratio = float(table_row(fsdp.stdout, "2 nodes")[5]) / float(table_row(ddp.stdout, "2 nodes")[5])  # comm s
    assert ratio == pytest.approx(0.01961 / 0.01329, rel=0.01)
    bf16 = run_script("predict.py", *common, "--strategy", "fsdp", "--grad_dtype", "bf16", timeout=60)
    assert "as all-reduces of S = 0.01313 GB in 7 calls" in bf16.stdout, bf16.stdout[:600]  # DDP's less the root


def test_the_band_widens_each_run_by_the_scatter_of_its_own_steps_length():
    """Strong scaling: 50 ms on 1 GPU, under 10 ms a step from 2 nodes of 4 on: those runs take the short steps'
    9.9 %, the baseline 2.6 %, in quadrature (exp(1.2816 x hypot(9.9 %, 2.6 %)) = 1.1402), and the line names both."""
    out = run_script("predict.py", "--params", "10M", "--devices", "4", "--num_nodes", "1", "2", "8",
                     "--compute_s", "0.05", "--scaling", "strong", "--inter_gbit", "800", timeout=60).stdout
    (line,) = [ln for ln in out.splitlines() if ln.startswith("80 % band")]
    # 8 nodes of 4: compute 0.05 / 32 / 0.95 = 1.645 ms, all-reduce 2 x 31/32 x 40 MB / 100 GB/s = 0.775 ms: no
    # overlap 1.5625 / 2.420 = 64.6 % / 1.1402 / exp(0.049) = 53.9 %, full overlap 0.95 x 1.1402 = 108.3 % (one
    # short run against one baseline may well beat perfect scaling)
    assert "8 nodes 53.9%–108.3%" in line and "2.6% or 9.9% assumed by its step's length" in line
    eight = table_row(out, "8 nodes")
    assert float(eight[-1].rstrip("%")) * 1.1402 == pytest.approx(108.3, abs=0.06)  # the table's full overlap


def test_one_gpu_alone_has_no_band_and_no_empty_line_for_it():
    out = run_script("predict.py", "--params", "1M", "--devices", "1", "--num_nodes", "1", "--compute_s", "1",
                     timeout=60).stdout
    lines = out.splitlines()
    end = next(i for i, ln in enumerate(lines) if ln.strip().startswith("1 GPU"))
    assert "80 % band" not in out and lines[end + 1] == "" and lines[end + 2].startswith("all-reduce (ring")
