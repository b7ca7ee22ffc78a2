"""Train the same job at any scale and write outputs/<run_id>/result.json.

    python src/train.py --model mlp                       # 1 process
    python src/train.py --model gpt --devices 2   # 2 local processes (CPU: gloo)
    srun python src/train.py --model mlp                  # sizes from SLURM
"""

from scalelab.train.guard.signals import note_early

note_early()  # first: SLURM's SIGUSR1 (its time-limit warning) can come before torch is imported

from scalelab.entry import fast_exit, run_main  # noqa: E402
from scalelab.train.run import main  # noqa: E402

if __name__ == "__main__":
    fast_exit(run_main("train.py", main))
