"""`python -m scalelab.report`: what src/benchmark.py runs."""

import sys

from scalelab.report.cli import cli

if __name__ == "__main__":
    sys.exit(cli())
