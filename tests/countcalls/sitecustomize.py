"""Loaded through PYTHONPATH by tests/scenarios/test_hidden_work.py: every rank writes, as it exits, the calls it
made in order.

Recorded: torch.distributed's collectives (with the element count of their tensor), host reads of a tensor
(`item`, `tolist`, `float(t)`, `int(t)`, `bool(t)`, `cpu()`, `numpy()`: a device sync on a GPU) made by scalelab's or
Lightning's own code, scalelab's device sync (`scalelab.train.comm.sync`: a no-op on CPU, a wait on a GPU) and any
call of `torch.cuda.synchronize`, and
`torch.optim.Optimizer.zero_grad`, which the loop calls once per optimizer step: the test cuts the calls into steps
there. Changes nothing else. Inert unless SCALELAB_COUNT_DIR is set.
"""

import importlib.abc
import importlib.util
import json
import os
import sys

COLLECTIVES = ("broadcast", "all_reduce", "barrier", "all_gather", "all_gather_object", "broadcast_object_list",
               "reduce", "gather", "scatter", "reduce_scatter", "all_gather_into_tensor", "reduce_scatter_tensor",
               "monitored_barrier", "gather_object", "scatter_object_list", "all_gather_single",
               "reduce_scatter_single")  # the last two: FSDP2's (scalelab's timed FSDP collectives call them)
READS = ("item", "tolist", "__float__", "__int__", "__bool__", "cpu", "numpy")
OWN = (os.sep + "scalelab" + os.sep, os.sep + "lightning" + os.sep)  # whose host reads count
_calls = []
_depth = [0]


def _numel(args, kwargs):
    t = args[0] if args else kwargs.get("tensor", kwargs.get("output"))  # reduce_scatter_single(output=, ...)
    try:
        return int(t.numel())
    except Exception:  # noqa: BLE001 - objects, lists, None
        return 0


def _wrap_collectives(mod):
    for name in COLLECTIVES:
        fn = getattr(mod, name, None)
        if fn is None:
            continue

        def make(fn, name):
            def counted(*args, **kwargs):
                _calls.append(["collective", name, _numel(args, kwargs)])
                return fn(*args, **kwargs)
            counted.__wrapped__ = fn
            return counted
        setattr(mod, name, make(fn, name))


def _wrap_reads(torch, optimizer):
    for name in READS:
        fn = getattr(torch.Tensor, name)

        def make(fn, name):
            def counted(self, *args, **kwargs):
                caller = sys._getframe(1).f_code.co_filename
                if _depth[0] == 0 and any(own in caller for own in OWN):
                    _calls.append(["read", name, 0])
                _depth[0] += 1
                try:
                    return fn(self, *args, **kwargs)
                finally:
                    _depth[0] -= 1
            return counted
        setattr(torch.Tensor, name, make(fn, name))
    zero_grad = optimizer.Optimizer.zero_grad

    def step_marker(self, *args, **kwargs):
        _calls.append(["step", "zero_grad", 0])
        return zero_grad(self, *args, **kwargs)
    optimizer.Optimizer.zero_grad = step_marker


def _wrap_cuda_sync(cuda):
    synchronize = cuda.synchronize

    def counted(*args, **kwargs):
        _calls.append(["sync", "torch.cuda.synchronize", 0])
        return synchronize(*args, **kwargs)
    cuda.synchronize = counted


def _wrap_sync(comm):
    sync = comm.sync

    def counted(device):
        _calls.append(["sync", "comm.sync", 0])
        return sync(device)
    comm.sync = counted


HOOKS = {"torch.distributed.distributed_c10d": _wrap_collectives, "scalelab.train.comm": _wrap_sync,
         "torch.cuda": _wrap_cuda_sync,
         "torch.optim.optimizer": lambda mod: _wrap_reads(sys.modules["torch"], mod)}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in HOOKS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            HOOKS[name](module)
        spec.loader.exec_module = exec_module
        return spec


def _dump():
    path = os.path.join(os.environ["SCALELAB_COUNT_DIR"], f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"argv": sys.argv, "env_rank": os.environ.get("RANK") or os.environ.get("LOCAL_RANK", "0"),
                   "calls": _calls}, f)
    os.replace(path + ".tmp", path)


if os.environ.get("SCALELAB_COUNT_DIR"):
    sys.meta_path.insert(0, _Finder())
    _exit = os._exit

    def _exit_after_dump(code):  # the entry scripts leave through os._exit (cli.fast_exit), past atexit
        _dump()
        _exit(code)
    os._exit = _exit_after_dump
    import atexit
    atexit.register(_dump)
