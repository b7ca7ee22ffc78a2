"""slurm_jobs/site.sh in a plain bash, as a user sources it: the accelerator follows the hardware by default,
profiles never leak into each other, and the CPU profile refuses a node with GPUs."""

import os
import shutil
import subprocess

import pytest

from helpers import ROOT

SHOW = 'env | grep -E "^(SBATCH|NCCL|SCALELAB_(ACCELERATOR|SITE_SET))" | sort'


def bash(script, cwd=ROOT, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SCALELAB_", "SBATCH_", "NCCL_"))}
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=30,
                          env={**clean, **env})


def fake_gpu_node(tmp_path):
    """A PATH whose nvidia-smi lists one GPU: what `nvidia-smi -L` prints on a GPU node."""
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-0000)'\n")
    tool.chmod(0o755)
    return f"{tmp_path}:{os.environ['PATH']}"


def test_default_profile_lets_the_job_follow_its_hardware():
    proc = bash(f"source slurm_jobs/site.sh && {SHOW}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["SBATCH_MEM_PER_GPU=32G", "SCALELAB_ACCELERATOR=auto",
                                        "SCALELAB_SITE_SET=SCALELAB_ACCELERATOR SBATCH_MEM_PER_GPU"]


def test_a_profile_never_leaks_into_the_next_and_leaves_the_users_own_settings():
    proc = bash(f"SCALELAB_PROFILE=a100 source slurm_jobs/site.sh && SCALELAB_PROFILE=cpu source slurm_jobs/site.sh"
                f" && {SHOW}", SBATCH_PARTITION="mine")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["SBATCH_PARTITION=mine", "SCALELAB_ACCELERATOR=cpu",
                                        "SCALELAB_SITE_SET=SCALELAB_ACCELERATOR"]  # a100's NCCL_DEBUG is gone


def test_cpu_profile_refuses_a_node_with_gpus_in_one_line_unless_asked(tmp_path):
    path = fake_gpu_node(tmp_path)
    proc = bash("source slurm_jobs/site.sh && echo sourced", SCALELAB_PROFILE="cpu", PATH=path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "site.sh: profile cpu on a node with GPUs (GPU 0: NVIDIA A100-SXM4-40GB ...): the job would train on CPU "
        "while holding them; use SCALELAB_PROFILE=auto, or SCALELAB_CPU_ON_GPU=1 to rehearse on CPU"]
    asked = bash(f"source slurm_jobs/site.sh && {SHOW}", SCALELAB_PROFILE="cpu", SCALELAB_CPU_ON_GPU="1", PATH=path)
    assert asked.returncode == 0 and "SCALELAB_ACCELERATOR=cpu" in asked.stdout.splitlines()
    auto = bash(f"source slurm_jobs/site.sh && {SHOW}", PATH=path)  # the default on that node: the GPUs
    assert "SCALELAB_ACCELERATOR=auto" in auto.stdout.splitlines()


def test_the_default_workload_follows_the_node(tmp_path):
    """On GPUs the jobs train the GPT `small` (the MLP and `tiny` time Python there); on CPU the MLP; MODEL/PRESET
    given by the user always win. job_common.sh is sourced as a job sources it, without srun."""
    show = ('GPUS_PER_NODE=1 source slurm_jobs/job_common.sh >/dev/null && echo "${WORKLOAD[*]}"')
    gpu = bash(show, PATH=fake_gpu_node(tmp_path))
    assert gpu.returncode == 0, gpu.stderr
    assert gpu.stdout.split() == ["--config", "gpt-small"]
    cpu = bash(show)
    assert cpu.returncode == 0 and cpu.stdout.split() == ["--config", "mlp"], cpu.stderr
    chosen = bash(show, PATH=fake_gpu_node(tmp_path), MODEL="gpt", PRESET="large")
    assert chosen.stdout.split() == ["--config", "gpt-large"]
    named = bash(show, PATH=fake_gpu_node(tmp_path), CONFIG="gpt-medium")
    assert named.stdout.split() == ["--config", "gpt-medium"]
    rehearsal = bash(show, PATH=fake_gpu_node(tmp_path), SCALELAB_PROFILE="cpu", SCALELAB_CPU_ON_GPU="1")
    assert rehearsal.stdout.split() == ["--config", "mlp"], rehearsal.stderr


@pytest.mark.parametrize("name, batch", [("gpt-small", 8), ("gpt-medium", 8), ("gpt-large", 4), ("gpt-xl", 2)])
def test_the_named_configs_the_jobs_run_fit_a_40_gb_a100(name, batch):
    """The batch per GPU in each GPU config is one the memory model fits in 40 GB (bf16-mixed, AdamW); for the
    big shapes it is the largest power of two that does."""
    from scalelab import config
    from scalelab.perfmodel import memory
    from scalelab.workloads.gpt import shape_of

    cfg = config.for_accelerator(config.parse_config(["--config", name]), "gpu")
    assert cfg.batch_size == batch and cfg.precision == "bf16-mixed"
    need = memory.training_memory(shape_of(cfg), cfg.batch_size, cfg.precision).total
    assert need < 40e9, f"{name}: {need / 1e9:.1f} GB"
    doubled = memory.training_memory(shape_of(cfg), 2 * batch, cfg.precision).total
    assert doubled > 40e9 or name in ("gpt-small", "gpt-medium")


