"""What names one configuration, in one place: the report's frames and the forecast's calibration read it.

A group is one workload on one kind of hardware (results.group_key); within it, a configuration is where it ran:
the world size, the nodes and the link between them ("" for a real network or one node, "emulated 2 Gbit/s").
Every table, plot, check and forecast groups, sorts and joins the runs by these names. Lists, not tuples: pandas
reads a tuple as one column label. Torch- and pandas-free, beside results.py: perfmodel reads it too.
"""

SCALE = ["world_size", "num_nodes", "link"]  # a configuration within its group, in baseline order
CONFIGURATION = ["group", *SCALE]  # a configuration among all the folder's


def configuration(record) -> tuple:
    """The CONFIGURATION of a run record or a frame's row (attributes of those names): repeats share it."""
    return record.group, int(record.world_size), int(record.num_nodes), record.link or ""
