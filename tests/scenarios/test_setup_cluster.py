"""slurm_jobs/setup_cluster.sh (the install on a login node; --dry-run prints every command) and
slurm_jobs/preflight.sh (what a participant must know before sbatch, and one verdict line): against fake tools on
PATH, and the pre-flight against the real local SLURM cluster."""

import os
import re
import subprocess
import sys
import time

import pytest

from helpers import ROOT

PIN = re.search(r"^TORCH *\?= *(torch==\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)


def bash(script, *args, path=None, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SCALELAB_", "SBATCH_", "NCCL_", "VIRTUAL_ENV"))}
    if path:
        clean["PATH"] = f"{path}:{clean['PATH']}"
    return subprocess.run(["bash", str(ROOT / "slurm_jobs" / script), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**clean, **env})


def fake_tool(folder, name, text):
    """An executable `name` in folder that prints text (what the real tool prints on a cluster)."""
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n" + text + "\nEOF\n")
    tool.chmod(0o755)
    return str(folder)


def nvidia_smi(tmp_path, cuda):
    return fake_tool(tmp_path / "bin", "nvidia-smi", (
        "+-----------------------------------------------------------------------------------------+\n"
        f"| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: {cuda}     |\n"
        "|-----------------------------------------+------------------------+----------------------+"))


def index_line(proc):
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if "pip install" in line and "torch==" in line]


def test_dry_run_installs_the_pinned_torch_from_the_index_scalelab_cuda_names():
    proc = bash("setup_cluster.sh", "--dry-run", SCALELAB_CUDA="cu126", SCALELAB_VENV="venv-test-never-made")
    assert index_line(proc) == [f"+ venv-test-never-made/bin/python -m pip install --no-cache-dir {PIN} "
                                "--index-url https://download.pytorch.org/whl/cu126"]
    lines = proc.stdout.splitlines()
    assert "+ python3 -m venv venv-test-never-made" in lines
    assert "+ venv-test-never-made/bin/python -m pip install --no-cache-dir -e ." in lines
    assert not (ROOT / "venv-test-never-made").exists()  # a dry run runs nothing


@pytest.mark.parametrize("driver, variant", [("12.8", "cu128"), ("12.9", "cu128"), ("13.1", "cu130"),
                                             ("12.4", "cu126")])  # 12.4: the 12.x build, CUDA minor compatibility
def test_dry_run_reads_the_drivers_cuda_from_nvidia_smi(tmp_path, driver, variant):
    proc = bash("setup_cluster.sh", "--dry-run", path=nvidia_smi(tmp_path, driver))
    assert index_line(proc)[0].endswith(f"--index-url https://download.pytorch.org/whl/{variant}")
    assert f"the driver runs CUDA {driver}" in proc.stdout


def test_the_profile_picks_cpu_and_its_modules_and_a_venv_elsewhere_is_named_for_the_jobs():
    proc = bash("setup_cluster.sh", "--dry-run", SCALELAB_PROFILE="cpu", SCALELAB_VENV="/scratch/me/scalelab-venv",
                SCALELAB_MODULES="python/3.11 cuda/12.4")
    assert index_line(proc)[0].endswith("--index-url https://download.pytorch.org/whl/cpu")
    lines = proc.stdout.splitlines()
    assert lines[1:3] == ["+ module purge", "+ module load python/3.11 cuda/12.4"]
    assert '# jobs find this venv when the profile says so: site_export SCALELAB_VENV "/scratch/me/scalelab-venv" ' \
           "in slurm_jobs/site.sh" in lines
    mirror = bash("setup_cluster.sh", "--dry-run", SCALELAB_CUDA="cu128", SCALELAB_TORCH_INDEX="https://pypi.site/cu")
    assert index_line(mirror)[0].endswith("--index-url https://pypi.site/cu")


@pytest.mark.parametrize("args, env, error", [
    (["--dry-run"], {"SCALELAB_CUDA": "12.8"}, "SCALELAB_CUDA='12.8' is not cuXYZ (e.g. cu126, cu128), rocmX.Y "
                                               "(AMD GPUs, e.g. rocm6.4) or cpu"),
    (["--dryrun"], {}, "unknown argument '--dryrun' (use --dry-run or --help)"),
    (["--dry-run"], {"SCALELAB_PROFILE": "h100"}, None),  # site.sh's own line
])
def test_bad_input_is_one_line(args, env, error):
    proc = bash("setup_cluster.sh", *args, **env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.strip() == (f"setup_cluster.sh: {error}" if error else
                                   "site.sh: unknown SCALELAB_PROFILE='h100' (use auto, a100 or cpu)")


def test_a_login_node_without_nvidia_smi_is_told_the_srun_line_of_its_profile():
    """No nvidia-smi (a login node) and no SCALELAB_CUDA: one line with the srun that reads the driver's CUDA on a
    GPU node of the profile's partition and account (a bare srun lands in the default partition)."""
    proc = bash("setup_cluster.sh", "--dry-run", SCALELAB_PROFILE="a100", SBATCH_PARTITION="gpu",
                SBATCH_ACCOUNT="proj1")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr == ("setup_cluster.sh: no nvidia-smi here (a login node without GPUs?): read 'CUDA Version' "
                           "from 'srun -N1 --gres=gpu:1 --time=5 -p gpu -A proj1 nvidia-smi' and set SCALELAB_CUDA "
                           "(e.g. SCALELAB_CUDA=cu128 for 12.8 or newer), or run this on a GPU node\n")


def test_a_driver_too_old_or_no_driver_is_one_line(tmp_path):
    old = bash("setup_cluster.sh", "--dry-run", path=nvidia_smi(tmp_path, "11.8"))
    assert old.returncode == 2 and len(old.stderr.splitlines()) == 1
    assert old.stderr.startswith(f"setup_cluster.sh: the driver runs CUDA 11.8, older than every build of {PIN}")
    none = bash("setup_cluster.sh", "--dry-run", path=fake_tool(tmp_path / "other", "nvidia-smi", "No devices"))
    assert none.returncode == 2 and none.stderr.startswith("setup_cluster.sh: nvidia-smi printed no 'CUDA Version")


SINFO = ("debug*|up|2|gpu:a100:4(S:0-1)|512000\ngpu|up|8|gpu:h100:8|1024000\nold|down|2|gpu:v100:2|192000\n"
         "auto|up|4|gpu:nvidia_a100-sxm4-80gb:4(S:0-1)|257000\nsmall|up|2|gpu:4|120000")
PARTITION = "   DefMemPerCPU=4000 MaxMemPerNode=UNLIMITED"  # scontrol show partition, the lines preflight reads
NO_NODE = "pick another partition (SBATCH_PARTITION) or GPU type (SCALELAB_GPU_TYPE) in profile auto " \
          "(docs/09-adapting-site-sh.md)"


def fake_sinfo(folder, partitions, nodes="node1|idle|none\nnode2|mix|none"):
    """sinfo as preflight asks it: partitions, or (-N) a partition's nodes with their states and reasons."""
    fake_tool(folder, "sinfo.nodes", nodes)
    fake_tool(folder, "sinfo.partitions", partitions)
    (folder / "sinfo").write_text('#!/bin/sh\ncase " $* " in *" -N "*) exec "$(dirname "$0")/sinfo.nodes" ;; esac\n'
                                  'exec "$(dirname "$0")/sinfo.partitions"\n')
    (folder / "sinfo").chmod(0o755)
    return str(folder)


DRAINED = "node1|idle|none\nnode2|drain|maintenance until 14:00"


@pytest.mark.parametrize("env, verdict", [
    ({"SCALELAB_PROFILE": "cpu"}, "READY: profile cpu, partition debug, gpu:4 per node available"),
    ({"SCALELAB_PROFILE": "cpu", "NODES": DRAINED},
     "NOT READY: partition 'debug' has 1 node(s) that can take a job; the job scripts need 2 (not: node2 drain "
     "(maintenance until 14:00)): they would wait until one returns (ask the site, or pick another partition)"),
    ({"SCALELAB_PROFILE": "cpu", "NODES": "node1|idle~|none\nnode2|down*|Not responding"},
     "NOT READY: partition 'debug' has 1 node(s) that can take a job; the job scripts need 2 (not: node2 down* "),
    # the scripts ask gpu:4, any type: an H100 partition and AutoDetect's type names take them as they are
    ({"SBATCH_PARTITION": "gpu"}, "READY: profile auto, partition gpu, gpu:4 per node available"),
    ({"SBATCH_PARTITION": "auto"}, "READY: profile auto, partition auto, gpu:4 per node available"),
    ({"SBATCH_PARTITION": "gpu", "SCALELAB_GPU_TYPE": "a100"},
     f"NOT READY: partition 'gpu' has no node with gpu:a100:4 (it offers: gpu:h100:8); {NO_NODE}"),
    ({"SBATCH_PARTITION": "old"}, "NOT READY: partition 'old' is not up (down); partition 'old' has no node with "
                                  f"gpu:4 (it offers: gpu:v100:2); {NO_NODE}"),
    ({"SBATCH_ACCOUNT": "proj9"}, "NOT READY: account 'proj9' is not one of yours (proj1 proj2)"),
    # auto asks 32G a GPU: 4 x 32G = 131072M, more than 120000M
    ({"SBATCH_PARTITION": "small"}, "NOT READY: profile auto asks 4 x 32G of host memory per node but partition "
                                    "'small' nodes have 120000M: set SCALELAB_MEM_PER_GPU lower, or none for the "
                                    "partition's default"),
    ({"SBATCH_PARTITION": "small", "SCALELAB_MEM_PER_GPU": "29G"}, "READY: profile auto, partition small"),
    ({"SBATCH_PARTITION": "small", "SCALELAB_MEM_PER_GPU": "none"}, "READY: profile auto, partition small"),
    ({"SCALELAB_MEM_PER_GPU": "lots"}, "NOT READY: SBATCH_MEM_PER_GPU='lots' is not a size (e.g. 32G); set "
                                       "SCALELAB_MEM_PER_GPU in profile auto"),
    ({"SCALELAB_VENV": "/nowhere", "SCALELAB_PYTHON": "/nowhere/bin/python"},
     "NOT READY: no Python at /nowhere/bin/python (bash slurm_jobs/setup_cluster.sh makes it; "
     "SCALELAB_VENV says where)"),
])
def test_preflight_verdict_against_fake_slurm_tools(tmp_path, env, verdict):
    env = dict(env)
    bin_dir = fake_sinfo(tmp_path / "bin", SINFO, *([env.pop("NODES")] if "NODES" in env else []))
    fake_tool(tmp_path / "bin", "sacctmgr", "proj1||normal\nproj2|gpu|normal")
    fake_tool(tmp_path / "bin", "scontrol", PARTITION)
    env = {"SCALELAB_VENV": os.path.dirname(os.path.dirname(sys.executable)), **env}
    proc = bash("preflight.sh", path=bin_dir, **env)
    last = proc.stdout.splitlines()[-1]
    assert last.startswith(verdict), proc.stdout
    assert proc.returncode == (0 if verdict.startswith("READY") else 1)


def test_preflight_without_slurm_or_with_a_bad_profile_says_so_in_one_verdict(tmp_path):
    empty = bash("preflight.sh", path=fake_tool(tmp_path / "bin", "sinfo", ""))
    assert empty.stdout.splitlines()[-1] == "NOT READY: sinfo lists no partition (is SLURM reachable from here?)"
    bad = bash("preflight.sh", SCALELAB_PROFILE="h100")
    assert bad.returncode == 1 and bad.stdout.splitlines() == [
        "NOT READY: profile h100 does not load (slurm_jobs/site.sh, docs/09-adapting-site-sh.md)"]
    assert bad.stderr.strip() == "site.sh: unknown SCALELAB_PROFILE='h100' (use auto, a100 or cpu)"
    usage = bash("preflight.sh", "--gpus")
    assert usage.returncode == 2
    assert usage.stderr.strip() == "preflight.sh: unknown argument '--gpus' (use --gpu or --help)"


@pytest.mark.slurm
def test_preflight_on_the_local_slurm_cluster(slurm_env):
    env = {k: v for k, v in slurm_env.items() if not k.startswith(("SBATCH_", "SCALELAB_"))}
    env.update(SCALELAB_PROFILE="cpu", SCALELAB_VENV=os.path.dirname(os.path.dirname(sys.executable)))

    def preflight(*args, **more):
        return subprocess.run(["bash", "slurm_jobs/preflight.sh", *args], cwd=ROOT, env={**env, **more},
                              capture_output=True, text=True, timeout=120)

    ready = preflight()
    assert ready.returncode == 0, ready.stdout + ready.stderr
    lines = ready.stdout.splitlines()
    assert lines[-1].startswith("READY: profile cpu, partition debug, gpu:4 per node available; next: ")
    assert "GPU types in partition debug: a100; the job scripts ask any type" in lines
    assert any(re.match(r"^ +debug\* +up +2 +infinite +gpu:a100:4", line) for line in lines), ready.stdout
    assert "  account|partition|qos" in lines  # the user's associations, from sacctmgr
    missing = preflight(SBATCH_PARTITION="nosuch")
    assert missing.returncode == 1
    assert missing.stdout.splitlines()[-1] == "NOT READY: partition 'nosuch' is not in sinfo (partitions: debug)"
    gpu = preflight("--gpu")  # one real srun on the profile's partition: torch answers from node1 or node2
    assert gpu.returncode == 0, gpu.stdout + gpu.stderr
    assert re.search(r"^  torch: \S+ \| built for CUDA \S+ \| sees GPU (True|False)", gpu.stdout, re.M), gpu.stdout
    on_gpus = preflight("--gpu", SCALELAB_PROFILE="a100")  # a GPU profile: a CPU-only torch is NOT READY
    if "sees GPU False" in on_gpus.stdout:
        assert on_gpus.returncode == 1 and on_gpus.stdout.splitlines()[-1].startswith("NOT READY: torch sees no GPU")
    # last: a resumed node answers slurmctld's next ping only (sinfo "idle*" until then), which the checks above read
    subprocess.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=workshop dry run"], env=env,
                   check=True)
    try:  # the dry run: READY with node2 drained, then `sbatch --wait` waited silently for good
        drained = preflight()
    finally:
        subprocess.run(["scontrol", "update", "NodeName=node2", "State=RESUME"], env=env, check=True)
    assert drained.returncode == 1 and drained.stdout.splitlines()[-1] == (
        "NOT READY: partition 'debug' has 1 node(s) that can take a job; the job scripts need 2 (not: node2 drain "
        "(workshop dry run)): they would wait until one returns (ask the site, or pick another partition)")
    deadline = time.time() + 60
    while "*" in (state := subprocess.run(["sinfo", "-h", "-n", "node2", "-o", "%t"], env=env, capture_output=True,
                                          text=True).stdout) and time.time() < deadline:
        time.sleep(1)  # the next tests find node2 answering
    assert "*" not in state and "drain" not in state, state


@pytest.mark.parametrize("version, refused", [("3.9", True), ("3.6", True), ("3.11", False), ("3.13", False)])
def test_a_python_older_than_the_claimed_floor_is_refused_before_the_venv(tmp_path, version, refused):
    """RHEL 9's python3 is 3.9: refused in one line that names the floor and the way out, before any venv or pip."""
    fake_tool(tmp_path / "bin", "python", version)  # answers the version query the way python -c would
    proc = bash("setup_cluster.sh", "--dry-run", SCALELAB_CUDA="cpu", PYTHON=str(tmp_path / "bin" / "python"),
                SCALELAB_VENV=str(tmp_path / "venv"))  # not the checkout's .venv, which a `make` may have made
    if refused:
        assert proc.returncode == 2 and "venv" not in proc.stdout.split("\n", 1)[1]
        assert proc.stderr == (f"setup_cluster.sh: {tmp_path}/bin/python is Python {version}; scalelab needs 3.11 or "
                               "newer: load a newer Python module (SCALELAB_MODULES in slurm_jobs/site.sh) or set "
                               "PYTHON=python3.11\n")
    else:
        assert proc.returncode == 0, proc.stderr
        assert f"+ {tmp_path}/bin/python -m venv {tmp_path}/venv" in proc.stdout.splitlines()


def preflight_on_a_fake_partition(tmp_path, **env):
    """preflight.sh where sinfo and scontrol describe a GPU partition (what they print on a cluster)."""
    bin_dir = fake_sinfo(tmp_path / "bin", SINFO)
    fake_tool(tmp_path / "bin", "scontrol", PARTITION)
    return bash("preflight.sh", path=bin_dir, SCALELAB_VENV=os.path.dirname(os.path.dirname(sys.executable)), **env)


def test_preflight_names_the_gpu_types_a_partition_offers(tmp_path):
    auto = preflight_on_a_fake_partition(tmp_path, SBATCH_PARTITION="auto").stdout.splitlines()
    assert "GPU types in partition auto: nvidia_a100-sxm4-80gb; the job scripts ask any type" in auto
    typed = preflight_on_a_fake_partition(tmp_path, SBATCH_PARTITION="debug", SCALELAB_GPU_TYPE="a100")
    assert "GPU types in partition debug: a100; the job scripts ask a100" in typed.stdout.splitlines()
    assert "  job scripts: up to gpu:a100:4 per node (--gres in slurm_jobs/*.sh, the type from SCALELAB_GPU_TYPE)" \
        in typed.stdout.splitlines()
    assert typed.returncode == 0, typed.stdout


def test_preflight_prints_the_memory_asked_and_the_partitions_default(tmp_path):
    lines = preflight_on_a_fake_partition(tmp_path, SBATCH_PARTITION="auto").stdout.splitlines()
    assert "  memory:      32G per GPU (--mem-per-gpu)" in lines
    assert "memory in partition auto: nodes of 257000M; DefMemPerCPU=4000 MaxMemPerNode=UNLIMITED" in lines
    none = preflight_on_a_fake_partition(tmp_path, SCALELAB_MEM_PER_GPU="none").stdout.splitlines()
    assert "  memory:      (none asked: the partition default)" in none


def test_amd_gpus_install_the_rocm_build_the_user_names(tmp_path):
    """On an AMD node (rocm-smi, no nvidia-smi) the ROCm build is named, not guessed (which ROCm versions a torch
    release is built for changes every release): one line with the node's ROCm version; SCALELAB_CUDA=rocm6.4 then
    installs from the rocm6.4 index."""
    bin_dir = fake_tool(tmp_path / "bin", "rocm-smi", "GPU[0]\t\t: Card Series: \t\tAMD Instinct MI250X")
    (tmp_path / "rocm" / ".info").mkdir(parents=True)
    (tmp_path / "rocm" / ".info" / "version").write_text("6.4.1-120\n")
    asked = bash("setup_cluster.sh", "--dry-run", path=bin_dir, ROCM_PATH=str(tmp_path / "rocm"))
    assert asked.returncode == 2 and asked.stdout == ""
    assert asked.stderr == (f"setup_cluster.sh: an AMD GPU node (rocm-smi, ROCm 6.4 here): set SCALELAB_CUDA=rocmX.Y, "
                            f"a ROCm build of {PIN} (https://download.pytorch.org/whl/torch/ lists its +rocmX.Y "
                            "wheels; e.g. SCALELAB_CUDA=rocm6.4 if listed)\n")
    named = bash("setup_cluster.sh", "--dry-run", path=bin_dir, SCALELAB_CUDA="rocm6.4")
    assert index_line(named)[0].endswith("--index-url https://download.pytorch.org/whl/rocm6.4")
