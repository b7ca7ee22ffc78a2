"""The measurement arithmetic both sides of a result read, torch-free: a run computes its own figures from its
ranks' records with it (train/ writes the records), and the report reads the same steps and shares with it
(report/ranks.py, report/frames.py), so a step, a timed time and a rank's share of its cores mean one thing
everywhere. It sits beside results.py: it imports neither train/ nor launch/ nor torch (tests/unit/test_layout.py).
"""
