"""Every block of result.json and the two kinds of result: the declaration itself (its kinds of field: kinds.py)."""

from typing import Any, ClassVar, Literal, Optional, Union

from scalelab.record.kinds import (
    ANY_NUMBER,
    COUNT,
    MAX_RANKS,
    MAX_SPAN_STEPS,
    MAX_STEPS,
    NAMES,
    SCALAR,
    SCHEMA,
    SCHEMA_VERSION,
    SECONDS,
    VALUES,
    Block,
    described,
    integer,
    listed,
    real,
    steps,
    switch,
    text,
)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")  # bench/collectives.py's (a test holds them equal)

# --- the envelope's blocks ----------------------------------------------------------------------------------------

class Link(Block):
    """launch.link: the link between the nodes where it is known (launch/emulate.py's), else left out (or null)."""
    gbit: Optional[real("rate, each direction", "Gbit/s")] = None
    shaped_gbit: Optional[real("what tc gave, only under emulate --degrade_gbit", "Gbit/s")] = None
    emulated: Optional[switch("network namespaces on one machine, shaped with tc: not a real network")] = None
    latency_ms: Optional[real("one-way delay applied (left out or null: none, or it could not be)", "ms")] = None
    latency_requested_ms: Optional[real("what --latency_ms asked for", "ms")] = None


class Launch(Block):
    """launch: where and how big the run was (launch.cluster.Launch.record, for every writer)."""
    world_size: integer("every rank: devices per node x nodes", "ranks", 1, MAX_RANKS)
    num_nodes: integer("nodes", "nodes", 1, MAX_RANKS)
    devices: Optional[integer("devices per node, one process each (--devices)", "devices", 1, MAX_RANKS)] = None
    threads: Optional[integer("cores of one CPU device, the threads torch ran", "threads", 1, MAX_RANKS)] = None
    launcher: Optional[text("slurm, torchrun, submitit-local, local, ...")] = None
    accelerator: Optional[text("gpu or cpu")] = None
    backend: Optional[text("nccl or gloo; left out or null where no process group ran (one rank)")] = None
    device_names: Optional[listed(text("a device's name"), "the devices' names, each once")] = None
    hostnames: Optional[listed(text("a host"), "the hosts, each once")] = None
    oversubscribed: described(Union[text("why"), bool, None],
                              "why ranks shared cores (--oversubscribe, or seen after); false: they did not") = None
    link: Optional[Link] = None


class Slurm(Block):
    """slurm: the job the run was ({} outside SLURM; launch.slurm_env.job_record)."""
    cluster: Optional[text("SLURM_CLUSTER_NAME: a job id is unique on one cluster only")] = None
    job_id: described(Union[text("an id"), COUNT, None], "SLURM_JOB_ID") = None
    array_job_id: described(Union[text("an id"), COUNT, None], "SLURM_ARRAY_JOB_ID") = None
    array_task_id: described(Union[text("an index"), COUNT, None], "SLURM_ARRAY_TASK_ID") = None
    step_id: described(Union[text("an id"), COUNT, None], "SLURM_STEP_ID") = None
    restart_count: Optional[integer("how often SLURM had requeued the job (0: its first attempt)")] = None
    exclusive: Optional[switch("the nodes were the job's alone")] = None
    job_name: Optional[text("SLURM_JOB_NAME")] = None
    nodelist: Optional[text("SLURM_JOB_NODELIST")] = None
    partition: Optional[text("SLURM_JOB_PARTITION")] = None


