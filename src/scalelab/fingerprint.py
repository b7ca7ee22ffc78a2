"""A run's fingerprint: what its step actually ran, observed inside it (train/observe.py), and how two runs compare.

Speedup measures scaling only where the runs it divides ran the same job. The configuration says what was asked
(--precision bf16-mixed); the fingerprint says what the step did, so a 1-device baseline whose matmuls ran in
float32 beside N-device runs in bfloat16 shows as two jobs, not as 135 % efficiency. The report compares every run
of a scaling group with its baseline's (report/plausible.py), the self-check the 1-GPU run with the N-GPU one.

result.json's `fingerprint` (rank 0's observation; `same_on_ranks`: every rank saw the same):
  matmul_dtypes    dtypes the forward's matmuls produced: ["bfloat16"] under bf16 autocast, ["float32"] without
  attention        the attention kernels torch's scaled_dot_product_attention chose (per device, dtype, shape)
  param_dtypes     dtypes of the parameters the optimizer updates
  grad_dtypes      dtypes of their gradients as the optimizer got them
  optimizer        "fused", "foreach" or "for-loop": torch's three update paths, by the kernels that ran
  compiled_graphs  graphs torch.compile made (0: eager). DDP's optimizer splits a compiled graph at its buckets,
                   so only compiled or not is compared
  compiled_steps   of the steps after warm-up (steps_after_warmup), those that ran a compiled graph, counted
                   around each step (train/compiled.py): compared as "on" (all), "off" (none) or "M of N steps";
                   a run that asked --compile and ran eager is another job (`asked_differences`)
  wire             per collective of the step: dtype, bytes, calls and, for a reduction, its op ("SUM": what
                   the benchmark measures, train/comm.py's REDUCE_OP) (DDP's gradient all-reduce); {} at one device:
                   recorded, not compared (communication is what differs between world sizes)
Torch-free: the report and the self-check read it.
"""

from typing import Optional

from scalelab import record

COMPARED = ("matmul_dtypes", "attention", "param_dtypes", "grad_dtypes", "optimizer", "compiled")
WORDS = {"matmul_dtypes": "matmuls", "attention": "attention", "param_dtypes": "parameters",
         "grad_dtypes": "gradients", "optimizer": "optimizer", "compiled": "torch.compile"}


def of_run(per_rank: list) -> Optional[record.Fingerprint]:
    """The run's fingerprint block from its ranks' records: rank 0's, and whether the others saw the same (compared
    fields); None where rank 0 observed nothing (a run that ended before its warm-up did). A field the observer
    (train/observe.py) adds without declaring it fails here, at the end of the first run that records it."""
    prints = [r.get("fingerprint") for r in per_rank]
    if not prints or not prints[0]:
        return None
    same = all(p and comparable(p) == comparable(prints[0]) for p in prints)
    return record.Fingerprint(**prints[0], same_on_ranks=same)


def comparable(fp) -> Optional[dict]:
    """The fields two runs of one job share, whatever their world size (None: no fingerprint recorded)."""
    if not isinstance(fp, dict):
        return None
    out = {k: fp.get(k) for k in COMPARED}  # "compiled" is no recorded field: set from what ran, below
    out["compiled"] = ran_compiled(fp)
    return out


def ran_compiled(fp: dict):
    """True where every step after warm-up ran a compiled graph, False where none did, "M of N steps" between;
    a result from before the steps were counted: whether Dynamo made a graph (None: not known)."""
    ran, of = fp.get("compiled_steps"), fp.get("steps_after_warmup")
    if isinstance(ran, int) and isinstance(of, int) and of > 0:
        return True if ran == of else False if ran == 0 else f"{ran} of {of} steps"
    graphs = fp.get("compiled_graphs")
    return None if graphs is None else graphs > 0


def asked_differences(fp, compile_asked) -> list:
    """What a run ran differently from what its own flags asked, in words: --compile whose steps after warm-up ran
    no compiled graph (Dynamo fell back to eager: the run measured another job); [] where it agrees or is unknown."""
    if compile_asked is not True or not isinstance(fp, dict):
        return []
    ran = ran_compiled(fp)
    if ran is True or ran is None:
        return []
    of = fp.get("steps_after_warmup")
    if not isinstance(of, int) or of <= 0:  # an older result: Dynamo's graph count alone
        return ["torch.compile asked, no graph compiled"]
    return [f"torch.compile asked, {of - fp['compiled_steps']} of {of} steps after warm-up ran eager"]


def differences(base, other) -> list:
    """What `other` ran differently from `base`, in words ("matmuls bfloat16, baseline float32"); [] where they
    agree or either was not recorded."""
    a, b = comparable(base), comparable(other)
    if a is None or b is None:
        return []
    return [f"{WORDS[k]} {_say(b[k])}, baseline {_say(a[k])}" for k in COMPARED if a[k] != b[k]]


def _say(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return "+".join(value) if value else "none"
    return "unknown" if value is None else str(value)
