"""Synthetic, seeded data: every rank and every scale sees the same dataset, no downloads."""

import math

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset, TensorDataset


def train_loader(dataset, batch_size: int, rank: int, world_size: int, seed: int, num_workers: int = 0,
                 pin_memory: bool = False) -> DataLoader:
    """This rank's shard of the training set, a fresh shuffle each epoch (`loader.sampler.set_epoch`), the same on
    every rank; whole batches only (a short last batch would be a step of another size); workers kept alive across
    epochs. One rank is a shard of one: the same code at every scale. pin_memory (GPU runs): batches in page-locked
    memory, so Fabric's non_blocking copy to the GPU is one (from pageable memory it waits for the copy)."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers, drop_last=True,
                      persistent_workers=num_workers > 0, pin_memory=pin_memory)


def eval_loader(dataset, batch_size: int, rank: int, world_size: int, num_workers: int = 0,
                pin_memory: bool = False) -> DataLoader:
    """This rank's share of an evaluation set: every sample exactly once over all ranks (no padding, no repeats),
    so the figures summed over ranks are the set's own."""
    return DataLoader(Subset(dataset, range(rank, len(dataset), world_size)), batch_size=batch_size,
                      num_workers=num_workers, pin_memory=pin_memory)


def spiral(num_samples: int, noise: float, seed: int, num_classes: int = 2) -> TensorDataset:
    """Interleaved 2-D spirals: not linearly separable, so the MLP has something to learn."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(num_samples) % num_classes
    radius = torch.rand(num_samples, generator=g)
    angle = radius * 3 * math.pi + labels * (2 * math.pi / num_classes)
    xy = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    xy = xy + noise * 0.1 * torch.randn(num_samples, 2, generator=g)
    return TensorDataset(xy.float(), labels.long())


class TokenSequences(Dataset):
    """Arithmetic token sequences (start + stride*t mod V): structured, so the loss falls.

    Items are made on demand from (seed, index), so an xl run needs no gigabyte tensor in memory.
    """

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int, seed: int):
        self.num_samples, self.seq_len, self.vocab_size, self.seed = num_samples, seq_len, vocab_size, seed
        self._positions = torch.arange(seq_len + 1)

    def __len__(self):
        return self.num_samples

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        start, stride = torch.randint(0, self.vocab_size, (2,), generator=g)
        tokens = (start + (stride % 16 + 1) * self._positions) % self.vocab_size
        return tokens[:-1], tokens[1:]


class ImagePool(Dataset):
    """Synthetic images (3 x size x size, standard-normal like normalised pixels) with labels: sample i is image
    i % pool of a seeded pool and its label, so the loss can fall and a batch is collated as decoded images are."""

    def __init__(self, num_samples: int, size: int, num_classes: int, pool: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.num_samples = num_samples
        self.images = torch.randn(min(pool, num_samples), 3, size, size, generator=g)
        self.labels = torch.randint(0, num_classes, (len(self.images),), generator=g)

    def __len__(self):
        return self.num_samples

    def __getitem__(self, index):
        return self.images[index % len(self.images)], self.labels[index % len(self.images)]


class MaskedSentencePairs(Dataset):
    """Synthetic BERT pre-training samples made on demand from (seed, index): token sequences (start + stride*t)
    over the vocabulary's ordinary ids, two segments, 15 % of positions masked ([MASK] = 103, as BERT's vocabulary)
    with their tokens as labels (elsewhere -100: no loss), and a next-sentence label."""

    MASK, FIRST = 103, 1000  # ids below FIRST are BERT's special and unused tokens

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int, seed: int):
        self.num_samples, self.seq_len, self.vocab_size, self.seed = num_samples, seq_len, vocab_size, seed
        self._positions = torch.arange(seq_len)
        self._segments = (self._positions >= seq_len // 2).long()

    def __len__(self):
        return self.num_samples

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        start, stride = torch.randint(0, self.vocab_size - self.FIRST, (2,), generator=g)
        tokens = self.FIRST + (start + (stride % 16 + 1) * self._positions) % (self.vocab_size - self.FIRST)
        masked = torch.rand(self.seq_len, generator=g) < 0.15
        labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
        return torch.where(masked, torch.full_like(tokens, self.MASK), tokens), self._segments, labels, \
            torch.tensor(index % 2)
