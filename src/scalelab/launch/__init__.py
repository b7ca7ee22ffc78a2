"""Launch: where a run executes and how many ranks it has (SLURM, torchrun, submitit, local processes)."""
