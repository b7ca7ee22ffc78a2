"""`python -m scalelab.train` (and the scalelab-train console script): what src/train.py runs."""

from scalelab.train.guard.signals import note_early

note_early()  # first: SLURM's SIGUSR1 (its time-limit warning) can come before torch is imported

from scalelab.entry import fast_exit, run_main  # noqa: E402
from scalelab.train.run import main  # noqa: E402

if __name__ == "__main__":
    fast_exit(run_main("train.py", main))
