"""All-reduce bus bandwidth over message sizes, nccl-tests style; writes outputs/<run_id>/result.json.

    python src/allreduce_bench.py                      # 1 process
    python src/allreduce_bench.py --devices 2          # 2 local processes (CPU: gloo)
    python src/allreduce_bench.py --format nccl-tests  # all_reduce_perf's layout (src/benchmark.py reads it back)
    srun python src/allreduce_bench.py                 # sizes from SLURM (one task per GPU)
    torchrun --nproc_per_node 4 src/allreduce_bench.py
"""

from scalelab.bench.allreduce import PROG, main
from scalelab.entry import fast_exit, run_main

if __name__ == "__main__":
    fast_exit(run_main(PROG, main))
