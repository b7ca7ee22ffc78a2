"""How an emulated link is announced to the ranks: the variables src/emulate.py exports (`announce`) and each rank
reads back into its result's `launch.link` (`link_record`), in one module the writer and the reader share."""

import os
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the record is imported where a block is built: emulate.py runs this on a bare python
    from scalelab import record

ENV_LINK, ENV_GBIT = "SCALELAB_LINK", "SCALELAB_LINK_GBIT"
ENV_LATENCY, ENV_LATENCY_APPLIED = "SCALELAB_LINK_LATENCY_MS", "SCALELAB_LINK_LATENCY_APPLIED"
ENV_SHAPED = "SCALELAB_LINK_SHAPED_GBIT"  # only for a degraded link: the rate tc really applies


def announce(told_gbit: float, shaped_gbit: Optional[float], latency_requested_ms: Optional[float],
             latency_applied: bool) -> dict:
    """The variables a node's ranks get: the rate they are told, the rate tc applies where a degraded rehearsal
    differs from it, and the latency asked for with whether netem could apply it."""
    env = {ENV_LINK: "emulated", ENV_GBIT: f"{told_gbit:g}"}
    if shaped_gbit is not None:
        env[ENV_SHAPED] = f"{shaped_gbit:g}"
    if latency_requested_ms is not None:
        env[ENV_LATENCY] = f"{latency_requested_ms:g}"
        env[ENV_LATENCY_APPLIED] = "1" if latency_applied else "0"
    return env


def _float(environ, name) -> Optional[float]:
    """A number a launcher exported, or None when it is missing, empty or not a number."""
    try:
        return float(environ[name]) if environ.get(name) else None
    except ValueError:
        return None


def link_record(environ=None) -> Optional["record.Link"]:
    """The emulated link between the nodes, as src/emulate.py announced it to the ranks; None otherwise (a real
    network, whose rate nobody told us)."""
    from scalelab import record  # a rank's side: emulate.py's (announce) runs on a bare python too
    environ = os.environ if environ is None else environ
    gbit = _float(environ, ENV_GBIT)
    if environ.get(ENV_LINK) != "emulated" or gbit is None:
        return None
    requested = _float(environ, ENV_LATENCY)
    if requested is None and environ.get(ENV_LATENCY):
        return None  # a latency that is not a number: the announcement is garbled, trust none of it
    applied = requested if requested is not None and environ.get(ENV_LATENCY_APPLIED) == "1" else None
    shaped = _float(environ, ENV_SHAPED)  # a degraded rehearsal: gbit is what the link claims, this what it gave
    return record.Link(gbit=gbit, emulated=True, latency_ms=applied, latency_requested_ms=requested,
                       shaped_gbit=shaped)
