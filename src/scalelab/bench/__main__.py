"""`python -m scalelab.bench` (and the scalelab-allreduce console script): what src/allreduce_bench.py runs."""

from scalelab.bench.allreduce import cli

if __name__ == "__main__":
    cli()
