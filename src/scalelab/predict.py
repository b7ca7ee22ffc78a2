"""Predict data-parallel scaling before running it: step time, speedup and efficiency at 1 GPU, one node
and several nodes, from gradient size, link bandwidths and compute per GPU (ring all-reduce model).

The logic of src/predict.py: flags -> perfmodel.ScalingInputs (plus the lines that explain the work per GPU
and the compute) -> perfmodel.predict -> table, formula and verdict. Pure arithmetic: importing it must not
import torch, so the prediction is instant on a laptop.
"""

import argparse
import dataclasses
import math
import sys

from tabulate import tabulate

from scalelab import entry
from scalelab import perfmodel as pm
from scalelab.config_flags import comm_hook_type
from scalelab.entry import (
    DEVICES,
    FORECAST_NODES,
    OneLineParser,
    count,
    glue_negative,
    human_count,
    run_piped,
    unit_fraction,
)
from scalelab.errors import UsageError
from scalelab.perfmodel import levers, noise
from scalelab.workloads.presets import PRESETS

PROG = "predict.py"

# Old flag: (its new name's dest, nargs): the names before one name per quantity (docs/appendix-a-columns.md)
OLD_FLAGS = (("--gpus_per_node", "devices", None), ("--nodes", "num_nodes", "+"))


def parse_args(argv):
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--from", dest="from_dir", metavar="DIR",
                      help="a results folder: forecast every workload in it from what it measured (the same as "
                           "`benchmark.py --forecast`; with --num_nodes, --inter_gbit, --token_budget, "
                           "--gpu_hour_price)")
    what.add_argument("--params", type=count, help="parameter count: 2e9, 2B, 1.3B, 350M")
    what.add_argument("--preset", choices=sorted(PRESETS),
                      help="a scalelab GPT shape (uses its total params; with a batch, also says whether a step fits "
                           "each common GPU's memory under DDP, and from how many GPUs under FSDP)")
    p.add_argument("--grad_dtype", choices=("fp32", "bf16", "fp16"), default="fp32",
                   help="gradient dtype DDP all-reduces (fp32 for fp32 params, also under bf16-mixed)")
    p.add_argument("--devices", type=DEVICES, default=8,
                   help="GPUs per node, as train.py's --devices (default 8)")
    p.add_argument("--num_nodes", type=FORECAST_NODES, nargs="+", default=[1, 2, 4],
                   help="node counts to predict, as train.py's --num_nodes (default 1 2 4)")
    for old, new, nargs in OLD_FLAGS:  # the names before one name per quantity: still read, not shown
        p.add_argument(old, dest=new, type=FORECAST_NODES if new == "num_nodes" else DEVICES, nargs=nargs,
                       default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument("--intra_GBps", type=entry.GBPS, default=300.0,
                   help="intra-node GB/s per GPU, unidirectional (default 300: NVLink 3; NVLink 4 450, PCIe 4 31)")
    p.add_argument("--inter_gbit", type=entry.GBIT, default=200.0,
                   help="inter-node Gbit/s per node, unidirectional (default 200: HDR; NDR 400)")
    p.add_argument("--intra_latency_us", type=entry.LATENCY_US, default=0.0, help="per ring step (default 0)")
    p.add_argument("--inter_latency_us", type=entry.LATENCY_US, default=0.0, help="per ring step (default 0)")
    p.add_argument("--bucket_mb", type=entry.BUCKET_MB, default=25.0,
                   help="DDP bucket size in MiB: latency is paid once per bucket (default 25)")
    for flag, default, what in (("--node_overhead", pm.NODE_OVERHEAD, "a node of several GPUs loses to its host"),
                                ("--node_doubling", pm.NODE_DOUBLING, "each doubling of the node count costs")):
        p.add_argument(flag, type=unit_fraction, default=default, help=f"share of a step {what}, network or not "
                       "(default %(default)g: learned from published runs, docs/12)")
    p.add_argument("--busbw_GBps", type=entry.GBPS, nargs="+",
                   help="measured all-reduce busbw (GB/s) replacing the link figures for node counts > 1: "
                        "one value for all, or one per node count > 1")
    p.add_argument("--compute_s", type=entry.STEP_SECONDS, help="measured compute time of one step on 1 GPU")
    p.add_argument("--seq_len", type=entry.SEQ_LEN, help="tokens per sequence (default: the preset's)")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--global_batch", type=entry.GLOBAL_BATCH,
                       help="sequences per step across one full node (16 on 8 GPUs = 2 per GPU)")
    batch.add_argument("--batch_per_device", type=entry.BATCH,
                       help="sequences per GPU per step at one node (a result's batch_per_device)")
    batch.add_argument("--batch_per_gpu", dest="batch_per_device", type=entry.BATCH, help=argparse.SUPPRESS)
    p.add_argument("--recompute", action="store_true", help="activation recomputation: k = 4 instead of 3")
    p.add_argument("--tflops", type=entry.TFLOPS, help="peak TFLOP/s per GPU (A100 bf16 312, H100 SXM 989.5)")
    p.add_argument("--mfu", type=entry.MFU, help="model FLOPs utilisation, 0.5 = 50 %% of peak")
    p.add_argument("--scaling", choices=("weak", "strong"), default="weak",
                   help="weak: per-GPU batch fixed (global batch grows); strong: global batch fixed")
    p.add_argument("--token_budget", type=count, help="tokens to train on, e.g. 100e9 or 100B")
    p.add_argument("--gpu_hour_price", type=entry.PRICE, help="price per GPU-hour, for the cost columns")
    _lever_flags(p)
    return p.parse_args(argv)


