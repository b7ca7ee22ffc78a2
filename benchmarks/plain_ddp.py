"""A minimal plain-PyTorch DDP loop over the same model, batch and data: the yardstick for harness overhead.

    python benchmarks/plain_ddp.py --procs 2 --steps 30 --warmup 5             # tiny GPT, batch 8: tokens/s
    python benchmarks/plain_ddp.py --model mlp --procs 2 --steps 300 --warmup 50  # the MLP, batch 64: samples/s
"""

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from scalelab.workloads.data import TokenSequences, spiral
from scalelab.workloads.nets.spiral_mlp import SpiralMLP
from scalelab.workloads.nets.transformer import GPT
from scalelab.workloads.presets import PRESETS


def build(args):
    """(model, optimizer-less dataset, units per sample) as scalelab builds them (tokens for the GPT)."""
    if args.model == "mlp":
        return (SpiralMLP([64, 32, 16], 0.1, 1e-3), spiral(args.steps * args.batch * args.procs, 0.2, 42), 1)
    shape = PRESETS["tiny"]
    return GPT(shape), TokenSequences(args.steps * args.batch * args.procs, shape.seq_len, shape.vocab_size, 42), \
        shape.seq_len


def worker(rank, args, queue):
    # one device = one core, as scalelab runs it (launch/cores.py): 1 thread, pinned to the rank's own core once
    # the process group (and gloo's transport threads, which keep the whole node) exist
    torch.set_num_threads(1)
    torch.manual_seed(42)
    model, data, units = build(args)
    if args.procs > 1:
        dist.init_process_group("gloo", rank=rank, world_size=args.procs)
        model = DistributedDataParallel(model)
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[rank % len(cores)]})
    if args.model == "mlp":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95))
    sampler = DistributedSampler(data, num_replicas=args.procs, rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, drop_last=True)
    times, last = [], time.perf_counter()
    for x, y in loader:
        out = model(x)
        loss = F.cross_entropy(out.view(-1, out.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        times.append(now - last)
        last = now
    timed = sum(times[args.warmup:])
    if rank == 0:
        queue.put((len(times) - args.warmup) * args.batch * args.procs * units / timed)
        queue.close()
        queue.join_thread()  # the figure is in the pipe
    # Leave as scalelab's ranks do (os._exit): freeing the DDP model after the process group let gloo's destructor
    # join its worker thread while holding the GIL the thread was waiting for (a run hung now and then).
    os._exit(0)


def measure(procs, steps=30, warmup=5, batch=None, model="gpt-tiny") -> float:
    """Throughput (tokens/s for the GPT, samples/s for the MLP) of rank 0's view: all ranks' units per timed s."""
    batch = batch or (64 if model == "mlp" else 8)
    args = argparse.Namespace(procs=procs, steps=steps, warmup=warmup, batch=batch, model=model)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    with socket.socket() as s:  # a free port: a fixed one can still be held by the previous run's sockets
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    workers = mp.start_processes(worker, args=(args, queue), nprocs=procs, start_method="spawn", join=False)
    value = queue.get()  # before joining: a worker that put on a queue ends only once its item is taken
    while not workers.join():
        pass
    return value


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("gpt-tiny", "mlp"), default="gpt-tiny")
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    unit = "samples/s" if a.model == "mlp" else "tokens/s"
    print(f"plain DDP, {a.model}, {a.procs} process(es): {measure(a.procs, a.steps, a.warmup, model=a.model):,.0f} "
          f"{unit}")
