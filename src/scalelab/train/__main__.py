"""`python -m scalelab.train` (and the scalelab-train console script): what src/train.py runs."""

from scalelab.cli import fast_exit, run_main
from scalelab.train.run import main

if __name__ == "__main__":
    fast_exit(run_main("train.py", main))
