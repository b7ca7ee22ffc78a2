"""scalelab as ReFrame checks: the scaling ladder, the report over it, the all-reduce benchmark and the GPU self-check.

    reframe -C reframe/local_cluster.py -c reframe/scalelab_checks.py -r       # docs/14-a-nightly-reframe-run.md

Each check runs this checkout's own programs inside the allocation ReFrame makes: src/train.py (one test per rung:
one device, one node's devices, N nodes' devices), src/allreduce_bench.py, src/benchmark.py over the ladder's and
the benchmark's results (ScalelabReport, which waits for them), and slurm_jobs/gpu_selfcheck.sh. Inside each job
slurm_jobs/site.sh sets the profile's settings (SCALELAB_PROFILE, from the environment the site declares), as in
every scalelab job script.

Sanity: every result.json validates (the schema the report reads) and says the run completed at the size asked;
the self-check's closing line counts no FAIL; the report's verdicts are all numbers ReFrame can judge. Performance
variables: throughput_per_device (samples/s or tokens/s), efficiency, busbw, MFU where the GPU's peak is known,
computed by the report's own code; their references come from a scalelab reference file (`benchmark.py
--write_reference` writes one; report/reference.py reads it), so the same bounds judge a run here and in
`benchmark.py --reference`.

What a site sets, in its ReFrame configuration (reframe/gpu_site_example.py): a partition whose `environs` name an
environment with the feature `scalelab` (its env_vars set SCALELAB_PROFILE), the GPUs per node as the partition's
`devices`, the `_rfm_gpu` resource that asks for them, and in the partition's extras['scalelab'] (all optional):
  reference        a scalelab reference file (relative to this checkout): the checks' references
  config           the workload, a named config of train.py (default: src/scalelab/configs/default-workload.txt's)
  train_args       more train.py flags, a list (["--max_steps", "200"]); gpu_selfcheck.sh gets them too
  allreduce_args   more allreduce_bench.py flags, a list
  nodes            the nodes of the N-node rung and of the all-reduce benchmark (default 2)
  selfcheck_nodes  the self-check's nodes (default 2, as gpu_selfcheck.sh asks)
  devices_per_node ranks per node where the partition declares no GPU (a CPU cluster)
  cpus_per_task    cores per rank (default 4, as the job scripts ask)
  expect_busbw     GB/s the self-check judges the interconnect against (gpu_selfcheck.sh's EXPECT_BUSBW)
`-S reference_file=PATH` (and -S config=, -S nodes=) on reframe's command line wins over the extras.
"""

import os
import shlex
import sys

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.backends import getlauncher
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import ReframeError, SanityError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(ROOT, "src") not in sys.path:  # this checkout's package, as its entry scripts (src/*.py) import it
    sys.path.insert(0, os.path.join(ROOT, "src"))

from scalelab.errors import UsageError  # noqa: E402 (after the path to this checkout's package)
from scalelab.report import reference, reframe_refs  # noqa: E402

RUNG_SHAPES = ["one_device", "one_node", "n_nodes"]


def _require(problems: list) -> bool:
    """A sanity verdict: True, or SanityError naming every problem."""
    if problems:
        raise SanityError("; ".join(problems))
    return True


