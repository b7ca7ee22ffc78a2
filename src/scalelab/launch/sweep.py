"""Submit the identical job at several shapes (nodes x GPUs per node) with submitit, wait, then report.

`--cluster slurm` uses submitit's SlurmExecutor with the settings of the site file (`--site FILE`, else
slurm_jobs/site.sh under the working directory: the checkout, never the installed package);
`--cluster local` uses its LocalExecutor (CPU, gloo, one node) so the sweep can be rehearsed anywhere.
Repeats of one shape go out as one job array; different shapes need different resources, so they are
separate jobs.
"""

import os
import re
import shlex
import subprocess
import sys
import time

from scalelab import config
from scalelab.entry import OneLineParser, bounded, run_main
from scalelab.errors import UsageError
from scalelab.launch import slurm_env

SITE = os.path.join("slurm_jobs", "site.sh")
DEFAULT_SHAPES = ["1x1", "1x4", "2x4"]


class TrainTask:
    """What each submitit task runs: train.py's main, in-process, with torch.distributed's env exported."""

    def __init__(self, argv, accelerator):
        self.argv, self.accelerator = list(argv), accelerator

    def __call__(self):
        import submitit

        # The rendezvous port below the ephemeral range (slurm_env.rendezvous_port) from the job's own id (an array
        # task's SLURM_JOB_ID, as Fabric reads it), unless the user set one (`MASTER_PORT=... submit.py`: the one
        # variable of the submitting shell kept); its ranks and sizes are the job's. Every GPU stays visible:
        # Lightning picks cuda:LOCAL_RANK itself (submitit's binding would fight it).
        os.environ.setdefault("MASTER_PORT", str(slurm_env.rendezvous_port(submitit.JobEnvironment().raw_job_id)))
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        if not slurm_env.in_job() or os.environ.get("SUBMITIT_EXECUTOR") == "local":
            os.environ["SCALELAB_LAUNCHER"] = "submitit-local"
        from scalelab.train.run import main

        code = main(self.argv)
        if code:
            raise RuntimeError(f"train.py exited {code}")
        return code

    def checkpoint(self, *args, **kwargs):
        """On timeout or preemption submitit calls this and requeues: the rerun's result supersedes."""
        import submitit

        return submitit.helpers.DelayedSubmission(TrainTask(self.argv, self.accelerator))


def job_failure_line(exc: BaseException) -> str:
    """What a failed job said, in one line: train.py's own one-line error (RunFailed/UsageError) from the trace
    submitit hands back, else the trace's last exception line; never the log paths submitit appends."""
    text = str(exc)
    ours = re.findall(r"^\S*(?:RunFailed|UsageError): (.+)$", text, re.M)
    if ours:
        return ours[-1].strip()
    errors = re.findall(r"^\S*(?:Error|Exception)\S*: .+$", text, re.M)
    return errors[-1].strip() if errors else type(exc).__name__


ASK_QUEUE_S = 30.0  # between two looks at why jobs wait


def pending_after_s() -> float:
    """How long a job may wait in the queue before submit.py says why: a queue's usual pause says nothing."""
    raw = os.environ.get("SCALELAB_PENDING_AFTER_S", "20")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86400:
        raise UsageError(f"SCALELAB_PENDING_AFTER_S={raw!r}: give the seconds a job may wait before it is said why")
    return value


def wait_for(jobs, bar, failed: list, poll_s: float, slurm: bool = True):
    """Poll until every job is done; one line per failed job goes into `failed`. On SLURM a job that waits in the
    queue says why (squeue's reason: a drained node must not look like a slow queue), once per reason; the queue is
    asked every ASK_QUEUE_S, not at every poll (slurmctld serves everyone)."""
    pending, said, after_s = list(jobs), {}, pending_after_s()
    next_ask = time.monotonic() + after_s
    while pending:
        for item in [p for p in pending if p[1].done()]:
            pending.remove(item)
            bar.update(1)
            exc = item[1].exception()
            if exc is not None:
                failed.append(f"{item[0]} job {item[1].job_id}: {job_failure_line(exc)} "
                              f"(log: {item[1].paths.stderr})")
        if pending and slurm and time.monotonic() >= next_ask:
            next_ask = time.monotonic() + ASK_QUEUE_S
            for job, reason in waiting([str(p[1].job_id) for p in pending]).items():
                if said.get(job) != reason:
                    said[job] = reason
                    bar.write(f"submit.py: job {job} is waiting in the queue: {reason} (squeue --me)")
        if pending:
            time.sleep(poll_s)


