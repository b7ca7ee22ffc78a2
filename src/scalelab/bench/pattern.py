"""The all-reduce correctness pattern: every expected sum is a small integer, exact in any dtype and order.

Element i belongs to rank i % n, which contributes 1 + rank % 7 there and 0 elsewhere: every sum is a small
integer (exact in float16 and bfloat16 at any n, in any reduction order), and a lost, doubled or misplaced
contribution changes it. Buffers reach 4 GiB, so nothing here allocates a second buffer-sized tensor.
"""


def contributions(world: int, rank: int, device, dtype):
    """(expected sum per position, this rank's input per position), one period of world elements."""
    import torch

    owner = torch.arange(world, device=device)
    expected = (1 + owner % 7).to(dtype)
    mine = torch.where(owner == rank, expected, torch.zeros_like(expected))
    return expected, mine


def tile_into(buf, period):
    """buf[i] = period[i % len(period)] without a second buffer-sized tensor (buffers reach 4 GiB)."""
    n, count = period.numel(), buf.numel()
    full = count // n
    if full:
        buf[:full * n].view(full, n).copy_(period.expand(full, n))
    if count - full * n:
        buf[full * n:].copy_(period[:count - full * n])


def count_mismatches(buf, period) -> int:
    """How many buf[i] differ from period[i % len(period)]."""
    n, count = period.numel(), buf.numel()
    full = count // n
    wrong = 0
    if full:
        wrong += int((buf[:full * n].view(full, n) != period).sum())
    if count - full * n:
        wrong += int((buf[full * n:] != period[:count - full * n]).sum())
    return wrong
