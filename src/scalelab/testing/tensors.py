"""The peak of a GPT step's tensor memory on CPU, for checking perfmodel.memory without a GPU.

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