def waiting(job_ids) -> dict:
    """{job id: squeue's reason} for the jobs still pending, but for those only waiting on another job. SLURM
    says "Resources" for a job that waits for a drained node: the partition's nodes that take no job are named."""
    rows = [row.split("|") for row in _ask(["squeue", "-h", "-t", "PD", "-j", ",".join(job_ids), "-o", "%i|%r|%P"])]
    out, idle = {}, {}
    for job, reason, part in (row for row in rows if len(row) == 3 and row[1] not in ("None", "Dependency")):
        if part not in idle:  # one sinfo per partition
            nodes = sorted({tuple(row.split("|")) for row in _ask(["sinfo", "-h", "-N", "-p", part, "-o", "%N|%t|%E"])})
            idle[part] = [f"{n[0]} {n[1]} ({n[2]})" for n in nodes
                          if len(n) == 3 and not re.fullmatch(r"(idle|mix|alloc|comp)~?", n[1])]
        out[job] = reason + (f"; taking no job in partition {part}: {', '.join(idle[part])}" if idle[part] else "")
    return out


def _ask(argv) -> list:
    """A SLURM client's output lines; none where it does not answer."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return proc.stdout.splitlines() if proc.returncode == 0 else []


def parse_shape(text: str):
    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise UsageError(f"--shapes: {text!r} is not NODESxGPUS_PER_NODE (e.g. 1x4, 2x4)")
    return int(m.group(1)), int(m.group(2))


def find_site(given) -> str:
    """The site file, as an absolute path: --site, else slurm_jobs/site.sh where the user stands."""
    path = given or SITE
    if not os.path.isfile(path):
        raise UsageError(f"--site {given}: no such file" if given else
                         f"no {SITE} here ({os.getcwd()}): run from the scalelab checkout, or give --site FILE")
    return os.path.abspath(path)


def site_settings(profile: str, site: str) -> dict:
    """SBATCH_* values the site file exports (partition, account, constraint), read by running it in bash."""
    cmd = f"set -e; export SCALELAB_PROFILE={shlex.quote(profile)}; source {shlex.quote(site)} >/dev/null; env -0"
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True)
    if proc.returncode != 0:
        raise UsageError(f"{site} failed: {proc.stderr.decode(errors='replace').strip()[:200]}")
    env = dict(item.split("=", 1) for item in proc.stdout.decode().split("\0") if "=" in item)
    return {k: v for k, v in env.items() if k.startswith(("SBATCH_", "SCALELAB_"))}


def gres_request(gpus: int, gres_type: str = "") -> str:
    """--gres for `gpus` GPUs a node: any type unless one is named. A fixed type (gpu:a100:N) is refused at submit
    time wherever the site's types differ (h100, or AutoDetect names such as nvidia_a100-sxm4-80gb)."""
    return f"gpu:{gres_type}:{gpus}" if gres_type else f"gpu:{gpus}"


def default_workload(train_args: list, accelerator: str) -> list:
    """Without --config or --model, the sweep runs what the sbatch scripts run (configs/default-workload.txt: gpt-small
    where the jobs may get GPUs, the MLP on CPU)."""
    if any(a.startswith(("--config", "--model")) for a in train_args):
        return train_args
    return ["--config", config.default_config("cpu" if accelerator == "cpu" else "gpu"), *train_args]


