"""Where marks go so that none hides another: several series at one x drawn side by side ("dodged").

A demo ladder puts four configurations at 2 devices, a lever family two groups at each link rate. Each series
gets a slot, a fixed sideways step in points (the same gap on a linear or a log axis, at 2 devices or 64);
the data stay the data, so the axis limits still count every point. And a figure's caption: the lines under its
axes (caption), which grow the figure rather than cover a mark.
"""

import math
import textwrap

import numpy as np
from matplotlib.transforms import offset_copy

DODGE_PT = 9  # points between marks drawn side by side at one x: more than a marker is wide


def dodge(ax, slot: float):
    """Data coordinates moved `slot` steps sideways."""
    return offset_copy(ax.transData, fig=ax.figure, x=slot * DODGE_PT, units="points")


def slots(n: int) -> list:
    """n slots centred on the true x: -0.5, 0.5 for two series."""
    return [i - (n - 1) / 2 for i in range(n)]


def plot_dodged(ax, slot, x, y, *args, **kwargs):
    """ax.plot, dodged; its points still set the axis limits (an offset transform alone would not count)."""
    ax.update_datalim(np.column_stack([np.asarray(x, float), np.asarray(y, float)]))
    return ax.plot(x, y, *args, transform=dodge(ax, slot), **kwargs)


def range_dodged(ax, slot, x, lo, hi, **kwargs):
    """A predicted range (no overlap … full overlap) as an error bar, dodged like its series' marks."""
    x, lo, hi = (np.asarray(v, float) for v in (x, lo, hi))
    ax.update_datalim(np.column_stack([np.r_[x, x], np.r_[lo, hi]]))
    return ax.errorbar(x, (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", capsize=4,
                       transform=dodge(ax, slot), **kwargs)


def caption(fig, lines: list, warned: bool = True, width=None):
    """Lines under the axes, left-aligned (what the report says of the figure: a slide shows it too); the figure
    grows by their height, so the axes keep their size. warned: dark red (a "!"), else grey (a note). width: the
    characters a line may hold, at most as many as the figure's width fits (16 an inch at this size)."""
    width = min(width or math.inf, int(16 * fig.get_figwidth()))
    text = "\n".join(textwrap.fill(line, width, subsequent_indent="   ") for line in lines)
    if text:
        fig.set_figheight(fig.get_figheight() + 0.12 * text.count("\n"))
        fig.supxlabel(text, x=0.01, ha="left", fontsize=7, color="darkred" if warned else "dimgray")
