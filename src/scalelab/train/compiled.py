"""--compile as a run applies it, with a count of every run of a compiled graph: a step that ran none ran eager.

`apply` compiles the workload's `training_step` (any LightningModule's: the step the loop calls, its networks and
its loss traced together). The module itself, its class and its parameters' names stay as they are, so DDP, FSDP
and a requeue checkpoint see what an eager run has. (`nn.Module.compile` on a network would not do: Dynamo skips
the frames of torch's own modules, and an `nn.Sequential` compiled so runs eager.) Under DDP, Fabric sends the step
through DDP's forward, and Dynamo splits its graph at DDP's buckets.

The backend is torch's Inductor wrapped in `Counted`: each graph Inductor compiles is returned inside a function that
adds one to `runs` whenever the graph runs. The step observer reads `runs()` around every batch (train/observe.py),
so a result says how many of its steps after warm-up ran a compiled graph: observed, not inferred from a count of
graphs made during warm-up. (Dynamo falls back to eager without an error in several ways: a dispatch mode on the
stack, a recompile limit, a graph it cannot trace; each shows here as steps that ran no compiled graph.)

Counting costs one Python call per graph run, paid alike at every world size.
"""

from __future__ import annotations


class Counted:
    """A torch.compile backend: `inner` (Inductor unless given) compiles each graph; every run of what it returned
    is counted in `runs`, every graph in `graphs`."""

    def __init__(self, inner=None):
        self.inner, self.runs, self.graphs = inner, 0, 0

    def __call__(self, gm, example_inputs):
        if self.inner is None:
            import torch._dynamo

            self.inner = torch._dynamo.lookup_backend("inductor")
        compiled = self.inner(gm, example_inputs)
        self.graphs += 1

        def run(*args):
            self.runs += 1
            return compiled(*args)

        return run


BACKEND = Counted()  # the process's: every --compile of a run goes through it


def runs() -> int:
    """Runs of a compiled graph in this process so far (0 where nothing was compiled)."""
    return BACKEND.runs


def apply(module) -> None:
    """`module.training_step`, compiled through BACKEND (on the instance: Fabric's wrappers find it there)."""
    import torch

    module.training_step = torch.compile(module.training_step, backend=BACKEND)