class Workload(Block):
    """workload: what the run computed, the same at every scale of a scaling group but for the fields derived from
    the launch size (results.DERIVED_WORKLOAD_FIELDS); `options` holds its workload's own options that identify the
    computation (WorkloadSpec.identity, declared in the workload's module; appendix C lists scalelab's). A field no
    version declares (a writer's own) is still held to a value."""
    rest: ClassVar[Any] = VALUES
    model: text("the workload's name (mlp, gpt, ...)")
    options: Optional[described(dict[str, VALUES], "the workload's own options that identify the computation "
                                "(WorkloadSpec.identity), as the flags gave them")] = None
    describe: Optional[text("what it is, in words: its size and shape")] = None
    scaling: Optional[described(Literal["weak", "strong"], "weak: the global batch grows with the devices")] = None
    precision: Optional[text("Lightning's precision (32, bf16-mixed, ...)")] = None
    params: Optional[integer("parameters", "parameters")] = None
    trainable_params: Optional[integer("parameters the optimizer updates", "parameters")] = None
    tokens_per_sample: Optional[integer("tokens of one sample (a sequence)", "tokens")] = None
    batch_per_device: Optional[integer("samples per device per batch", "samples", 1, MAX_RANKS)] = None
    global_batch: Optional[integer("samples of one optimizer step over all ranks", "samples", 1)] = None
    accumulate_grad_batches: Optional[integer("batches per optimizer step", "batches", 1, MAX_RANKS)] = None
    comm_hook: Optional[text("DDP's gradient compression (none, fp16, bf16, powersgd:R)")] = None
    bucket_cap_mb: Optional[real("DDP's bucket size", "MB")] = None
    static_graph: Optional[switch("DDP's static_graph")] = None
    compile: Optional[switch("--compile asked (the fingerprint says whether compiled steps ran)")] = None
    warmup_steps: Optional[integer("optimizer steps left out of the timing", "steps")] = None
    max_steps: Optional[integer("optimizer steps asked for", "steps")] = None
    strategy: Optional[text("ddp (replicated) or fsdp (sharded)")] = None
    batch_size: Optional[integer("--batch_size: samples per device (weak) or in all (strong)", "samples")] = None
    learning_rate: Optional[real("the optimizer's learning rate", None, None)] = None
    comm_probe_every: Optional[integer("a no_sync probe step every this many steps (0: none)", "steps")] = None
    max_epochs: Optional[integer("epochs asked for (left out or null: max_steps ends the run)", "epochs")] = None
    num_samples: Optional[integer("the training set's size (left out or null: enough for max_steps)", "samples")] = None


class Comm(Block):
    """timing.comm: compute against the gradients' communication in a step, medians over the timed steps
    (measure.timing.comm_summary); any other field is a time, count or rate, never below 0."""
    rest: ClassVar[Any] = Optional[SECONDS]
    probe_steps: Optional[integer("steps run without the all-reduce (no_sync probes)", "steps")] = None
    compute_s: Optional[real("gradients ready in the probe steps: compute alone", "s")] = None
    synced_s: Optional[real("gradients ready in normal steps", "s")] = None
    waited_s: Optional[real("what a step waited for communication after backward's compute ended", "s")] = None
    waited_in_step: Optional[integer("1: waited_s read in the step itself; 0: against the probes", None, 0, 1)] = None
    slowed_s: Optional[real("how much later backward's compute ended beside the all-reduce", "s", None)] = None
    allreduce_s: Optional[real("how long the all-reduce was busy during backward", "s")] = None
    allreduce_alone_s: Optional[real("the same buckets all-reduced with nothing else running", "s")] = None
    hidden_s: Optional[real("all-reduce time hidden behind backward", "s")] = None
    hidden_fraction: Optional[real("hidden_s / allreduce_s", "fraction", 0, 1)] = None
    comm_share: Optional[real("waited_s / the median step", "fraction", 0, 1)] = None
    grad_bytes: Optional[real("bytes of gradient one step all-reduces", "bytes")] = None
    bucket_bytes: Optional[listed(real("bytes", "bytes"), "DDP's buckets", "bytes", MAX_STEPS)] = None
    wire_bytes: Optional[listed(real("bytes", "bytes"), "what --comm_hook sent for them", "bytes", MAX_STEPS)] = None
    buckets: Optional[real("all-reduce calls per step", "calls")] = None
    ddp_busbw_GBps: Optional[real("bus bandwidth DDP's all-reduce delivered", "GB/s")] = None
    collectives_s: Optional[real("FSDP: its all-gathers and reduce-scatters busy per step", "s")] = None
    collective_calls: Optional[real("FSDP: collective calls per step", "calls")] = None