def test_a_value_the_user_changed_after_the_profile_survives_the_job_s_own_source():
    """The profile set NCCL_DEBUG=WARN in the shell; `NCCL_DEBUG=INFO sbatch ...` then reaches the job, whose
    own `source slurm_jobs/site.sh` must keep INFO (it undid it: chapter 8's NET/IB check printed nothing)."""
    job = 'bash -c "source slurm_jobs/site.sh >/dev/null && echo \\${NCCL_DEBUG:-unset}"'
    proc = bash(f"export SCALELAB_PROFILE=a100 && source slurm_jobs/site.sh >/dev/null && NCCL_DEBUG=INFO {job} "
                f"&& {job} && SCALELAB_PROFILE=cpu {job}")
    assert proc.returncode == 0, proc.stderr
    # changed by the user: kept; as the profile set it: the profile's again; under another profile: gone
    assert proc.stdout.splitlines() == ["INFO", "WARN", "unset"], proc.stdout
    twice = bash(f"source slurm_jobs/site.sh && source slurm_jobs/site.sh && {SHOW}", SCALELAB_MEM_PER_GPU="32G")
    (listed,) = [ln for ln in twice.stdout.splitlines() if ln.startswith("SCALELAB_SITE_SET=")]
    assert listed.split("=", 1)[1].split() == ["SBATCH_MEM_PER_GPU", "SCALELAB_ACCELERATOR"]


def test_host_memory_per_gpu_is_a_site_variable_that_never_leaks():
    set_by_user = bash(f"source slurm_jobs/site.sh && {SHOW}", SCALELAB_MEM_PER_GPU="48G")
    assert "SBATCH_MEM_PER_GPU=48G" in set_by_user.stdout.splitlines()
    none = bash(f"source slurm_jobs/site.sh && {SHOW}", SCALELAB_MEM_PER_GPU="none")  # the site's default
    assert not [line for line in none.stdout.splitlines() if line.startswith("SBATCH_MEM")], none.stdout
    rehearsal = bash(f"SCALELAB_PROFILE=cpu source slurm_jobs/site.sh && {SHOW}")  # a CPU rehearsal asks no floor
    assert not [line for line in rehearsal.stdout.splitlines() if line.startswith("SBATCH_MEM")]
    a100 = bash(f"SCALELAB_PROFILE=a100 source slurm_jobs/site.sh && {SHOW}")
    assert "SBATCH_MEM_PER_GPU=64G" in a100.stdout.splitlines()
    after = bash(f"SCALELAB_PROFILE=a100 source slurm_jobs/site.sh && SCALELAB_PROFILE=cpu source slurm_jobs/site.sh"
                 f" && {SHOW}")
    assert not [line for line in after.stdout.splitlines() if line.startswith("SBATCH_MEM")]


def test_the_scripts_and_the_sweep_read_one_default_workload_file(tmp_path):
    """Edit configs/default-workload.txt and both the sbatch scripts and the sweep follow: one place, not two."""
    from scalelab import config
    from scalelab.launch.sweep import default_workload

    text = (ROOT / "src/scalelab/configs/default-workload.txt").read_text()
    assert default_workload([], "auto")[:2] == ["--config", "gpt-small"] and "gpu gpt-small" in text
    fake = tmp_path / "checkout"
    shutil.copytree(ROOT / "slurm_jobs", fake / "slurm_jobs")
    (fake / "src/scalelab/configs").mkdir(parents=True)
    (fake / "src/scalelab/configs/default-workload.txt").write_text(text.replace("gpu gpt-small", "gpu gpt-medium"))
    show = 'GPUS_PER_NODE=1 source slurm_jobs/job_common.sh >/dev/null && echo "${WORKLOAD[*]}"'
    gpu = bash(show, cwd=fake, PATH=fake_gpu_node(tmp_path), SLURM_SUBMIT_DIR=str(fake))
    assert gpu.stdout.split() == ["--config", "gpt-medium"], gpu.stderr
    for model in ("gpt", "transformer"):  # transformer: the GPT's name before result schema 3, still read
        chosen = bash(show, cwd=fake, PATH=fake_gpu_node(tmp_path), SLURM_SUBMIT_DIR=str(fake), MODEL=model)
        assert chosen.stdout.split() == ["--config", "gpt-medium"], chosen.stderr
    assert config.default_config("cpu") == "mlp"