def _lever_flags(p):
    """train.py's levers, priced: strategy, accumulation, comm hook, and the sweep of them all."""
    lv = p.add_argument_group("the levers (train.py's flags of the same names; docs/11)")
    lv.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp",
                    help="ddp: every GPU all-reduces the gradient; fsdp: sharded (needs --preset: its blocks are the "
                         "units gathered and scattered; docs/15)")
    lv.add_argument("--accumulate", type=entry.ACCUMULATE, default=1,
                    help="batches per optimizer step (--accumulate_grad_batches): one all-reduce per K")
    lv.add_argument("--comm_hook", type=comm_hook_type, default="none",
                    help="none, fp16, bf16 (2 bytes an element on the wire) or powersgd[:RANK] (needs --preset)")
    lv.add_argument("--levers", action="store_true",
                    help="also tabulate, at the largest node count, every hook against accumulation 1-64, and say "
                         "which makes the run compute-bound")


def _t(x) -> str:
    """Seconds/hours/ratios to 3 significant digits without exponents below 1e6."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _batch_per_device(args, seq_len, node_counts):
    """(sequences one step on 1 GPU processes, the 'work per GPU' lines): both batch flags describe one full
    node; --scaling says what stays fixed when GPUs change. (None, []) when no batch was given."""
    gpn = args.devices
    if not (args.global_batch or args.batch_per_device):
        return None, []
    scale_gpus = [g for _, _, g in pm.scales(gpn, node_counts)]
    node_batch = args.global_batch or args.batch_per_device * gpn
    tokens = f" x {seq_len} tokens" if seq_len else ""
    if args.scaling == "weak":
        if node_batch % gpn:
            raise UsageError(f"--global_batch {node_batch} does not split evenly over --devices {gpn}; "
                             "with --scaling weak it is the global batch at one full node")
        samples_1gpu = node_batch // gpn
        shown = ", ".join(f"{samples_1gpu * g} at {g} GPU{'s' if g > 1 else ''}" for g in scale_gpus)
        seqs = f"{samples_1gpu} sequence{'s' if samples_1gpu > 1 else ''}"
        return samples_1gpu, [f"work per GPU: {seqs}{tokens} per step at every scale; per-GPU work sets compute "
                              f"time (weak scaling: global batch {shown})"]
    bad = [g for g in scale_gpus if node_batch % g]
    if bad:
        raise UsageError(f"--scaling strong splits the global batch {node_batch} over the GPUs: it does not "
                         f"divide evenly over {bad[0]} GPUs; use a multiple of {max(scale_gpus)}")
    shown = ", ".join(f"{node_batch // g} at {g} GPU{'s' if g > 1 else ''}" for g in scale_gpus)
    return node_batch, [f"work per GPU: global batch {node_batch}{tokens} split over the GPUs; per-GPU work sets "
                        f"compute time (strong scaling: sequences per GPU {shown})"]


def _compute(args, shape, n_params, seq_len, samples_1gpu):
    """(the compute keywords of ScalingInputs, the 'compute:' line): a measured --compute_s, or FLOPs at an MFU."""
    flops_route = args.tflops is not None or args.mfu is not None
    if args.compute_s is not None and flops_route:
        raise UsageError("give either --compute_s (a measured 1-GPU step) or --tflops with --mfu, not both")
    if args.compute_s is not None and args.recompute:
        raise UsageError("--recompute changes the FLOPs count (--tflops/--mfu route); "
                         "a measured --compute_s already includes it")
    if args.compute_s is not None:
        return {"compute_s": args.compute_s}, (
            f"compute: {_t(args.compute_s)} s per step on 1 GPU (--compute_s)"
            + (", the same per GPU at every scale" if args.scaling == "weak" else ", divided by the GPUs"))
    missing = [flag for flag, v in (("--seq_len", seq_len), ("--global_batch or --batch_per_device", samples_1gpu),
                                    ("--tflops", args.tflops), ("--mfu", args.mfu)) if v is None]
    if missing:
        raise UsageError("missing compute inputs: give --compute_s, or --seq_len, --global_batch, --tflops and "
                         f"--mfu (missing {', '.join(missing)})")
    flops, how = _flops_per_step(args, shape, n_params, seq_len, samples_1gpu)
    rate = args.tflops * args.mfu
    where = "per GPU per step at every scale" if args.scaling == "weak" else "per step on 1 GPU, / GPUs beyond"
    note = (f"compute: {how} = {flops / 1e12:.5g} TFLOP {where}; at {args.tflops:g} TFLOP/s x "
            f"{args.mfu:g} MFU = {rate:.4g} TFLOP/s: {_t(flops / (rate * 1e12))} s"
            + (" (k = 4 with activation recomputation)" if args.recompute and not shape else ""))
    return {"flops_per_step": flops, "tflops": args.tflops, "mfu": args.mfu}, note


def _flops_per_step(args, shape, n_params, seq_len, samples_1gpu):
    """(FLOPs of one 1-GPU step, how they were counted): the preset's exact shape, or 2 * k * params per token."""
    k = 4 if args.recompute else 3
    if shape:
        per_token = pm.transformer_flops_per_token(shape, seq_len=seq_len) * k / 3
        how = (f"(6*N + 12*L*H*Q*T) * {k}/3 * tokens = {per_token / 1e9:.4g} GFLOP/token x {seq_len} x "
               f"{samples_1gpu} (N = {human_count(shape.matmul_params())} matmul weights incl. the LM head, full "
               f"T^2 attention as nanoGPT counts it, k = {k})")
        return per_token * seq_len * samples_1gpu, how
    gpus = args.devices if args.scaling == "weak" else 1
    node_batch = samples_1gpu * gpus
    tflop = pm.iteration_tflop_per_gpu(n_params / 1e9, seq_len, node_batch, gpus, args.recompute)
    how = (f"params_B * k * 2 * seq_len * global_batch / (gpus * 1e3) = {n_params / 1e9:g} * {k} * 2 * "
           f"{seq_len} * {node_batch} / ({gpus} * 1e3)")
    return tflop * 1e12, how


