"""FSDP's collectives in the all-reduce's terms: what a sharded step puts on the wire, and what that costs.

A sharded step (FSDP2, `fully_shard` per transformer block and the root) all-gathers each unit's parameters in
forward, again in backward for every unit but the root (fully_shard keeps the root's gathered after forward), and
reduce-scatters each unit's gradients. In the ring model an all-gather of S bytes (the gathered output) and a
reduce-scatter of S bytes (the scattered input) each cost (n−1)·α + (n−1)/n · S/β: half an all-reduce of S
(2(n−1)·α + 2(n−1)/n · S/β, perfmodel.network). So a step's all-gathers and reduce-scatters cost what all-reduces
of half their bytes in half their calls cost, and the same ring fit, the same exposed factor and the same forecast
read both strategies: `equivalent` turns what a step ran into those all-reduce terms, `expected` says what the
model's units should put there. In fp32, FSDP's wire is 1.5× DDP's (two gathers of the weights and one scatter
of the gradients, against one all-reduce of the gradients); under bf16-mixed the gathers move bf16 and the
reduce-scatter fp32 (MixedPrecisionPolicy's reduce_dtype): 1.0×.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

# The c10d ops a step's dispatch shows (train/observe.py), by collective: what their first argument (the bytes
# the fingerprint counts) is. The scattered output of a reduce-scatter is one rank's part: its input is n of them.
GATHERS = ("_allgather_base_", "allgather_", "allgather_into_tensor_coalesced_")
SCATTERS = ("_reduce_scatter_base_", "reduce_scatter_", "reduce_scatter_tensor_coalesced_")
REDUCES = ("allreduce_", "allreduce_coalesced_")
# DDP broadcasts its bucket order in an early step (a few hundred bytes): counted as an all-gather of its size
# (nccl-tests' bus factor 1 against (n−1)/n: the same within a factor 2 on a message that small)
BROADCASTS = ("broadcast_",)
HALF = 0.5  # an all-gather or a reduce-scatter of S: (n−1)/n of S through each link, an all-reduce 2(n−1)/n


class Wire(NamedTuple):
    """A step's collectives in nccl-tests' sizes: all-gathers (gathered output), reduce-scatters (scattered
    input), all-reduces (the buffer); bytes and calls of each."""
    gather_bytes: float = 0.0
    gather_calls: int = 0
    scatter_bytes: float = 0.0
    scatter_calls: int = 0
    reduce_bytes: float = 0.0
    reduce_calls: int = 0

    def allreduce_terms(self) -> tuple:
        """(bytes, calls) of the all-reduces that cost what this wire costs in the ring model: each all-gather and
        reduce-scatter half of an all-reduce of its size, in bytes and in latency."""
        terms = cost_terms(self)
        return sum(w * nbytes for _, nbytes, _, w in terms), sum(w * calls for _, _, calls, w in terms)


def cost_terms(wire: Wire) -> list:
    """[(collective, bytes, calls, weight)] of the collectives a wire holds: its cost is the sum of weight × an
    all-reduce of those bytes in those calls (weight ½ for an all-gather or a reduce-scatter: HALF), or of weight ×
    what a benchmark of that collective measured, read as an all-reduce's time (its busbw over 2(n−1)/n)."""
    parts = (("all_gather", wire.gather_bytes, wire.gather_calls, HALF),
             ("reduce_scatter", wire.scatter_bytes, wire.scatter_calls, HALF),
             ("all_reduce", wire.reduce_bytes, wire.reduce_calls, 1.0))
    return [part for part in parts if part[1] > 0 and part[2] > 0]


def observed(wire: dict, world_size: int) -> Optional[Wire]:
    """The fingerprint's `wire` ({c10d op: {"bytes", "calls"}}, rank 0's step) in nccl-tests' sizes; None where
    the step ran no collective (one device) or one this model does not know."""
    if not isinstance(wire, dict) or not wire:
        return None
    sums = {"gather": [0.0, 0], "scatter": [0.0, 0], "reduce": [0.0, 0]}
    for op, entry in wire.items():
        kind = ("gather" if op in GATHERS + BROADCASTS else "scatter" if op in SCATTERS else "reduce" if op in REDUCES
                else None)
        if kind is None or not isinstance(entry, dict):
            return None
        size = float(entry.get("bytes") or 0) * (world_size if kind == "scatter" else 1)
        sums[kind][0] += size
        sums[kind][1] += int(entry.get("calls") or 0)
    return Wire(*sums["gather"], *sums["scatter"], *sums["reduce"])


def expected(*, unit_params: Sequence[int], root_params: int, param_bytes: int, reduce_bytes: int = 4) -> Wire:
    """What a sharded step of these units puts on the wire: unit_params, the parameters of each unit that is
    not the root (a transformer block); root_params, the root's own (embeddings, final norm); param_bytes, the
    gathered dtype's size (2 under bf16-mixed, 4 in fp32); reduce_bytes, the gradients' reduce dtype (fp32)."""
    units = len(unit_params) + (1 if root_params else 0)
    total = sum(unit_params) + root_params
    gathered = (2 * sum(unit_params) + root_params) * param_bytes  # the root is gathered once, in forward
    return Wire(gather_bytes=float(gathered), gather_calls=units + len(unit_params),
                scatter_bytes=float(total * reduce_bytes), scatter_calls=units)


def for_shape(shape, *, param_bytes: int, reduce_bytes: int = 4) -> Wire:
    """`expected` for a scalelab GPT shape (workloads/presets.py): each of its n_layer blocks a unit, the root
    holding the embeddings and the final norm, as GPTModule.shard makes them."""
    return expected(unit_params=[shape.block_params()] * shape.n_layer, root_params=shape.root_params(),
                    param_bytes=param_bytes, reduce_bytes=reduce_bytes)
