"""Speedup and parallel-efficiency tables from a folder of result.json files.

    python src/benchmark.py --output_dir outputs
"""

import sys

from scalelab.report.cli import cli

if __name__ == "__main__":
    sys.exit(cli())