class ScalelabTest(rfm.RunOnlyRegressionTest):
    """What every scalelab check shares: the checkout, the site's knobs, site.sh's profile inside the job."""

    valid_systems = ["*"]
    valid_prog_environs = ["+scalelab"]
    scalelab_root = variable(str, value=ROOT)
    reference_file = variable(str, type(None), value=None)
    config = variable(str, type(None), value=None)
    nodes = variable(int, type(None), value=None)
    time_limit = "30m"
    maintainers = ["scalelab"]
    tags = {"scalelab"}

    def knob(self, name, default=None):
        """A -S variable where the test has one and it was given, else the partition's extras['scalelab'][name]."""
        given = getattr(self, name, None) if name in ("reference_file", "config", "nodes") else None
        key = "reference" if name == "reference_file" else name
        return given if given is not None else self.current_partition.extras.get("scalelab", {}).get(key, default)

    def gpus_per_node(self) -> int:
        """The GPUs the partition declares per node (its `devices`), 0 for a CPU partition."""
        return sum(d.num_devices for d in self.current_partition.select_devices("gpu"))

    def per_node(self) -> int:
        return self.gpus_per_node() or int(self.knob("devices_per_node", 1))

    def ask(self, tasks_per_node: int, nodes: int):
        """The allocation: one task per device, whole nodes as the job scripts ask (--exclusive), their cores."""
        self.num_tasks, self.num_tasks_per_node = tasks_per_node * nodes, tasks_per_node
        self.num_cpus_per_task = int(self.knob("cpus_per_task", 4))
        self.exclusive_access = True
        if self.gpus_per_node():
            self.num_gpus_per_node = tasks_per_node

    def reference_path(self):
        path = self.knob("reference_file")
        return os.path.join(self.scalelab_root, path) if path else None

    def workload(self) -> list:
        """train.py's workload flags: the named config the site gave, else the one every job script trains."""
        name = self.knob("config")
        if not name:
            kind = "gpu" if self.gpus_per_node() else "cpu"
            with open(os.path.join(self.scalelab_root, "src/scalelab/configs/default-workload.txt")) as fh:
                name = dict(line.split()[:2] for line in fh if line.strip() and not line.startswith("#"))[kind]
        return ["--config", name]

    @property
    def results_dir(self) -> str:
        return os.path.join(self.stagedir, "results")

    @run_after("setup")
    def in_the_checkout_with_the_profile(self):
        """The job's first lines, as slurm_jobs/job_common.sh's: the checkout, site.sh's profile, srun's cores. The
        site's reference file is read now, by scalelab (a bad one fails here, before any job; none: the figures
        are logged, not judged)."""
        try:
            self.checks = reference.load(self.reference_path()) if self.reference_path() else []
        except UsageError as exc:  # scalelab's one line, without a traceback
            raise ReframeError(str(exc)) from None
        self.keep_files = ["results"]
        self.prerun_cmds = [
            f"export SCALELAB_ROOT={shlex.quote(self.scalelab_root)}",
            'cd "$SCALELAB_ROOT"',
            "source slurm_jobs/site.sh || exit 2",
            # Slurm >= 22.05: srun no longer passes sbatch's --cpus-per-task on (job_common.sh does the same)
            'if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi',
        ] + self.prerun_cmds

    @run_before("performance")
    def figures_and_their_references(self):
        """Performance variables from this test's results, references from the site's reference file."""
        if not self.is_dry_run():
            self.set_figures(*reframe_refs.figures(self.results_dir, self.checks))

    def set_figures(self, found: dict, refs: dict):
        _require(reframe_refs.unit_problems(found, refs))
        self.perf_variables = {name: sn.make_performance_function(sn.defer(value), unit)
                               for name, (value, unit) in found.items()}
        self.reference = {"*": refs}


# site.sh's srun placement (each rank's cores in order, beside its GPU), as the job scripts pass it: expanded by the
# job's shell, after its prerun sourced site.sh
SRUN_BIND = ["$SCALELAB_SRUN_BIND"]


@rfm.simple_test
class ScalelabRung(ScalelabTest):
    """One rung of the scaling ladder: src/train.py on one device, on one node's devices, or on N nodes'."""

    shape = parameter(RUNG_SHAPES)
    executable = '"$SCALELAB_PYTHON" src/train.py'

    @run_after("setup")
    def size(self):
        self.rung_nodes = int(self.knob("nodes", 2)) if self.shape == "n_nodes" else 1
        per_node = 1 if self.shape == "one_device" else self.per_node()
        self.ask(per_node, self.rung_nodes)
        self.descr = f"scalelab training, {per_node} device(s) x {self.rung_nodes} node(s)"
        self.job.launcher.options = ["--kill-on-bad-exit=1", *SRUN_BIND]
        self.executable_opts = [*self.workload(), "--devices", str(per_node), "--num_nodes", str(self.rung_nodes),
                                "--accelerator", '"${SCALELAB_ACCELERATOR:-auto}"', "--output_dir", self.results_dir,
                                *map(shlex.quote, self.knob("train_args", []))]

    @sanity_function
    def result_validates(self):
        return _require(reframe_refs.result_problems(self.results_dir, "training", self.num_tasks, self.rung_nodes))


