"""Memory target: perfmodel.memory's per-rank estimate (without its fixed overhead) within 15 % of the peak of a
GPT training step measured on CPU, the self-check's own tolerance for the GPU's peak.

No GPU here, so the step runs on CPU with what makes a GPU step's memory: the weights, gradients preallocated as
DDP's buckets are (gradient_as_bucket_view), AdamW's two moments (made by one step before the measured one), and
the forward and backward of nets/transformer.py under bf16 autocast or in fp32, the loss computed as GPTModule
computes it with CUDA autocast's fp32 cast of the logits (CPU autocast would keep them bf16). The logits are dropped
once the loss exists, as they are when training_step returns it. Two measurements of the step's peak, in a fresh process
per case:

- tensors: every storage an op (forward or backward) creates is counted from creation until torch frees it
  (scalelab.testing.tensors), on top of the persistent tensors walked one by one: the figure
  torch.cuda.max_memory_allocated gives on a GPU, except a kernel's internal scratch, which never becomes a tensor.
- RSS: the kernel's peak resident set (ru_maxrss) minus the resident set before the step, with glibc told to map
  every block above 64 KiB on its own (MALLOC_MMAP_THRESHOLD_) so that freed tensors leave the resident set; plus
  the persistent tensors. A cross-check: it also holds oneDNN's scratch and whatever else the process maps.

Only forward and backward are measured: on a GPU AdamW is fused (no temporaries) and runs after the activations
are gone. The optimizer step on CPU is not the one a GPU run takes.

    python benchmarks/memory_model.py                     # tiny at 8, small at 2, a 2-layer small at 4, both precisions
    python benchmarks/memory_model.py --cases small:8     # what the sbatch default would hold (about 10 GB here)
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

TOLERANCE = 0.15  # selfcheck.MEMORY_TOLERANCE
DEFAULT_CASES = ("tiny:8", "small:2", "small/2:4")  # preset[/n_layer]:batch; small/2 is small cut to 2 layers

CHILD = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from scalelab.testing.tensors import step_peak
from scalelab.workloads.presets import TransformerShape

*dims, batch, bf16 = json.loads(sys.argv[2])
rss = []


def resident():
    with open("/proc/self/statm") as f:
        rss.append(int(f.read().split()[1]) * resource.getpagesize())


got = step_peak(TransformerShape(*dims), batch, bool(bf16), before_step=resident)
peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"tensors": got["persistent"] + got["step"], "rss": got["persistent"] + max(0, peak_rss - rss[0])}))
"""


def parse_case(text):
    """'small/2:4' -> (the preset's shape with 2 layers, batch 4, the label)."""
    import dataclasses

    from scalelab.workloads.presets import PRESETS

    name, batch = text.split(":")
    preset, _, layers = name.partition("/")
    shape = PRESETS[preset]
    if layers:
        shape = dataclasses.replace(shape, n_layer=int(layers))
    return shape, int(batch), f"{preset}{f' ({layers} layers)' if layers else ''} batch {batch}"


def measure(shape, batch, bf16):
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    arg = json.dumps([shape.n_layer, shape.n_head, shape.d_model, shape.seq_len, shape.vocab_size, batch, bf16])
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.join(ROOT, "src"), arg], check=True,
                         capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=DEFAULT_CASES, help="preset[/n_layer]:batch (default: %(default)s)")
    p.add_argument("--precisions", nargs="+", default=("32", "bf16-mixed"), choices=("32", "bf16-mixed"))
    args = p.parse_args()
    from scalelab.perfmodel import memory

    print(f"{'case':<26}{'precision':<12}{'model GB':>9}{'tensors GB':>11}{'RSS GB':>8}{'model/tensors':>15}  "
          f"within {TOLERANCE:.0%}")
    for case in args.cases:
        shape, batch, label = parse_case(case)
        for precision in args.precisions:
            model = memory.training_memory(shape, batch, precision, overhead=0).total
            got = measure(shape, batch, precision == "bf16-mixed")
            ratio = model / got["tensors"]
            print(f"{label:<26}{precision:<12}{model / 1e9:>9.3f}{got['tensors'] / 1e9:>11.3f}{got['rss'] / 1e9:>8.3f}"
                  f"{ratio:>15.3f}  {'yes' if abs(ratio - 1) <= TOLERANCE else 'NO'}", flush=True)


if __name__ == "__main__":
    main()
