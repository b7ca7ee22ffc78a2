"""The peak of a GPT step's tensor memory on CPU, for checking perfmodel.memory without a GPU (DDP's or one
device's step: step_peak; one FSDP2 rank's: fsdp_step).

torch keeps no allocator statistics on CPU, so LiveTensors counts every storage an op creates (in forward and in
backward, which the autograd engine runs under the same dispatch mode) from its creation until torch frees it (a
finalizer on the storage): the figure torch.cuda.max_memory_allocated would give, except a kernel's internal
scratch, which never becomes a tensor. Used by tests/unit/test_memory.py and benchmarks/memory_model.py; imports torch.
"""

import weakref

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensors(TorchDispatchMode):
    """Bytes of the storages ops have made and torch has not freed yet (`now`), and the most at any op's end
    (`peak`). Storages in `known` (the weights and what else existed before) are never counted, their views neither."""

    def __init__(self, known=()):
        super().__init__()
        self.known, self.live, self.now, self.peak = set(known), {}, 0, 0

    def _freed(self, key):
        self.now -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                key = (s.data_ptr(), id(s))
                if s.nbytes() and key not in self.live and s.data_ptr() not in self.known:
                    self.live[key] = s.nbytes()
                    self.now += s.nbytes()
                    weakref.finalize(s, self._freed, key)
        self.peak = max(self.peak, self.now)
        return out


def step_peak(shape, batch: int, bf16: bool, before_step=None) -> dict:
    """One training step of nets/transformer.py as a GPU rank takes it, measured: {"persistent": bytes of the weights,
    gradients and AdamW's moments, "step": the most bytes forward and backward held on top}.

    Gradients exist before the step, as DDP's buckets do (gradient_as_bucket_view); the moments come from one
    AdamW step first. The loss is GPTModule's, with CUDA autocast's fp32 cast of the logits made explicit (CPU
    autocast would keep them bf16), and the logits are dropped once the loss exists, as they are when
    training_step returns it. `before_step()` runs just before the measured step (the benchmark reads RSS there).
    """
    from scalelab.workloads.nets.transformer import GPT

    torch.manual_seed(0)
    model = GPT(shape)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    idx = torch.randint(0, shape.vocab_size, (batch, shape.seq_len))
    moments = [v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in [*params, *(p.grad for p in params), *moments]}
    if before_step:
        before_step()
    mode = LiveTensors(storages)
    with mode:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, shape.vocab_size).float(), idx.reshape(-1))
        del logits
        loss.backward()
    return {"persistent": sum(storages.values()), "step": mode.peak}


def fsdp_step(shape, batch: int, precision: str) -> dict:
    """One FSDP2 step of nets/transformer.py on this rank of the default (gloo) process group, measured: the bytes
    of this rank's shards ({"weights", "moments", "gradients"}: local tensors, AdamW's step counters included) and
    "step", the most bytes torch's CPU allocator held during forward and backward beyond what existed before.

    The model is sharded as a run shards it (GPTModule.shard); one step first makes AdamW's moments and FSDP's lazy
    state, then zero_grad(set_to_none=True) as the loop does. torch's profiler reports every allocation and free
    of the CPU allocator, storage resizes included (FSDP frees and re-allocates its unsharded parameters that
    way), as LiveTensors cannot see. gloo's own scratch (a copy of each all-gather's output, made inside the
    collective) is left out, and gloo works on copies of FSDP's buffers (_on_copies): NCCL writes into them. The
    loss is computed as step_peak's; under bf16 layer norm runs on fp32 inputs as CUDA autocast runs it (CPU
    autocast keeps the bf16 residual stream's dtype)."""
    from unittest import mock

    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter

    from scalelab.workloads.nets.transformer import GPTModule

    torch.manual_seed(0)
    module = GPTModule(shape, 1e-4).shard(init_device_mesh("cpu", (torch.distributed.get_world_size(),)), precision)
    opt, net = module.configure_optimizers(), module.model
    idx = torch.randint(0, shape.vocab_size, (batch, shape.seq_len))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"), \
                mock.patch.object(nn.LayerNorm, "forward", _fp32_layer_norm):
            logits = net(idx)
            loss = F.cross_entropy(logits.view(-1, shape.vocab_size).float(), idx.reshape(-1))
        del logits
        loss.backward()

    step()
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof, \
            mock.patch.object(DefaultAllGather, "__call__", _on_copies(DefaultAllGather.__call__)), \
            mock.patch.object(DefaultReduceScatter, "__call__", _on_copies(DefaultReduceScatter.__call__)):
        step()
    moments = [v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]
    return {"weights": _local_bytes(net.parameters()), "moments": _local_bytes(moments),
            "gradients": _local_bytes(p.grad for p in net.parameters() if p.grad is not None),
            "step": _allocated_peak(prof)}


def _on_copies(collective):
    """FSDP's collective (all-gather or reduce-scatter) run on copies of its buffers, made under a gloo: range (left
    out as gloo's scratch): gloo's worker thread lets go of the tensors it was given some time after the collective
    returns, so a buffer FSDP has dropped would live on for a while, or not, from run to run. FSDP's own buffers are
    then freed when FSDP drops them, as under NCCL."""
    def run(self, output_tensor, input_tensor, *args, **kwargs):
        with torch.profiler.record_function("gloo:copies"):
            output, given = torch.empty_like(output_tensor), input_tensor.clone()
        work = collective(self, output, given, *args, **kwargs)
        if work is not None:  # an async_op=True call: its result first
            work.wait()
        output_tensor.copy_(output)
        return work
    return run


def _fp32_layer_norm(self, x):
    return F.layer_norm(x.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps)


def _local_bytes(tensors) -> int:
    """Bytes of this rank's part of each tensor (a DTensor's local shard, else the tensor)."""
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def _allocated_peak(prof) -> int:
    """The most bytes live at once among the CPU allocations a profile saw, in order, leaving out those made inside
    a collective (c10d::*, and gloo:* on gloo's own thread) and their frees."""
    from torch._C._profiler import _EventType

    def walk(nodes, inside):
        for node in nodes:
            here = inside or node.name.startswith(("c10d::", "gloo:"))
            if node.tag == _EventType.Allocation:
                yield node, here
            yield from walk(node.children, here)

    events = sorted(walk(prof.profiler.kineto_results.experimental_event_tree(), False),
                    key=lambda e: e[0].start_time_ns)
    backend, now, peak = set(), 0, 0
    for node, in_collective in events:
        f = node.extra_fields
        if f.alloc_size > 0 and in_collective:
            backend.add(f.ptr)
        elif f.alloc_size < 0 and f.ptr in backend:
            backend.discard(f.ptr)
        else:
            # an address given out again was freed, even where gloo let go of it after the profile (no free seen)
            backend.discard(f.ptr)
            now += f.alloc_size
            peak = max(peak, now)
    return peak
