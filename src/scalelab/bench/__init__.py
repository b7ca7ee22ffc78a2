"""Collective benchmarks: what the network delivers with nothing else running (nccl-tests definitions)."""