def test_inside_a_job_site_sh_reads_whether_the_nodes_are_the_jobs_alone(tmp_path):
    """What `scontrol show job` / `show partition` print (the local cluster's, trimmed): the OverSubscribe values go
    into the environment every result records; outside a job, or where scontrol does not answer, nothing or unknown."""
    tool = tmp_path / "scontrol"
    tool.write_text('#!/bin/sh\ncase "$2 $3" in\n'
                    '  "job 42") echo "JobId=42 JobName=x"; echo "   Partition=gpu AllocNode:Sid=login:1";'
                    ' echo "   OverSubscribe=NO Contiguous=0 Licenses=(null)" ;;\n'
                    '  "partition gpu") echo "   PriorityJobFactor=1 ReqResv=NO OverSubscribe=FORCE:4" ;;\n'
                    '  *) exit 1 ;;\nesac\n')
    tool.chmod(0o755)
    show = 'source slurm_jobs/site.sh && env | grep _OVERSUBSCRIBE= | sort'
    path = f"{tmp_path}:{os.environ['PATH']}"
    assert bash(show, PATH=path, SLURM_JOB_ID="42").stdout.splitlines() == [
        "SCALELAB_JOB_OVERSUBSCRIBE=NO", "SCALELAB_PARTITION_OVERSUBSCRIBE=FORCE:4"]
    assert bash(show, PATH=path, SLURM_JOB_ID="43").stdout.splitlines() == [
        "SCALELAB_JOB_OVERSUBSCRIBE=unknown", "SCALELAB_PARTITION_OVERSUBSCRIBE=unknown"]
    assert bash(show, PATH=path).stdout == ""  # a login shell: no job to ask about


def test_the_auto_profiles_memory_floor_holds_a_checkpoint_of_the_largest_named_config():
    """32G a GPU: a rank's torch and CUDA libraries (about 4 GB on the host) plus, while the requeue checkpoint is
    written, the model and AdamW state of gpt-xl (fp32 weights, gradients and two moments: 16 bytes a parameter)."""
    from scalelab import config
    from scalelab.workloads.gpt import shape_of

    floor = bash("source slurm_jobs/site.sh && echo $SBATCH_MEM_PER_GPU").stdout.strip()
    assert floor == "32G"
    params = shape_of(config.for_accelerator(config.parse_config(["--config", "gpt-xl"]), "gpu")).total_params()
    assert 4e9 + 16 * params < 32 * 2**30


def test_an_amd_gpu_node_is_a_gpu_node_too(tmp_path):
    """No nvidia-smi, but rocm-smi (what `rocm-smi --showproductname` prints on an MI300X node, trimmed): the cpu
    profile refuses it as it refuses an NVIDIA node, and the job banner lists the GPUs by name."""
    tool = tmp_path / "rocm-smi"
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n"
                    "============================ ROCm System Management Interface ============================\n"
                    "GPU[0]\t\t: Card Series: \t\tAMD Instinct MI300X\nGPU[0]\t\t: Card Model: \t\t0x74a1\n"
                    "GPU[1]\t\t: Card Series: \t\tAMD Instinct MI300X\nGPU[1]\t\t: Card Model: \t\t0x74a1\n"
                    "================================== End of ROCm SMI Log ===================================\nEOF\n")
    tool.chmod(0o755)
    path = f"{tmp_path}:{os.environ['PATH']}"
    proc = bash("source slurm_jobs/site.sh && gpus_visible", PATH=path)
    assert proc.stdout.splitlines() == ["GPU 0: AMD Instinct MI300X", "GPU 1: AMD Instinct MI300X"]
    refused = bash("source slurm_jobs/site.sh", SCALELAB_PROFILE="cpu", PATH=path)
    assert refused.returncode == 2
    assert "profile cpu on a node with GPUs (GPU 0: AMD Instinct MI300X...)" in refused.stderr
    banner = bash("GPUS_PER_NODE=2 source slurm_jobs/job_common.sh && echo \"${WORKLOAD[*]}\"", PATH=path)
    assert banner.stdout.splitlines()[-3:] == ["GPU 0: AMD Instinct MI300X", "GPU 1: AMD Instinct MI300X",
                                               "--config gpt-small"], banner.stdout + banner.stderr


def test_site_sh_never_evaluates_what_a_variable_holds(tmp_path):
    """Issue 37's eighth cause: SCALELAB_SITE_SET='x[$(cmd)]' ran cmd when site.sh was sourced (bash evaluates an
    array subscript in ${!name}), and a `*` in it expanded to the file names of the current folder."""
    marker = tmp_path / "ran"
    proc = bash("source slurm_jobs/site.sh && echo sourced", SCALELAB_SITE_SET=f"x[$(date>{marker})] NCCL_DEBUG")
    assert proc.returncode == 0 and "sourced" in proc.stdout and not marker.exists(), proc.stderr
    # a `*`: in a folder holding a file named MY_SETTING, the old loop undid the user's own MY_SETTING
    (tmp_path / "MY_SETTING").write_text("")
    site = ROOT / "slurm_jobs" / "site.sh"
    proc = bash(f"source {site} && echo \"kept=${{MY_SETTING-unset}}\"", cwd=tmp_path, SCALELAB_SITE_SET="*",
                MY_SETTING="mine", _SCALELAB_SET_MY_SETTING="mine")
    assert proc.returncode == 0 and "kept=mine" in proc.stdout, proc.stderr