def _check_budget(args, tokens):
    if args.token_budget is not None and tokens is None:
        raise UsageError("--token_budget needs tokens per step: give --seq_len and --global_batch")
    if args.gpu_hour_price is not None and args.token_budget is None:
        raise UsageError("--gpu_hour_price needs --token_budget (cost = time to train x GPUs x price)")


def _busbw_by_nodes(values, node_counts):
    """--busbw_GBps as {node count > 1: busbw}: one value for all, or one per node count (None: not given)."""
    if not values:
        return None
    multi = [n for n in node_counts if n > 1]
    if not multi:
        raise UsageError("--busbw_GBps replaces the inter-node link: give --nodes with a count above 1")
    if len(values) == 1:
        return {n: values[0] for n in multi}
    if len(values) == len(multi):
        return dict(zip(multi, values))
    raise UsageError(f"--busbw_GBps takes one value or one per node count > 1 ({len(multi)}: "
                     f"{' '.join(map(str, multi))}), got {len(values)}")


def build(args):
    """Turn the flags into ScalingInputs plus the lines that explain the work per GPU and the compute."""
    shape = PRESETS[args.preset] if args.preset else None
    n_params = shape.total_params() if shape else args.params
    seq_len = args.seq_len or (shape.seq_len if shape else None)
    gpn = args.devices
    node_counts = sorted(set(args.num_nodes))
    samples_1gpu, notes = _batch_per_device(args, seq_len, node_counts)
    compute_kw, compute_note = _compute(args, shape, n_params, seq_len, samples_1gpu)
    notes.append(compute_note)
    if shape and samples_1gpu:
        notes.append(pm.memory_note(dataclasses.replace(shape, seq_len=seq_len), samples_1gpu, args.grad_dtype,
                                  args.accumulate))
    tokens = seq_len * samples_1gpu if seq_len and samples_1gpu else None
    _check_budget(args, tokens)
    busbw = _busbw_by_nodes(args.busbw_GBps, node_counts)
    if args.comm_hook.startswith("powersgd") and not shape:
        raise UsageError(f"--comm_hook {args.comm_hook} compresses each weight matrix by its shape: give --preset")
    wire = levers.hook_wire_bytes(args.comm_hook, shape, n_params, pm.GRAD_DTYPE_BYTES[args.grad_dtype])
    sharded = _sharded(args, shape)
    comm_kw = {"bucket_bytes": args.bucket_mb * 2**20}
    if sharded:  # FSDP's gathers and scatters as the all-reduces they cost: one model for both strategies
        nbytes, calls = sharded.allreduce_terms()
        comm_kw = {"grad_bytes": nbytes, "bucket_bytes": math.nextafter(nbytes / math.ceil(calls), math.inf)}
    inputs = pm.ScalingInputs(
        accumulate=args.accumulate, wire_bytes=wire, node_overhead=args.node_overhead, node_doubling=args.node_doubling,
        devices=gpn, num_nodes=node_counts, n_params=n_params, grad_dtype_bytes=pm.GRAD_DTYPE_BYTES[args.grad_dtype],
        intra_GBps=args.intra_GBps, inter_GBps=pm.gbit_to_GBps(args.inter_gbit),
        intra_latency_s=args.intra_latency_us * 1e-6, inter_latency_s=args.inter_latency_us * 1e-6,
        busbw_GBps=busbw, scaling=args.scaling, tokens_per_step=tokens,
        token_budget=args.token_budget, gpu_hour_price=args.gpu_hour_price, **comm_kw, **compute_kw)
    source = f"--preset {args.preset}, total params" if shape else "--params"
    moved = (f"S = {inputs.allreduce_bytes / pm.GB:.4g} GB all-reduced per step" if not sharded else
             f"FSDP all-gathers {sharded.gather_bytes / pm.GB:.4g} GB ({sharded.gather_calls} calls) and "
             f"reduce-scatters {sharded.scatter_bytes / pm.GB:.4g} GB ({sharded.scatter_calls}) per step: as "
             f"all-reduces of S = {inputs.allreduce_bytes / pm.GB:.4g} GB in {inputs.buckets} calls")
    head = (f"model: {human_count(n_params)} parameters ({source}), {args.grad_dtype} gradients: {moved}"
            + (f" ({inputs.sent_bytes / pm.GB:.4g} GB on the wire with --comm_hook {args.comm_hook})" if wire else "")
            + (f", once per {args.accumulate} batches (--accumulate)" if args.accumulate > 1 else "")
            + f"; {gpn} GPUs per node; {args.scaling} scaling")
    return inputs, [head, *notes]


