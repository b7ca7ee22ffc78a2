"""Speedup and parallel-efficiency tables from a folder of result.json files.

    python src/benchmark.py --output_dir outputs
"""

import sys

from scalelab.cli import run_main
from scalelab.report.cli import main

if __name__ == "__main__":
    sys.exit(run_main("benchmark.py", main))
