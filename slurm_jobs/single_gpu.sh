#!/bin/bash
# 1 node(s) x 1 GPU(s). Submit from the repo root:  sbatch slurm_jobs/single_gpu.sh   (MODEL=gpt for the GPT)
# The whole node, as the runs it is the baseline of: a neighbour's job on its PCIe, memory bandwidth and cores
# would slow the baseline and inflate every speedup (a profile's SBATCH_EXCLUSIVE=user shares it with your own).
#SBATCH --job-name=sl-1gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --exclusive
#SBATCH --cpus-per-task=4
#SBATCH --time=00:30:00
#SBATCH --output=outputs/slurm-%j.out
#SBATCH --signal=SIGUSR1@90
#SBATCH --requeue
#SBATCH --open-mode=append
GPUS_PER_NODE=1
source "${SLURM_SUBMIT_DIR:-.}/slurm_jobs/job_common.sh"
run_train 1 "$@"