class Devices(Block):
    """What a rank's device did over the timed steps (ranks[i].devices) and the run's figures from them
    (timing.devices): measure/devices.py; any other field is a number."""
    rest: ClassVar[Any] = Optional[ANY_NUMBER]
    source: Optional[text("what was sampled: nvml, rocm, cpu (the process's CPU time)")] = None
    note: Optional[text("why something was not sampled")] = None
    interval_s: Optional[real("the sampler's period", "s")] = None
    sampler_cpu_s: Optional[real("CPU the sampler's own thread used", "s")] = None
    window_s: Optional[real("the timed window the samples were read over", "s")] = None
    samples: Optional[integer("samples inside the window", "samples")] = None
    window_steps: Optional[integer("steps of the window, probes included (timing.devices)", "steps")] = None
    cpu_cores: Optional[integer("the rank's cores (CPU device)", "cores")] = None
    cpu_cores_busy: Optional[real("CPU seconds per wall second over the window (CPU device)", "cores")] = None
    memory_used_max_bytes: Optional[real("the most device memory NVML saw used", "bytes")] = None
    power_mean_W: Optional[real("mean power over the window", "W", None)] = None
    energy_counter_J: Optional[real("the driver's energy counter's growth", "J", None)] = None
    energy_power_J: Optional[real("the integral of the power samples", "J", None)] = None
    energy_method: Optional[text("how energy was read")] = None
    nvml_uuid: Optional[text("the GPU NVML sampled")] = None
    power_reading: Optional[described(Literal["instant", "average"], "what NVML's power read")] = None
    util_min: Optional[real("lowest device utilisation", "fraction", None)] = None
    util_mean: Optional[real("mean device utilisation", "fraction", None)] = None
    util_max: Optional[real("highest device utilisation", "fraction", None)] = None
    cores_busy_min: Optional[real("CPU seconds per wall second, lowest rank", "cores", None)] = None
    cores_busy_max: Optional[real("CPU seconds per wall second, highest rank", "cores", None)] = None
    energy_J: Optional[real("energy over the window", "J", None)] = None
    energy_per_step_J: Optional[real("energy per optimizer step", "J", None)] = None
    energy_per_1k_samples_J: Optional[real("energy per 1,000 samples", "J", None)] = None


class Timing(Block):
    """timing: the run's step time and throughput, from the steps after warm-up (measure/timing.py); any other
    field is a number."""
    rest: ClassVar[Any] = Optional[ANY_NUMBER]
    step_s: Optional[described(dict[str, Optional[SECONDS]], "median, mean, min, max, p90 of the step (s)")] = None
    epoch_times_s: Optional[listed(SECONDS, "each epoch's wall time", "s")] = None
    comm: Optional[Comm] = None
    had_cpu: Optional[listed(Optional[real("share", "fraction", 0, 1)],
                             "each rank's share of its core while ready to run", "fraction")] = None
    warmup_steps: Optional[integer("optimizer steps left out", "steps")] = None
    steps: Optional[integer("optimizer steps run", "steps")] = None
    timed_steps: Optional[integer("optimizer steps timed", "steps")] = None
    samples_per_step: Optional[integer("global batch of one optimizer step", "samples")] = None
    samples_per_s: Optional[real("throughput over all ranks", "samples/s")] = None
    tokens_per_s: Optional[real("throughput over all ranks", "tokens/s")] = None
    train_time_s: Optional[real("the timed steps' wall time", "s")] = None
    first_step_s: Optional[real("the first step, compile and warm-up included", "s", None)] = None
    whole_run_s: Optional[real("the process's whole run", "s", None)] = None
    flops_per_sample: Optional[real("FLOPs of one sample's forward and backward", "FLOP", None)] = None
    flops_from: Optional[text("how flops_per_sample was obtained: analytic (the workload's formula), counted "
                              "(torch's FLOP counter on one step) or not counted (why)")] = None
    tflops_per_device: Optional[real("achieved per device", "TFLOP/s", None)] = None
    peak_tflops: Optional[real("the device's datasheet peak at this precision", "TFLOP/s")] = None
    mfu: Optional[real("tflops_per_device / peak_tflops", "fraction")] = None
    peak_note: Optional[text("why there is no peak (and so no MFU)")] = None
    devices: Optional[Devices] = None


class Wire(Block):
    """One collective the step put on the wire, as the fingerprint saw it."""
    dtype: Optional[text("the dtype sent")] = None
    bytes: Optional[integer("bytes per step", "bytes")] = None
    calls: Optional[integer("calls per step", "calls")] = None
    op: Optional[text("the collective")] = None


