"""What one step actually ran, observed inside it: the run's fingerprint (scalelab/fingerprint.py names the fields and
compares runs by them).

One step is observed, the last of the warm-up (timed like the others, left out of every figure): a TorchDispatchMode,
torch's own hook below autocast and autograd, sees every aten op of its forward and backward as it runs, with the
dtype it really produced, and the optimizer's step hooks see the gradients and the kernels of the update. Nothing is
read from the configuration: a step that ran without autocast shows float32 matmuls whatever --precision says.
The ops seen cost a Python call each in that one step (tens of ms for xl); every other step runs without the mode.

Under --compile the mode leaves compiled regions alone (`ignore_compile_internals`): Dynamo compiles and runs its
graphs as in any other step, and the mode sees what a compiled graph dispatches as it runs (Inductor's extern
kernels: the matmuls, attention, the collectives); a matmul fused into generated code is not seen. A mode that
did not say so would make Dynamo refuse the model's frame while it is active, and that refusal stays with the
code object: every later step would run eager (torch 2.13, `convert_frame.py`: "non-infra torch dispatch mode
present"). Whether each step after warm-up ran a compiled graph is counted around every step
(train/compiled.py's count of graph runs), never inferred from the graphs Dynamo made.
"""

from __future__ import annotations

import contextlib
import sys

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from scalelab.train import compiled

MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv", "_scaled_mm"})


class StepObserver:
    """Observes step `at` (an optimizer step index, as the loop counts them), once; `record()` says what it saw."""

    def __init__(self, at: int):
        self.at = at
        self.done = False
        self.matmul_dtypes, self.attention, self.optimizer_ops = set(), set(), set()
        self.param_dtypes, self.grad_dtypes = set(), set()
        self.wire = {}  # collective name -> {"dtype", "bytes", "calls", "op"}
        self.optimizer_stepped = False
        self._in_optimizer = False
        self._hooks = []
        self.graph_runs = {}  # each optimizer step after `at` (warm-up's last) -> its batches' compiled-graph runs

    @contextlib.contextmanager
    def watching(self, step: int, optimizer):
        """Around a batch's forward and backward: the ops of step `at` are seen, and its optimizer step through
        `optimizer`'s step hooks (torch's, removed after it); of every step after `at`, the runs of compiled
        graphs are counted (an integer read before and after: the same at every world size)."""
        before = compiled.runs()
        if step != self.at or self.done:
            yield
        else:
            if not self._hooks:
                self._hooks = [optimizer.register_step_pre_hook(self._before_update),
                               optimizer.register_step_post_hook(self._after_update)]
            with _Ops(self):
                yield
        if self.at is not None and step > self.at:
            self.graph_runs[step] = self.graph_runs.get(step, 0) + compiled.runs() - before

    def _before_update(self, optimizer, args, kwargs):
        for group in optimizer.param_groups:
            for p in group["params"]:
                self.param_dtypes.add(_name(p.dtype))
                if p.grad is not None:
                    self.grad_dtypes.add(_name(p.grad.dtype))
        self._in_optimizer = True
        self._mode = _Ops(self)
        self._mode.__enter__()

    def _after_update(self, optimizer, args, kwargs):
        self._mode.__exit__(None, None, None)
        self._in_optimizer, self.optimizer_stepped, self.done = False, True, True
        for hook in self._hooks:
            hook.remove()

    def op(self, func, args, out) -> None:
        """One aten op as it ran (from _Ops)."""
        name = func.__name__.split(".")[0]
        if func.namespace == "c10d":  # a collective: what it put on the wire (its first argument: the tensors)
            tensors = [t for t in _flat(args[0] if args else ()) if isinstance(t, torch.Tensor)]
            entry = self.wire.setdefault(name, {"dtype": None, "bytes": 0, "calls": 0})
            entry["calls"] += 1
            entry["bytes"] += sum(t.numel() * t.element_size() for t in tensors)
            seen = set(filter(None, (entry["dtype"] or "").split(","))) | {_name(t.dtype) for t in tensors}
            entry["dtype"] = ",".join(sorted(seen)) or None
            ops = set(filter(None, (entry.get("op") or "").split(","))) | set(filter(None, map(reduce_op, args)))
            if ops:  # a reduction's op as the collective got it (an all-gather has none)
                entry["op"] = ",".join(sorted(ops))
        elif self._in_optimizer:
            self.optimizer_ops.add(name)
        elif name in MATMULS and _in_forward() and isinstance(out, torch.Tensor):
            self.matmul_dtypes.add(_name(out.dtype))  # the forward's, compiled or not
        elif name.startswith("_scaled_dot_product") and not name.endswith("_backward"):
            self.attention.add(name)

    def optimizer_kind(self):
        """'fused' (one kernel for every parameter), 'foreach' (a few per parameter group) or 'for-loop' (a few
        per parameter): torch's three AdamW/Adam paths, told apart by the kernels the update ran."""
        if not self.optimizer_stepped:
            return None
        if any(op.startswith("_fused_") for op in self.optimizer_ops):
            return "fused"
        if any(op.startswith("_foreach_") for op in self.optimizer_ops):
            return "foreach"
        return "for-loop"

    def record(self) -> dict | None:
        """The fingerprint of this rank (None where the step was never reached: a run that failed before it)."""
        if not self.done and not self.matmul_dtypes:
            return None
        after = self.graph_runs.values()
        return {"step": self.at, "matmul_dtypes": sorted(self.matmul_dtypes), "attention": sorted(self.attention),
                "param_dtypes": sorted(self.param_dtypes), "grad_dtypes": sorted(self.grad_dtypes),
                "optimizer": self.optimizer_kind(), "compiled_graphs": compiled_graphs(),
                "compiled_steps": sum(runs > 0 for runs in after), "steps_after_warmup": len(after),
                "wire": self.wire}


def _in_forward() -> bool:
    """Whether an op runs in a forward: outside the autograd engine's backward. (Grad mode cannot tell: a compiled
    graph's forward runs with it off, inside its autograd.Function.)"""
    return torch._C._current_autograd_node() is None


class _Ops(TorchDispatchMode):
    def __init__(self, seen: StepObserver):
        super().__init__()
        self.seen = seen

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Leave Dynamo and Inductor alone: compiled graphs stay compiled under the mode (the module's docstring)."""
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.seen.op(func, args, out)
        return out


def compiled_graphs():
    """Graphs torch.compile made in this process (0 where Dynamo was never loaded: nothing compiled)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    try:
        return int(utils.counters["stats"]["unique_graphs"])
    except (AttributeError, KeyError, TypeError):  # a torch that counts otherwise: unknown, not 0
        return None


def reduce_op(arg):
    """The name of a reduction ("SUM", "AVG", "PREMUL_SUM") where `arg` is the ReduceOp a c10d op received (torch
    boxes it in a TorchScript object), else None."""
    if not isinstance(arg, torch.ScriptObject) or not arg._type().name().endswith("ReduceOp"):
        return None
    try:
        value = int(arg._get_method("op")())
    except (RuntimeError, TypeError, ValueError):  # a torch that boxes it otherwise: not known
        return None
    names = {int(v): k for k, v in dist.ReduceOp.RedOpType.__members__.items()}
    return names.get(value, str(value))


def _flat(value):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat(v)
    else:
        yield value


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")