def _sharded(args, shape):
    """--strategy fsdp: what a sharded step puts on the wire (perfmodel.sharding.expected: each block a unit, the
    root's embeddings and final norm another; bf16 gathered under bf16 gradients, fp32 reduce-scatters as
    scalelab's FSDP policy does); None for DDP. What it does not model is refused in one line."""
    if args.strategy != "fsdp":
        return None
    for wrong, why in ((not shape, "its units are a preset's blocks: give --preset"),
                       (args.comm_hook != "none", "--comm_hook is DDP's, not FSDP's"),
                       (args.accumulate > 1, "--accumulate is not modelled for FSDP (an accumulated FSDP step still "
                                             "all-gathers every batch)"),
                       (args.levers, "--levers sweeps DDP's levers")):
        if wrong:
            raise UsageError(f"--strategy fsdp: {why}")
    return pm.sharded_wire(shape, param_bytes=2 if args.grad_dtype != "fp32" else 4)


def table(inputs, rows) -> str:
    headers = ["scale", "GPUs", "link", "beta\nGB/s", "all-reduce\nGB/GPU", "comm\ns", "compute\ns",
               "step s\nno overlap", "step s\noverlap", "comm-\nbound", "speedup\nno overlap", "speedup\noverlap",
               "efficiency\nno overlap", "efficiency\noverlap"]
    budget, price = inputs.token_budget is not None, inputs.gpu_hour_price is not None
    if budget:
        headers.insert(2, "tokens\n/step")
    if budget:
        headers += ["train h\nno overlap", "train h\noverlap"]
    if price:
        headers += ["cost\nno overlap", "cost\noverlap"]
    body = []
    for r in rows:
        line = [r.label, r.world_size, r.link, "-" if r.bandwidth_GBps is None else f"{r.bandwidth_GBps:g}",
                f"{r.allreduce_bytes_per_device / pm.GB:.4g}", _t(r.comm_s), _t(r.compute_s), _t(r.step_s_no_overlap),
                _t(r.step_s_overlap), "yes" if r.comm_bound else "no", f"{r.speedup_no_overlap:.3g}x",
                f"{r.speedup_overlap:.3g}x", f"{r.efficiency_no_overlap:.1%}", f"{r.efficiency_overlap:.1%}"]
        if budget:
            line.insert(2, f"{r.tokens_per_step:,.0f}")
        if budget:
            line += [_t(r.train_h_no_overlap), _t(r.train_h_overlap)]
        if price:
            line += [_t(r.cost_no_overlap), _t(r.cost_overlap)]
        body.append(line)
    return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True, stralign="right")