class Fingerprint(Block):
    """fingerprint: what the timed steps ran, observed in them (train/observe.py; fingerprint.of_run)."""
    step: Optional[integer("the step observed", "steps")] = None
    matmul_dtypes: Optional[NAMES] = None
    attention: Optional[NAMES] = None
    param_dtypes: Optional[NAMES] = None
    grad_dtypes: Optional[NAMES] = None
    optimizer: Optional[text("the optimizer's class")] = None
    compiled_graphs: Optional[integer("graphs torch.compile made", "graphs")] = None
    compiled_steps: Optional[integer("timed steps that ran the compiled graph", "steps")] = None
    steps_after_warmup: Optional[integer("timed steps", "steps")] = None
    wire: Optional[described(dict[str, Optional[Wire]], "collective -> what it sent")] = None
    same_on_ranks: Optional[switch("every rank ran the same step")] = None


class Rank(Block):
    """ranks[i]: one rank's own record: where it ran, what its step clock and probes measured, what its step ran
    (train/payload.py RunContext.rank_record); any other field is a value or a list of values."""
    rest: ClassVar[Any] = VALUES
    rank: Optional[integer("global rank", None, 0, MAX_RANKS)] = None
    local_rank: Optional[COUNT] = None
    node_rank: Optional[COUNT] = None
    host: Optional[text("hostname")] = None
    device: Optional[text("torch's device (cpu, cuda:0)")] = None
    device_name: Optional[text("the device's model name")] = None
    cpu_affinity: Optional[listed(integer("a core"), "the cores the rank ran on", None, 2**20)] = None
    threads: Optional[integer("torch's threads", "threads")] = None
    machine: Optional[text("the machine's boot id: ranks of emulated nodes on one machine share its cores", 64)] = None
    host_cores: Optional[integer("the host's cores (os.cpu_count)", "cores")] = None
    load_avg: Optional[real("the host's 1-minute load at the end", "processes")] = None
    gpu_uuid: Optional[text("the physical GPU (null: a CPU device)")] = None
    visible_gpus: Optional[text("CUDA_VISIBLE_DEVICES")] = None
    backend: Optional[text("the process group's backend as it ran (null: one rank, no group)")] = None
    cpu_pin: Optional[text("a GPU rank's cores: numa, split, launcher, off or refused (launch/cores.py)")] = None
    numa_node: Optional[integer("its GPU's NUMA node")] = None
    near_gpu: Optional[switch("the launcher's cores are its GPU's NUMA node's")] = None
    peak_memory_bytes: Optional[real("the most the caching allocator held for tensors (GPU)", "bytes")] = None
    max_rss_bytes: Optional[real("the process's peak resident memory, host", "bytes")] = None
    # a wall clock's reading: any number (a failing run's record must not be lost over a clock set wrong)
    process_start: Optional[real("when the process started, wall clock (Unix time)", "s", None)] = None
    first_step_end: Optional[real("when its first step ended, wall clock (Unix time)", "s", None)] = None
    loop_wall_s: Optional[real("the loop's start to end, each after a device sync", "s")] = None
    grad_bytes: Optional[real("bytes of gradient a step all-reduces", "bytes")] = None
    devices: Optional[Devices] = None
    step_times_s: Optional[steps(SECONDS, "each batch's step, wall clock", "s")] = None
    grads_ready_times_s: Optional[steps(SECONDS, "each batch: its gradients ready", "s")] = None
    allreduce_times_s: Optional[steps(SECONDS, "each batch: its all-reduce busy", "s")] = None
    allreduce_alone_times_s: Optional[steps(SECONDS, "each probe: the buckets all-reduced alone", "s")] = None
    epoch_times_s: Optional[steps(SECONDS, "each epoch", "s")] = None
    forward_times_s: Optional[steps(SECONDS, "each batch's forward", "s")] = None
    backward_times_s: Optional[steps(SECONDS, "each batch's backward", "s")] = None
    losses: Optional[steps(Optional[ANY_NUMBER], "each batch's loss (null: not finite)")] = None
    probe_steps: Optional[steps(COUNT, "the optimizer steps that were probes")] = None
    short_steps: Optional[steps(COUNT, "steps cut short")] = None
    step_ends: Optional[steps(COUNT, "batches that ended an optimizer step (under accumulation)")] = None
    after_read_steps: Optional[steps(COUNT, "steps that paid a read of the clock")] = None
    buckets: Optional[steps(COUNT, "each batch's all-reduce calls", "calls")] = None
    bucket_bytes: Optional[steps(real("bytes", "bytes"), "DDP's buckets", "bytes")] = None
    wire_bytes: Optional[steps(real("bytes", "bytes"), "what --comm_hook sent for them", "bytes")] = None
    probe_cpu_s: Optional[steps(listed(ANY_NUMBER, "cpu, wall", "s", length=2),
                                "each probe: CPU and wall seconds")] = None
    comm_spans_s: Optional[listed(listed(listed(ANY_NUMBER, "start, end", "s", length=2), "a batch's collectives",
                                         limit=10**4), "the first steps' collectives (the timeline)",
                                  limit=MAX_SPAN_STEPS)] = None
    fingerprint: Optional[described(dict[str, Any], "this rank's observation (fingerprint.of_run compares them)")] \
        = None


