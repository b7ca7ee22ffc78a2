"""A minimal plain-PyTorch DDP loop over the same tiny GPT, batch and data: the yardstick for harness overhead.

    python benchmarks/plain_ddp.py --procs 2 --steps 30 --warmup 5   # prints tokens/s
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from scalelab.workloads.data import TokenSequences
from scalelab.workloads.nets.gpt import GPT
from scalelab.workloads.presets import PRESETS


def worker(rank, args, queue):
    # one device = one core, as scalelab runs it (launch/cores.py): 1 thread, pinned to the rank's own core once
    # the process group (and gloo's transport threads, which keep the whole node) exist
    torch.set_num_threads(1)
    torch.manual_seed(42)
    model = GPT(PRESETS["tiny"])
    if args.procs > 1:
        dist.init_process_group("gloo", rank=rank, world_size=args.procs)
        model = DistributedDataParallel(model)
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[rank % len(cores)]})
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95))
    shape = PRESETS["tiny"]
    data = TokenSequences(args.steps * args.batch * args.procs, shape.seq_len, shape.vocab_size, 42)
    sampler = DistributedSampler(data, num_replicas=args.procs, rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, drop_last=True)
    times, last = [], time.perf_counter()
    for idx, targets in loader:
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        times.append(now - last)
        last = now
    timed = sum(times[args.warmup:])
    if rank == 0:
        queue.put((len(times) - args.warmup) * args.batch * args.procs * shape.seq_len / timed)
    if args.procs > 1:
        dist.destroy_process_group()


def measure(procs, steps=30, warmup=5, batch=8) -> float:
    args = argparse.Namespace(procs=procs, steps=steps, warmup=warmup, batch=batch)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(29600 + procs)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(worker, args=(args, queue), nprocs=procs, start_method="spawn")
    return queue.get()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    print(f"plain DDP, {a.procs} process(es): {measure(a.procs, a.steps, a.warmup):,.0f} tokens/s")
