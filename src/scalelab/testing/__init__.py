"""Test hooks that ship with scalelab but do nothing in a real run (see faults.py)."""
