"""What names one configuration in the report's frames, in one place.

A group is one workload on one kind of hardware (results.group_key); within it, a configuration is where it ran:
the world size, the nodes and the link between them ("" for a real network or one node, "emulated 2 Gbit/s").
Every table, plot, check and forecast groups, sorts and joins the runs by these names. Lists, not tuples: pandas
reads a tuple as one column label.
"""

SCALE = ["world_size", "num_nodes", "link"]  # a configuration within its group, in baseline order
CONFIGURATION = ["group", *SCALE]  # a configuration among all the folder's