def build_parser():
    p = OneLineParser(prog="submit.py", description="Submit the same training job at several shapes and report.")
    p.add_argument("--cluster", choices=("slurm", "local"), default="slurm")
    p.add_argument("--shapes", nargs="+", default=None,
                   help="NODESxGPUS_PER_NODE (default: 1x1 1x4 2x4 on slurm, 1x1 1x2 on local)")
    p.add_argument("--repeats", type=bounded(int, 1, 100, "runs a shape"),
                   default=1, help="runs per shape (a job array each)")
    p.add_argument("--profile", default=os.environ.get("SCALELAB_PROFILE") or "auto",
                   help="site.sh profile: auto (follow the hardware), cpu (rehearsal) or a100 (edit slurm_jobs/site.sh "
                        "for your site)")
    p.add_argument("--site", metavar="FILE", help=f"the site file (default: {SITE} in the working directory)")
    p.add_argument("--partition"), p.add_argument("--account"), p.add_argument("--constraint")
    p.add_argument("--time_min", type=bounded(int, 1, 7 * 24 * 60, "minutes, a week at most"),
                   default=30, help="job time limit in minutes")
    p.add_argument("--cpus_per_task", type=bounded(int, 1, 1024, "cores a task"), default=4)
    p.add_argument("--gres_type", default=None,
                   help="GPU type in --gres=gpu:TYPE:N (default: the profile's SCALELAB_GPU_TYPE; none: gpu:N, "
                        "any type)")
    p.add_argument("--output_dir", default="outputs")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="submit, print job ids, and return")
    p.add_argument("--details", action="store_true", help="the report with its per-run and step tables "
                                                         "(benchmark.py --details)")
    p.add_argument("--poll_s", type=bounded(float, 0.1, 600, "seconds between looks at the queue"), default=2.0)
    p.add_argument("train_args", nargs="*", help="after --: the workload flags passed to train.py unchanged (default: "
                                                 "--config gpt-small, or --config mlp where the profile runs on CPU)")
    return p


class Submitter:
    """One sweep's submissions: a submitit executor per shape, the same train.py flags for every job."""

    def __init__(self, args, site: dict, folder: str, accelerator: str, train_args: list, site_file: str = ""):
        self.args, self.site, self.folder, self.site_file = args, site, folder, site_file
        self.accelerator, self.train_args = accelerator, train_args

    def executor(self, nodes: int, gpus: int):
        import submitit

        args, site = self.args, self.site
        if args.cluster == "local":
            executor = submitit.LocalExecutor(folder=self.folder)
            executor.update_parameters(nodes=1, tasks_per_node=gpus, timeout_min=args.time_min)
            return executor
        executor = submitit.SlurmExecutor(folder=self.folder)
        gres_type = site.get("SCALELAB_GPU_TYPE", "") if args.gres_type is None else args.gres_type
        executor.update_parameters(
            nodes=nodes, ntasks_per_node=gpus, cpus_per_task=args.cpus_per_task, time=args.time_min,
            job_name=f"sl-{nodes}x{gpus}", signal_delay_s=90,
            partition=args.partition or site.get("SBATCH_PARTITION"),
            account=args.account or site.get("SBATCH_ACCOUNT"),
            constraint=args.constraint or site.get("SBATCH_CONSTRAINT"),
            # whole nodes for a multi-GPU shape, as the sbatch scripts ask; a profile's SBATCH_EXCLUSIVE (user,
            # oversubscribe) wins, as it does over their headers
            exclusive=site.get("SBATCH_EXCLUSIVE") or (True if gpus > 1 else None),
            mem_per_gpu=site.get("SBATCH_MEM_PER_GPU"),  # site.sh's SCALELAB_MEM_PER_GPU (None: the site default)
            setup=[f"cd {shlex.quote(os.getcwd())}", f"export SCALELAB_PROFILE={shlex.quote(args.profile)}",
                   f"source {shlex.quote(self.site_file)}"],
            # Slurm >= 22.05: srun no longer inherits --cpus-per-task from the allocation (one core per rank);
            # a rank that fails ends its peers at once, as in the sbatch scripts (else they wait out the rendezvous);
            # each rank's cores in order, beside its GPU (site.sh's SCALELAB_SRUN_BIND, as the sbatch scripts)
            srun_args=[f"--cpus-per-task={args.cpus_per_task}", "--kill-on-bad-exit=1",
                       *shlex.split(site.get("SCALELAB_SRUN_BIND", ""))],
            gres=gres_request(gpus, gres_type),
        )
        return executor

    def submit(self, nodes: int, gpus: int, repeats: int) -> list:
        """[(shape, job)]: the repeats of one shape, as one job array when there are several."""
        executor = self.executor(nodes, gpus)
        argv_job = self.train_args + ["--devices", str(gpus), "--num_nodes", str(nodes), "--accelerator",
                                      self.accelerator, "--output_dir", os.path.abspath(self.args.output_dir)]
        tasks = [TrainTask(argv_job, self.accelerator) for _ in range(repeats)]
        if repeats == 1:
            return [(f"{nodes}x{gpus}", executor.submit(tasks[0]))]
        with executor.batch():  # one job array for the repeats of a shape
            submitted = [executor.submit(t) for t in tasks]
        return [(f"{nodes}x{gpus}", j) for j in submitted]


