"""Train the same job at any scale and write outputs/<run_id>/result.json.

    python src/train.py --model mlp                       # 1 process
    python src/train.py --model gpt --devices 2   # 2 local processes (CPU: gloo)
    srun python src/train.py --model mlp                  # sizes from SLURM
"""

from scalelab.cli import fast_exit, run_main
from scalelab.train.run import main

if __name__ == "__main__":
    fast_exit(run_main("train.py", main))
