"""ReFrame's site configuration for a GPU cluster that runs scalelab's checks: an example to copy and adapt
(docs/14-a-nightly-reframe-run.md). Every name here (the system, its login hosts, the partition, the account, the
module) is a placeholder for your site's; the comments say where each comes from.

    reframe -C reframe/gpu_site_example.py -c reframe/scalelab_checks.py --system mycluster:gpu -r

Sites that keep one configuration for all their checks add this system's partition (or only its `scalelab`
environment and extras) to theirs, or give both files: `-C site.py -C reframe/gpu_site_example.py`.
"""

site_configuration = {
    "systems": [{
        "name": "mycluster",
        "descr": "A100 nodes, 4 GPUs each, InfiniBand between them",
        "hostnames": [r"^login\d+"],  # where you run reframe: a pattern of `hostname`'s answer
        "modules_system": "lmod",  # or "tmod4", "spack", "nomod": what `module --version` says
        "partitions": [{
            "name": "gpu",
            "descr": "4 x A100 per node",
            "scheduler": "slurm",
            "launcher": "srun",
            # The partition and account: what your site.sh profile sets as SBATCH_PARTITION / SBATCH_ACCOUNT /
            # SBATCH_CONSTRAINT for sbatch in your shell. ReFrame submits with these instead.
            "access": ["--partition=gpu", "--account=my_project"],
            "environs": ["scalelab"],
            # GPUs per node: the ladder's one-node rung and every multi-node job use all of them.
            "devices": [{"type": "gpu", "arch": "sm_80", "num_devices": 4}],
            # How a test asks for N GPUs (ReFrame's num_gpus_per_node); the host memory per GPU is the a100
            # profile's floor in site.sh (SCALELAB_MEM_PER_GPU): a node's default can be too little for a checkpoint.
            "resources": [{"name": "_rfm_gpu", "options": ["--gres=gpu:{num_gpus_per_node}", "--mem-per-gpu=64G"]}],
            "max_jobs": 4,
            "time_limit": "30m",
            "extras": {"scalelab": {
                # a scalelab reference file, relative to the checkout: `python src/benchmark.py --output_dir DIR
                # --write_reference reframe/references/mycluster.yaml` over a good night's results (docs/14)
                "reference": "reframe/references/mycluster.yaml",
                "nodes": 2,  # the ladder's top rung and the all-reduce benchmark: 2 nodes x 4 GPUs
                "expect_busbw": 20,  # GB/s the interconnect should give (nccl-tests' busbw): the self-check judges it
                # "config": "gpt-small",              # the workload (default: gpt-small on GPUs)
                # "train_args": ["--max_steps", "200"],
            }},
        }],
    }],
    "environments": [{
        "name": "scalelab",
        "features": ["scalelab"],  # what the checks ask for (valid_prog_environs = ["+scalelab"])
        # The profile every scalelab job reads (slurm_jobs/site.sh): NCCL settings, SCALELAB_ACCELERATOR=gpu, the
        # Python (SCALELAB_VENV) and its modules (SCALELAB_MODULES, loaded inside each job after `module purge`).
        "env_vars": [["SCALELAB_PROFILE", "a100"]],
        # Modules ReFrame loads before the job's first line: only for a profile that names none (site.sh purges
        # and loads its own SCALELAB_MODULES after these); keep them in one place. No CUDA module for a torch from
        # pip: its wheel brings its own CUDA, cuDNN and NCCL libraries, and a site's CUDA module put first on
        # LD_LIBRARY_PATH can shadow them (another NCCL than the one torch was built and tested with). A Python
        # module, where the venv's Python comes from one, is what belongs here (e.g. "python/3.11").
        "modules": [],
    }],
    "logging": [{
        "handlers": [
            {"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"},
            {"type": "file", "name": "reframe.log", "level": "debug", "append": False,
             "format": "[%(asctime)s] %(levelname)s: %(check_info)s: %(message)s"},
        ],
        "handlers_perflog": [{
            # one line per performance variable: <perflogdir>/mycluster/gpu/<test>.log, appended night after night
            "type": "filelog",
            "prefix": "%(check_system)s/%(check_partition)s",
            "level": "info",
            "format": ("%(check_job_completion_time)s|%(check_result)s|%(check_display_name)s|%(check_jobid)s|"
                       "%(check_perf_var)s|%(check_perf_value)s|%(check_perf_unit)s|%(check_perf_ref)s|"
                       "%(check_perf_lower_thres)s|%(check_perf_upper_thres)s"),
            "append": True,
        }],
        "perflog_multiline": True,
    }],
}
