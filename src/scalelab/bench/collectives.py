"""One small struct per collective, as nccl-tests keeps one per `*_perf` binary: its names, bus factor, buffers,
torch call and correctness check. The engine (bench/allreduce.py) times whichever it is given.

Sizes are nccl-tests': a row's "size" is the all-reduced buffer, the gathered output of an all-gather, the
input of a reduce-scatter (count elements per rank, size = count · n · element); "count" is the elements of one
rank's part (all_gather.cu / reduce_scatter.cu: paramcount). busbw = algbw · bus factor
(perfmodel.network.bus_factor): 2(n−1)/n for all-reduce, (n−1)/n for the other two.

The checks use exact small integers (bench/pattern.py): every expected value is at most 7, or a sum of
them at most 7, exact in float16 and bfloat16 in any reduction order.
"""

from dataclasses import dataclass

from scalelab.perfmodel.network import bus_factor, message_sizes

PATTERN_PERIOD = 7  # all-gather: rank r's element i is 1 + (r + i) % 7, so a rank's part differs from its neighbours'


@dataclass(frozen=True)
class Collective:
    name: str  # nccl-tests' name, and --collective's value
    perf: str  # the nccl-tests binary that measures it
    redop: str  # nccl-tests' redop column
    split: bool  # the size is n parts of count elements (all-gather, reduce-scatter), not one buffer

    def bus_factor(self, n: int) -> float:
        return bus_factor(n, self.name)

    def sizes(self, min_bytes: int, max_bytes: int, factor: int, itemsize: int, world: int) -> list:
        """(bytes, count) per row: bytes as nccl-tests' size column, count the elements of one rank's part.

        A split collective's size rounds down to n whole parts (at least one element each), as nccl-tests'
        count / nranks does; sizes that round alike are measured once."""
        parts = world if self.split else 1
        return message_sizes(min_bytes, max_bytes, factor, itemsize * parts)

    def buffer_counts(self, count: int, world: int) -> tuple:
        """(input elements, output elements) of one rank; all-reduce works in place (output 0: none)."""
        if self.name == "all_gather":
            return count, count * world
        if self.name == "reduce_scatter":
            return count * world, count
        return count, 0


ALL_REDUCE = Collective("all_reduce", "all_reduce_perf", "sum", split=False)
ALL_GATHER = Collective("all_gather", "all_gather_perf", "none", split=True)
REDUCE_SCATTER = Collective("reduce_scatter", "reduce_scatter_perf", "sum", split=True)
COLLECTIVES = {c.name: c for c in (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER)}


def collective_of(result: dict) -> str:
    """Which collective a benchmark result measured; results written before --collective existed (and
    nccl-tests logs, which the reader only accepts from all_reduce_perf) measured the all-reduce."""
    return (result.get("config") or {}).get("collective") or "all_reduce"


def gather_offset(part: int, count: int) -> int:
    """Where rank `part`'s elements start in the all-gather output (and in the reduce-scatter input)."""
    return part * count


# pragma: no mutate start (torch calls on a live process group: the slow tests run them)
def buffers(coll: Collective, count: int, world: int, dtype, device) -> tuple:
    """(input, output or None) zeros: contents do not change the speed, and zeros never overflow over
    repeated in-place sums."""
    import torch

    n_in, n_out = coll.buffer_counts(count, world)
    out = torch.zeros(n_out, dtype=dtype, device=device) if n_out else None
    return torch.zeros(n_in, dtype=dtype, device=device), out


def call(coll: Collective, inp, out):
    """The one torch call timed. torch 2.13 names the single-tensor all-gather and reduce-scatter
    all_gather_single / reduce_scatter_single and warns on the older *_into_tensor / *_tensor names, which are
    all that torch 2.1 to 2.12 have: the newer name where it exists. gloo runs both on CPU."""
    import torch.distributed as dist

    if coll.name == "all_gather":
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)
    elif coll.name == "reduce_scatter":
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)
    else:
        dist.all_reduce(inp)


def fill_pattern(coll: Collective, inp, world: int, rank: int):
    """This rank's input for the check (see check_wrong)."""
    from scalelab.bench import pattern

    if coll.name == "all_gather":
        pattern.tile_into(inp, _gather_period(rank, inp.device, inp.dtype))
    else:  # a sum: each element owned by one rank (pattern.py); the reduce-scatter input holds n parts of it
        pattern.tile_into(inp, pattern.contributions(world, rank, inp.device, inp.dtype)[1])


def check_wrong(coll: Collective, inp, out, world: int, rank: int, count: int) -> int:
    """Wrong elements of this rank's result after one call on fill_pattern's input.

    all-reduce: every element is pattern.py's sum. all-gather: part j of the output is rank j's input,
    1 + (j + i) % 7 at its element i. reduce-scatter: this rank's output is part `rank` of the summed input,
    pattern.py's sum at positions rank·count + i."""
    import torch

    from scalelab.bench import pattern

    expected = pattern.contributions(world, rank, inp.device, inp.dtype)[0]
    if coll.name == "all_gather":
        return sum(pattern.count_mismatches(out[gather_offset(j, count):gather_offset(j + 1, count)],
                                            _gather_period(j, inp.device, inp.dtype)) for j in range(world))
    if coll.name == "reduce_scatter":
        shift = gather_offset(rank, count) % world
        return pattern.count_mismatches(out, torch.roll(expected, -shift))
    return pattern.count_mismatches(inp, expected)


def _gather_period(rank: int, device, dtype):
    import torch

    return (1 + (rank + torch.arange(PATTERN_PERIOD, device=device)) % PATTERN_PERIOD).to(dtype)


# pragma: no mutate end