def band_line(rows) -> str:
    """The 80 % band a run's efficiency should land in at each scale (perfmodel.noise.a_priori_band), and the
    scatter each run was assumed (by its step's length)."""
    base = rows[0].step_s_no_overlap
    bands = [(r.label, noise.a_priori_band(r.efficiency_no_overlap, r.efficiency_overlap, r.step_s_no_overlap, base))
             for r in rows if r.world_size > 1]
    sigmas = sorted({f"{noise.prior(r.step_s_no_overlap).sigma:.1%}" for r in rows})
    return ("80 % band for one run's efficiency against one 1-GPU run: " + ", ".join(
        f"{label} {b.low:.1%}–{b.high:.1%}" for label, b in bands) + " (no to full overlap, widened by each run's "
        f"scatter, {' or '.join(sigmas)} assumed by its step's length, and by the model's own error on clusters "
        f"it never saw, {math.expm1(noise.MODEL_REACH[0]):.1%} down, {math.expm1(noise.MODEL_REACH[1]):.1%} up; "
        "docs/12 measures how often such bands hold)") if bands else ""

def forecast_from(args, argv) -> int:
    """`--from DIR`: the forecast calibrated on a results folder (perfmodel/forecast.py), as benchmark.py prints it."""
    from scalelab.report import cli as report_cli
    from scalelab.report import forecast_view

    given = {a.split("=")[0] for a in argv}
    if "--strategy" in given:
        raise UsageError("--from DIR forecasts each strategy its runs used: leave --strategy out")
    for flag in ("--node_overhead", "--node_doubling"):
        if flag in given:
            raise UsageError(f"--from DIR forecasts from measured steps, which hold what a node and the nodes cost: "
                             f"leave {flag} out")
    report = report_cli.build(args.from_dir)
    report_cli._warn(report.skipped)
    runs, bench = report.runs, report.benches  # every collective: FSDP's step is priced with its own
    if runs.empty:
        raise UsageError(f"--from {args.from_dir}: no training results there to calibrate on")
    nodes = (tuple(sorted(set(args.num_nodes))) if given & {"--num_nodes", "--nodes"} else
             forecast_view.fc.DEFAULT_NODES)
    lines = forecast_view.render(runs, bench, nodes, token_budget=args.token_budget,
                                 gpu_hour_price=args.gpu_hour_price,
                                 link_gbit=args.inter_gbit if "--inter_gbit" in given else None)
    if not lines:
        raise UsageError(f"--from {args.from_dir}: no workload there has a 1-device run to calibrate on")
    print("\n".join(lines))
    return 0


