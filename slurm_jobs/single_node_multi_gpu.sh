#!/bin/bash
# 1 node(s) x 4 GPU(s). Submit from the repo root:  sbatch slurm_jobs/single_node_multi_gpu.sh   (MODEL=gpt for the GPT)
#SBATCH --job-name=sl-1x4gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --exclusive
#SBATCH --cpus-per-task=4
#SBATCH --time=00:30:00
#SBATCH --output=outputs/slurm-%j.out
#SBATCH --signal=SIGUSR1@90
#SBATCH --requeue
#SBATCH --open-mode=append
GPUS_PER_NODE=4
source "${SLURM_SUBMIT_DIR:-.}/slurm_jobs/job_common.sh"
run_train 1 "$@"
