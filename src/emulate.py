"""Run a scalelab script on 2 emulated nodes of this machine, joined by a rate-limited link.

    python src/emulate.py --num_nodes 2 --devices 1 --link_gbit 1 -- src/train.py --model gpt --preset tiny
    python src/emulate.py --link_gbit 0.2 -- src/allreduce_bench.py --min_bytes 1M --max_bytes 4M

Each node is a network namespace with its own cores and its own torchrun; a veth pair shaped with tc joins them.
"""

from scalelab.entry import run_main
from scalelab.launch.emulate import PROG, main

if __name__ == "__main__":
    raise SystemExit(run_main(PROG, main))
