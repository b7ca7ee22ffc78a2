"""The kinds of field a result's blocks declare: each a type carrying its bounds, its doc and its unit."""

from typing import Annotated, Any, ClassVar, Optional, Union

import msgspec
from msgspec import Meta, Struct

SCHEMA = "scalelab.result"
# 2: timing.comm and per-rank communication fields renamed; 3: one name per quantity; 4: a workload's own options
# under workload.options (upgrades.py)
SCHEMA_VERSION = 4
MAX_RANKS = 10**6  # the bound of a world size or an index; a bigger one is a corrupt or hostile file
MAX_STEPS = 10**6  # the most steps (batches) a rank's lists hold: a week of 1 s steps; a report stays linear in them
MAX_SPAN_STEPS = 1000  # steps whose collectives a rank keeps as spans (train/clock.py keeps 60): the timeline's
MAX_TEXT = 10_000  # characters of any string a reader prints
BIG = 1e30  # the largest magnitude of any number: a bigger one is a corrupt file (or inf)
BIG_INT = 2**63 - 1  # the largest count: an int64 (what msgspec bounds; any real count is far below it)
PER_BATCH = ("step_times_s", "grads_ready_times_s", "allreduce_times_s", "buckets")  # one entry per batch, each



def _meta(doc: str, unit: Optional[str], **bounds) -> Meta:
    return Meta(description=doc, **({"extra_json_schema": {"unit": unit}} if unit else {}), **bounds)


def real(doc: str, unit: Optional[str] = None, lo: Optional[float] = 0, hi: float = BIG, *, above: bool = False):
    """A finite number (never a bool) in [lo, hi] ((lo, hi] where `above`: a time a clock read is never 0)."""
    low = {"ge": -hi} if lo is None else {"gt": lo} if above else {"ge": lo}
    return Annotated[float, _meta(doc, unit, le=hi, **low)]


def integer(doc: str, unit: Optional[str] = None, lo: int = 0, hi: int = BIG_INT):
    return Annotated[int, _meta(doc, unit, ge=lo, le=hi)]


def described(typ, doc: str, unit: Optional[str] = None):
    """Any other type, with its line of what it is."""
    return Annotated[typ, _meta(doc, unit)]


def switch(doc: str):
    """true or false."""
    return Annotated[bool, _meta(doc, None)]


def text(doc: str, limit: int = MAX_TEXT, least: int = 0):
    return Annotated[str, _meta(doc, None, max_length=limit, **({"min_length": least} if least else {}))]


def listed(item, doc: str, unit: Optional[str] = None, limit: int = 10**7, length: Optional[int] = None):
    """A list whose items are each `item` (Optional[item] where a reader takes holes: a diverged loss, a share not
    measured; scalelab writes them as null)."""
    bounds = {"min_length": length, "max_length": length} if length is not None else {"max_length": limit}
    return Annotated[list[item], _meta(doc, unit, **bounds)]


def steps(item, doc: str, unit: Optional[str] = None):
    """A rank's per-step (per-batch) list: at most MAX_STEPS items."""
    return listed(item, doc, unit, limit=MAX_STEPS)


SECONDS = real("seconds", "s")
ANY_NUMBER = real("a number", lo=None)
COUNT = integer("a count")
SCALAR = Union[Annotated[str, Meta(max_length=MAX_TEXT)], ANY_NUMBER, bool, None]
VALUES = Union[SCALAR, Annotated[list[SCALAR], Meta(max_length=MAX_STEPS)]]  # a value or a list of values
NAMES = listed(text("a name"), "names")


class Block(Struct, kw_only=True, omit_defaults=True):
    """A block of the record. `rest`: the type of any field it does not declare (None: such fields are not read,
    so not checked)."""
    rest: ClassVar[Any] = None


def plain(value):
    """value with each block a producer returned (at any depth of a writer's dicts and lists) as the object
    result.json holds: its fields set, those left at their default (None: not recorded) out."""
    if isinstance(value, Block):
        return msgspec.to_builtins(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # a rank's per-step numbers: no block in them, not walked
        return value if _SCALARS.issuperset(map(type, value)) else [plain(v) for v in value]
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