# --- the kinds of result ------------------------------------------------------------------------------------------

class Result(Block, kw_only=True, tag_field="kind"):
    """What every result holds: the envelope."""
    schema: described(Literal["scalelab.result"], "what the file is") = SCHEMA
    schema_version: described(Literal[4], "this declaration's version (older files are upgraded to it)") = \
        SCHEMA_VERSION
    run_id: text("the run's folder name: unique (results.new_run_id)", 255, 1)
    created: Optional[text("when it was written, ISO 8601 UTC", 64)] = None
    status: described(Literal["completed", "failed", "timeout", "preempted"], "how the run ended")
    error: Optional[text("why a run did not complete")] = None
    provisional: Optional[switch("rank 0's record at the start: replaced by every way a run ends")] = None
    run_name: Optional[text("--run_name")] = None
    launch: Launch
    slurm: Optional[Slurm] = None
    versions: Optional[described(Any, "python, torch, cuda, nccl, lightning, submitit, scalelab; not read")] = None
    environment: Optional[described(Any, "the launch's environment variables, secrets redacted; not read")] = None
    config: Optional[described(Any, "the run's flags (RunConfig.to_dict / the benchmark's); not read")] = None


class Training(Result, kw_only=True, tag="training"):
    """A training run's result (train/payload.py build_payload)."""
    workload: Workload
    timing: Timing
    ranks: Optional[list[Rank]] = None
    fingerprint: Optional[Fingerprint] = None
    metrics: Optional[described(dict[str, Optional[ANY_NUMBER]], "train_loss, val_loss, val_acc")] = None
    memory: Optional[described(dict[str, Optional[real("bytes", "bytes")]],
                               "estimate_bytes, peak_allocated_bytes")] = None


class Row(Block):
    """One size of the all-reduce benchmark (nccl-tests' columns)."""
    bytes: real("message size", "bytes", 1, 2**50)
    time_s: real("one collective, median of the iterations", "s", above=True)
    busbw_GBps: real("bus bandwidth", "GB/s")
    count: Optional[real("elements", "elements")] = None
    dtype: Optional[text("element type")] = None
    algbw_GBps: Optional[real("algorithm bandwidth", "GB/s")] = None
    single_op_s: Optional[real("one op timed alone", "s", above=True)] = None
    wrong: Optional[integer("elements that came back wrong (--check)")] = None


class BenchConfig(Block):
    """The benchmark's flags (bench/allreduce.py); dtype and collective are read."""
    dtype: Optional[text("the element type benchmarked")] = None
    collective: Optional[described(Literal[COLLECTIVES], "what it timed (bench/collectives.py's names); left out or "
                                   "null: all_reduce, as before --collective")] = None


class Allreduce(Result, kw_only=True, tag="allreduce"):
    """An all-reduce (or another collective's) benchmark result (bench/allreduce.py)."""
    rows: list[Row]
    summary: Optional[described(dict[str, Optional[real("GB/s", "GB/s")]], "peak/avg/large-message busbw")] = None
    source: Optional[described(dict[str, SCALAR], "an imported nccl-tests log's origin")] = None
    config: Optional[BenchConfig] = None


KINDS = {"training": Training, "allreduce": Allreduce}
ANY = Union[Training, Allreduce]


