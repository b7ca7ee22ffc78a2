"""A site's nightly results, made up: the tiny GPT at 1 and 2 devices each night, with a step planted where asked.

What `benchmark.py --history` is tested and shown on (tests/unit/test_history.py, chapter 14,
benchmarks/nightly_series.py): each night's results as a run writes them (results.write), dated by `created`, the
throughput scattering from night to night by `scatter` (sd of its log), and from night `planted[0]` on the 2-device
runs' throughput, busbw and step times (1 + planted[1]) times what they were.
"""

import datetime as dt
import math
import random

from scalelab import results
from scalelab.workloads import gpt

START = dt.datetime(2026, 6, 1, 2, 0, tzinfo=dt.timezone.utc)
TOKENS = {1: 3400.0, 2: 6400.0}  # tokens/s of the tiny GPT at 1 and 2 CPU devices (make demo's, rounded)
BUSBW = 1.2  # GB/s, the 2-device runs' DDP busbw


def night(folder: str, index: int, world: int, tokens_per_s: float, busbw=None) -> str:
    """One nightly result at `world` devices on one node, `index` nights after START; its path."""
    data = results.envelope("training", f"night{index:04d}-gpt-{world}x")
    data["created"] = (START + dt.timedelta(days=index)).isoformat(timespec="seconds")
    step = 8 * 128 * world / tokens_per_s
    comm = None if world == 1 else {"compute_s": 0.8 * step, "waited_s": 0.1 * step, "allreduce_s": 0.12 * step,
                                    "ddp_busbw_GBps": busbw}
    data.update(status="completed", error=None, ranks=None, metrics={"train_loss": 5.0},
                workload={"model": gpt.SPEC.name, "options": {"preset": "tiny", "seq_len": 128}, "batch_size": 8,
                          "scaling": "weak", "precision": "32", "describe": "gpt tiny", "params": 3323392,
                          "tokens_per_sample": 128, "batch_per_device": 8, "global_batch": 8 * world},
                launch={"launcher": "slurm", "world_size": world, "num_nodes": 1, "devices": world,
                        "accelerator": "cpu", "device_names": ["cpu"], "threads": 1},
                timing={"samples_per_s": tokens_per_s / 128, "tokens_per_s": tokens_per_s, "train_time_s": 30 * step,
                        "step_s": {"median": step}, "comm": comm})
    return results.write(folder, data)


def site(folder: str, nights: int, planted=None, scatter: float = 0.03, seed: int = 0) -> None:
    """`nights` nights of 1- and 2-device results in folder; planted: (night, relative step), (night, relative
    step, the night it ends: a bad stretch, then fixed) or None."""
    rng = random.Random(seed)
    start, size, end = (*planted, nights)[:3] if planted else (nights, 0.0, nights)
    for index in range(nights):
        step = 1 + size if start <= index < end else 1.0
        night(folder, index, 1, TOKENS[1] * math.exp(rng.gauss(0, scatter)))
        night(folder, index, 2, TOKENS[2] * step * math.exp(rng.gauss(0, scatter)),
              busbw=BUSBW * step * math.exp(rng.gauss(0, scatter)))