def main(argv=None) -> int:
    from tqdm import tqdm

    from scalelab import results
    from scalelab.report.cli import main as report_main
    from scalelab.train import loggers

    args = build_parser().parse_args(argv)
    shapes = [parse_shape(s) for s in (args.shapes or (DEFAULT_SHAPES if args.cluster == "slurm" else ["1x1", "1x2"]))]
    if args.cluster == "local" and any(n > 1 for n, _ in shapes):
        raise UsageError("--cluster local runs on this machine only: use shapes with 1 node (e.g. 1x1 1x2)")
    train_args = list(args.train_args)
    if any(a in ("--devices", "--num_nodes") or a.startswith(("--devices=", "--num_nodes=")) for a in train_args):
        raise UsageError("submit.py sets --devices/--num_nodes from --shapes; leave them out of the train flags")
    if args.cluster == "slurm" and "%" in os.path.abspath(args.output_dir):  # submitit hands the folder to sbatch
        raise UsageError(f"--output_dir {args.output_dir}: sbatch reads % in a log path as a placeholder (%j, %u); "
                         "use a folder without %")
    site_file = find_site(args.site) if args.cluster == "slurm" else ""
    site = site_settings(args.profile, site_file) if site_file else {}
    accelerator = site.get("SCALELAB_ACCELERATOR", "cpu" if args.cluster == "local" else "auto")
    train_args = default_workload(train_args, accelerator)
    cfg = config.parse_config(train_args + ["--output_dir", args.output_dir],  # bad flags fail here, not in a job
                              prog="submit.py")
    train_args = loggers.without_key(train_args)  # the jobs' files keep no key: it travels in their environment
    loggers.check(cfg.logger, cfg=cfg)  # --logger wandb without the package or the key, likewise
    results.ensure_output_dir(args.output_dir)
    folder = os.path.join(args.output_dir, "submitit", time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")

    submitter = Submitter(args, site, folder, accelerator, train_args, site_file)
    failed = []
    total = len(shapes) * args.repeats
    if args.cluster == "local":
        # One job at a time: concurrent local jobs would share the cores and spoil each other's timings.
        print(f"running {total} job(s) one after another on this machine (logs in {folder})")
        with tqdm(total=total, desc="jobs", unit="job") as bar:
            for nodes, gpus in shapes:
                for _ in range(args.repeats):
                    wait_for(submitter.submit(nodes, gpus, 1), bar, failed, args.poll_s, slurm=False)
    else:
        jobs = [j for nodes, gpus in shapes for j in submitter.submit(nodes, gpus, args.repeats)]
        print(f"submitted {len(jobs)} job(s) to slurm: " +
              ", ".join(f"{shape} -> {job.job_id}" for shape, job in jobs) + f" (logs in {folder})")
        if not args.wait:
            print(f"when they finish: python src/benchmark.py --output_dir {args.output_dir}")
            return 0
        with tqdm(total=total, desc="jobs", unit="job") as bar:
            wait_for(jobs, bar, failed, args.poll_s)
    code = report_main(["--output_dir", args.output_dir, *(["--details"] if args.details else [])])
    for line in failed:  # last, below the report: what to act on stays on the screen
        print(f"submit.py: job failed: {line}", file=sys.stderr)
    return 1 if failed else code


def cli():
    """Console-script entry point (see setup.cfg)."""
    sys.exit(run_main("submit.py", main))


if __name__ == "__main__":
    cli()
