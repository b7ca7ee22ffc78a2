"""Train and time: the loop (loop.py) and its step clock, the compute/communication split, the failure path."""
