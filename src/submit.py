"""Submit the identical job at several shapes with submitit, show progress, then print the report.

    python src/submit.py --cluster slurm                       # 1x1, 1x4, 2x4 (nodes x GPUs per node)
    python src/submit.py --cluster local -- --model gpt  # CPU rehearsal: 1x1, 1x2 on this machine
    python src/submit.py --no-wait --shapes 1x4 2x4 -- --model mlp
"""

import sys

from scalelab.entry import run_main
from scalelab.launch.sweep import main

if __name__ == "__main__":
    sys.exit(run_main("submit.py", main))