@rfm.simple_test
class ScalelabAllreduce(ScalelabTest):
    """src/allreduce_bench.py across N nodes, one task per device: busbw at large messages, nccl-tests' figure."""

    executable = '"$SCALELAB_PYTHON" src/allreduce_bench.py'

    @run_after("setup")
    def size(self):
        self.bench_nodes = int(self.knob("nodes", 2))
        self.ask(self.per_node(), self.bench_nodes)
        self.descr = f"scalelab all-reduce benchmark, {self.per_node()} device(s) x {self.bench_nodes} node(s)"
        self.job.launcher.options = ["--kill-on-bad-exit=1", *SRUN_BIND]
        self.executable_opts = ["--devices", str(self.per_node()), "--num_nodes", str(self.bench_nodes),
                                "--accelerator", '"${SCALELAB_ACCELERATOR:-auto}"', "--output_dir", self.results_dir,
                                *map(shlex.quote, self.knob("allreduce_args", []))]

    @sanity_function
    def result_validates(self):
        return _require(reframe_refs.result_problems(self.results_dir, "allreduce", self.num_tasks,
                                                     self.bench_nodes))


@rfm.simple_test
class ScalelabSelfcheck(ScalelabTest):
    """slurm_jobs/gpu_selfcheck.sh as the job's body (its own srun steps start the tasks): the benchmark, the
    workload on one device and on all, then src/selfcheck.py's PASS/FAIL per claim."""

    executable = "bash slurm_jobs/gpu_selfcheck.sh"

    @run_after("setup")
    def size(self):
        nodes = int(self.knob("selfcheck_nodes", 2))
        self.ask(self.per_node(), nodes)
        self.descr = f"scalelab GPU self-check, {self.per_node()} device(s) x {nodes} node(s)"
        self.job.launcher = getlauncher("local")()
        config, expect = self.knob("config"), self.knob("expect_busbw")
        self.env_vars = {"GPUS_PER_NODE": str(self.per_node()), "OUTPUT_DIR": self.results_dir,
                         # the job scripts find the checkout where sbatch ran; ReFrame runs it in the stage folder
                         "SLURM_SUBMIT_DIR": self.scalelab_root,
                         **({"CONFIG": config} if config else {}), **({"EXPECT_BUSBW": str(expect)} if expect else {})}
        self.executable_opts = [*map(shlex.quote, self.knob("train_args", []))]

    @sanity_function
    def every_claim_holds(self):
        return sn.all([
            sn.assert_found(r"^self-check: 0 FAIL, [1-9]\d* PASS", self.stdout),
            sn.assert_not_found(r"^FAIL  ", self.stdout),
            _require(reframe_refs.result_problems(self.results_dir)),
        ])


@rfm.simple_test
class ScalelabReport(ScalelabTest):
    """src/benchmark.py over the ladder's and the benchmark's results, once they have all run: the scaling table,
    then `--reference`'s verdicts. Its performance variables are the report's PERF lines (efficiency per rung,
    throughput per device, busbw), named `<check>.<quantity>` after the reference file's checks."""

    executable = '"$SCALELAB_PYTHON" src/benchmark.py'
    num_tasks = 1

    @run_after("init")
    def after_the_ladder_and_the_benchmark(self):
        self.sources = [ScalelabRung.variant_name(v) for v in ScalelabRung.get_variant_nums()]
        self.sources.append("ScalelabAllreduce")
        for name in self.sources:
            self.depends_on(name)

    @run_before("run")
    def gather_their_results(self):
        self.descr = "scalelab report over the ladder and the all-reduce benchmark" + (
            f", against {self.knob('reference_file')}" if self.checks else "")
        self.job.launcher = getlauncher("local")()
        copies = [f"cp -R {shlex.quote(os.path.join(self.getdep(name).stagedir, 'results'))}/. "
                  f"{shlex.quote(self.results_dir)}/" for name in self.sources]
        self.prerun_cmds += [f"mkdir -p {shlex.quote(self.results_dir)}", *copies]
        self.executable_opts = ["--output_dir", self.results_dir]
        if self.checks:  # the tables first, for whoever reads the log; then the verdicts
            self.prerun_cmds.append(f"{self.executable} {' '.join(map(shlex.quote, self.executable_opts))}")
            self.executable_opts += ["--reference", self.reference_path()]

    @sanity_function
    def verdicts_are_numbers(self):
        if not self.checks:
            return sn.assert_found(r"^scalelab report: ", self.stdout)
        return _require(reframe_refs.report_problems(self._lines()))

    def _lines(self) -> list:
        with open(os.path.join(self.stagedir, self.job.stdout)) as fh:
            return fh.read().splitlines()

    @run_before("performance")
    def figures_and_their_references(self):
        if self.checks and not self.is_dry_run():
            self.set_figures(*reframe_refs.report_figures(self._lines(), self.checks))
