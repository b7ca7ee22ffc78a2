"""A workload's training FLOPs per sample counted by torch, where it gives no analytic figure.

torch.utils.flop_counter counts every matmul, convolution and attention of one training_step and its backward
(model FLOPs: elementwise work is not counted, as the analytic 6N convention does not count it). It runs once per
rank before the loop, on a copy of the module on the meta device (its weights never copied): no compute, nothing of
the run's module, optimizer, random state or compiled graphs touched (a dispatch mode around a compiled step would
poison it; the copy is never compiled). Counted on the GPT it gives its analytic figure to the FLOP
(tests/unit/test_flopcount.py)."""

import copy
from typing import Optional, Tuple

COUNTED = "counted (torch.utils.flop_counter, one step on a meta copy)"


class NoLoss(Exception):
    """A training_step whose output the loop cannot backpropagate (loss_problem says what it is)."""


def count(module, dataset, batch: int) -> Tuple[Optional[float], str]:
    """(training FLOPs of one sample, how they were obtained): one batch of `dataset`'s first samples through a
    meta copy of `module`'s training_step and backward; (None, why not) where a step cannot run on meta tensors.
    A step that runs but returns no loss the loop can backpropagate raises NoLoss, saying what it returned."""
    import torch
    from torch.utils._pytree import tree_map_only
    from torch.utils.data import DataLoader
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.random.fork_rng(devices=[]):  # a dataset or a copy that draws numbers leaves the run's unchanged
            shadow = copy.deepcopy(module, _meta_memo(module))
            sample = next(iter(DataLoader(dataset, batch_size=batch)))
            sample = tree_map_only(torch.Tensor, lambda t: t.to("meta"), sample)  # a tuple, a dict, a tensor: kept
            with FlopCounterMode(display=False) as counter:
                loss = shadow.training_step(sample, 0)
                problem = loss_problem(loss)
                if problem:
                    raise NoLoss(problem)
                loss.backward()
        return counter.get_total_flops() / batch, COUNTED
    except NoLoss:
        raise
    except Exception as exc:  # noqa: BLE001 - a step that meta tensors cannot run: no FLOPs, and why, not a failure
        return None, f"not counted (a meta step failed: {type(exc).__name__})"


def loss_problem(loss) -> Optional[str]:
    """What is wrong with a training_step's output as the loop's loss (it calls backward on it), or None: a
    floating-point tensor of one element that depends on a parameter."""
    import torch

    if not isinstance(loss, torch.Tensor):
        return f"a {type(loss).__name__}, not a tensor"
    if loss.numel() != 1:
        return f"a tensor of shape {tuple(loss.shape)}, not one value (reduce it: .mean() or .sum())"
    if not loss.requires_grad:
        return "a tensor that needs no gradient (computed without the module's parameters, detached or under no_grad)"
    return None


def _meta_memo(module) -> dict:
    """deepcopy's memo that gives each parameter and buffer a meta twin: the copy holds no copy of a weight (a model
    of billions of parameters on each rank of a node would otherwise be copied in host memory first); a tied weight
    stays one."""
    import torch

    memo = {id(p): torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
            for p in module.parameters()}
    memo.update((id(b), torch.empty_like(b, device="meta")) for b in module.buffers())
    return memo

