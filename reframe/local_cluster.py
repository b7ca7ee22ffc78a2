"""ReFrame's site configuration for the project's local 2-node SLURM cluster (tests/slurm_cluster/start.sh: a real
slurmctld and two slurmd, node1 and node2, on one machine), with scalelab's CPU rehearsal profile.

    export SLURM_CONF=/tmp/scalelab-slurm/slurm.conf     # what start.sh prints
    reframe -C reframe/local_cluster.py -c reframe/scalelab_checks.py -r

docs/14-a-nightly-reframe-run.md runs it; make test runs that chapter's blocks on the local cluster, and
tests/scenarios/test_reframe.py reads what they left. A GPU site's file: reframe/gpu_site_example.py.
"""

site_configuration = {
    "systems": [{
        "name": "scalelab-local",
        "descr": "tests/slurm_cluster: 2 nodes of 16 CPUs and 4 (fake) a100 GPUs each, all on this machine",
        "hostnames": [".*"],
        "modules_system": "nomod",
        "partitions": [{
            "name": "debug",
            "descr": "the cluster's one partition; each 'GPU' is a CPU rank talking gloo (SCALELAB_PROFILE=cpu)",
            "scheduler": "slurm",
            "launcher": "srun",
            "access": ["--partition=debug"],
            "environs": ["scalelab-cpu"],
            # Two of each node's four (fake) GPUs: a ladder of 1, 2 and 4 ranks keeps the rehearsal short.
            "devices": [{"type": "gpu", "num_devices": 2}],
            "resources": [{"name": "_rfm_gpu", "options": ["--gres=gpu:{num_gpus_per_node}"]}],
            "max_jobs": 4,
            "extras": {"scalelab": {
                "reference": "reframe/references/local-cluster.yaml",
                "config": "mlp",
                "train_args": ["--threads", "1", "--max_steps", "40"],
                "allreduce_args": ["--max_bytes", "2M", "--iters", "3", "--warmup_iters", "1"],
                # both "nodes" are this one machine: each node's rank 0 would pin itself to core 0, and the
                # self-check's cores-per-rank claim would fail, rightly; on one node it holds
                "selfcheck_nodes": 1,
                "cpus_per_task": 1,
            }},
        }],
    }],
    "environments": [{
        "name": "scalelab-cpu",
        "features": ["scalelab"],
        "env_vars": [["SCALELAB_PROFILE", "cpu"]],
    }],
    "general": [{
        # jobs of seconds: ask the scheduler every second, not up to every 10 s
        "poll_rate_min": 1,
    }],
    "logging": [{
        "handlers": [{"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"}],
        "handlers_perflog": [{
            # one line per performance variable, under <perflogdir>/scalelab-local/debug/<test>.log
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