def main(argv=None) -> int:
    argv = glue_negative(sys.argv[1:] if argv is None else list(argv), ("--params", "--token_budget"))
    args = parse_args(argv)
    if args.from_dir:
        return forecast_from(args, argv)
    try:
        inputs, notes = build(args)
        rows = pm.predict(inputs)
    except ValueError as exc:  # perfmodel's own checks: still the user's input
        raise UsageError(str(exc)) from None
    print("\n".join(notes))
    print()
    print(table(inputs, rows))
    if band := band_line(rows):  # none for 1 GPU alone
        print(band)
    print()
    print(pm.formula(inputs))
    if args.strategy == "fsdp":
        print("FSDP: S and the buckets above are its all-gathers and reduce-scatters as all-reduces: each costs half "
              "an all-reduce of its size in the ring model (perfmodel/sharding.py); the overlap bound assumes they "
              "hide behind compute as DDP's buckets would.")
    print("verdict: " + pm.verdict(rows))
    if args.levers:
        print()
        print(lever_table(args, inputs))
    return 0


LEVER_KS = (1, 2, 4, 8, 16, 32, 64)


def lever_table(args, inputs) -> str:
    """Every hook against accumulation at the largest node count: which lever makes the run compute-bound."""
    shape = PRESETS[args.preset] if args.preset else None
    hooks = ["none", "bf16"] + (["powersgd:4"] if shape else [])
    n_params = shape.total_params() if shape else args.params
    wires = {hook: levers.hook_wire_bytes(hook, shape, n_params, pm.GRAD_DTYPE_BYTES[args.grad_dtype])
             for hook in hooks}
    rows, bound_at = pm.lever_sweep(inputs, wires, LEVER_KS)
    body = [[hook, k, f"{(wires[hook] or inputs.allreduce_bytes) / pm.GB:.4g}", _t(row.comm_s), _t(row.compute_s),
             f"{row.efficiency_no_overlap:.1%}", f"{row.efficiency_overlap:.1%}", "yes" if row.comm_bound else "no"]
            for hook, k, row in rows]
    last = pm.predict(inputs)[-1]
    head = (f"the levers at {last.label} ({last.world_size} GPUs), everything else as above; a step = one optimizer "
            "step of K batches, one all-reduce:")
    table = tabulate(body, headers=["comm hook", "K", "GB on\nthe wire", "comm s", "compute s",
                                    "efficiency\nno overlap", "efficiency\noverlap", "comm-\nbound"],
                     tablefmt="simple", disable_numparse=True, stralign="right")
    says = [f"{hook}: compute-bound from K = {bound_at[hook]}" if hook in bound_at
            else f"{hook}: still communication-bound at K = {LEVER_KS[-1]}" for hook in hooks]
    note = ("PowerSGD changes the optimisation (and starts after plain steps); a larger K is a larger global batch: "
            "check the loss at equal samples (docs/11)")
    return "\n".join([head, table, "levers: " + "; ".join(says), note])


def cli() -> int:
    """Console-script entry point (see setup.cfg); `predict.py ... | head` stops quietly."""
    return run_piped(PROG, main)


if __name__ == "__main__":
    sys.exit(cli())
