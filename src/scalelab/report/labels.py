"""Configurations in words, for the figures: what tells one configuration from another, never a run id.

A demo or a link sweep runs one device count several ways (one node, two nodes over each link rate, a lever
set differently). A figure that draws them side by side must say which mark is which, and only what differs:
"2 dev, 1 node" beside "2 dev, 2 nodes, emulated 200 Mbit/s", but plain "4 dev" where 4 devices ran one way.
"""

from __future__ import annotations

import pandas as pd

from scalelab.config import LEVERS
from scalelab.report import lever_view

FIELDS = ("num_nodes", "link", *LEVERS)  # what can differ between configurations of one device count


def words(field: str, value) -> str:
    """One field of a configuration in words ("" where it says nothing: no emulated link)."""
    if field == "num_nodes":
        return f"{int(value)} node{'s' if int(value) != 1 else ''}"
    if field == "link":
        return value if isinstance(value, str) else ""
    return lever_view.setting(field, value)


def named_fields(frame: pd.DataFrame) -> list[list[str]]:
    """Per row, the fields its name carries: those that differ between the frame's rows of its device count,
    and always the nodes when more than one and the link when one was emulated (they are never the default)."""
    fields = [f for f in FIELDS if f in frame]
    differ = {d: {f for f in fields if rows[f].astype(str).nunique() > 1} for d, rows in frame.groupby("world_size")}
    named = []
    for _, r in frame.iterrows():
        plain = {"num_nodes"} if r["num_nodes"] > 1 else set()
        if "link" in frame and words("link", r["link"]):
            plain.add("link")
        named.append([f for f in fields if f in differ[r["world_size"]] | plain])
    return named


def names(frame: pd.DataFrame, sep: str = ", ") -> list[str]:
    """Each row (one configuration) in words: "2 dev, 2 nodes, emulated 2 Gbit/s"; sep="\\n" for tick labels."""
    return [sep.join([f"{int(r['world_size'])} dev", *[w for f in fields if (w := words(f, r[f]))]])
            for (_, r), fields in zip(frame.iterrows(), named_fields(frame))]


def shared(frame: pd.DataFrame, rows: pd.Index) -> str:
    """What the rows (a series drawn as one line) have in common among the fields their names carry
    ("1 node", "emulated 2 Gbit/s"); the whole name where the series is one configuration; "" for nothing."""
    if len(rows) == 1:
        return names(frame)[frame.index.get_loc(rows[0])]
    named = dict(zip(frame.index, named_fields(frame)))
    carried = {f for i in rows for f in named[i]}
    part = frame.loc[rows]
    return ", ".join(w for f in FIELDS if f in carried and part[f].astype(str).nunique() == 1
                     and (w := words(f, part[f].iloc[0])))
