"""The first-allocation self-check: PASS/FAIL per claim a scaling table rests on (GPUs per rank, cores per rank,
backend, NCCL's transport, bf16, honest clocks, all-reduce busbw), read from a short run and a benchmark.

    sbatch slurm_jobs/gpu_selfcheck.sh                    # on a GPU cluster, before the real sweep
    python src/selfcheck.py --output_dir outputs/selfcheck --expect_busbw 20 --log slurm-123.out

Logic in scalelab.selfcheck; exit code 1 when a claim fails.
"""

import sys

from scalelab.selfcheck import cli

if __name__ == "__main__":
    sys.exit(cli())
