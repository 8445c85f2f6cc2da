"""gradoc.data: batch samplers that put sequences of similar length together.

Both are batch samplers (``DataLoader(dataset, batch_sampler=...)``), deterministic for a
``seed`` and an epoch (``set_epoch(epoch)``, as ``DistributedSampler``), and shard across
ranks: each rank takes every ``num_replicas``-th batch of the same epoch order (defaults:
``torch.distributed``'s world size and rank when it is initialised, else 1 and 0). Every
sample is in exactly one batch per epoch over all ranks (batches are repeated at the end
to give each rank the same number, unless ``drop_last``).

- :class:`LengthBucketSampler`: shuffle, cut into buckets of ``bucket_batches`` batches,
  sort each bucket by length, cut it into batches of ``batch_size``, shuffle the batches.
- :class:`TokenBudgetBatchSampler`: the same buckets, but each batch takes as many
  sequences as fit ``max_tokens`` (padded: count x longest), so short sequences come in
  large batches and long ones in small.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

__all__ = ["LengthBucketSampler", "TokenBudgetBatchSampler"]


def _world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    if num_replicas is None or rank is None:
        import torch.distributed as dist

        on = dist.is_available() and dist.is_initialized()
        num_replicas = (
            num_replicas if num_replicas is not None else (dist.get_world_size() if on else 1)
        )
        rank = rank if rank is not None else (dist.get_rank() if on else 0)
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
    return num_replicas, rank


class _Bucketed:
    def __init__(
        self,
        lengths: Sequence[int] | torch.Tensor,
        *,
        bucket_size: int,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        num_replicas: int | None,
        rank: int | None,
    ) -> None:
        self.lengths = torch.as_tensor(lengths, dtype=torch.long)
        if self.lengths.dim() != 1 or len(self.lengths) == 0:
            raise ValueError("lengths must be a non-empty 1-D sequence of integers")
        self.bucket_size = bucket_size
        """Samples per bucket: shuffled together, sorted by length within."""
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        raise NotImplementedError

    def _order(self) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        n = len(self.lengths)
        return torch.randperm(n, generator=g) if self.shuffle else torch.arange(n)

    def _sorted_buckets(self) -> Iterator[torch.Tensor]:
        order = self._order()
        for i in range(0, len(order), self.bucket_size):
            chunk = order[i : i + self.bucket_size]
            yield chunk[torch.argsort(self.lengths[chunk], stable=True)]

    def _shard(self, batches: list[list[int]]) -> list[list[int]]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch + 7919)
            batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
        r = self.num_replicas
        if self.drop_last:
            batches = batches[: len(batches) - len(batches) % r]
        elif batches and len(batches) % r:
            batches = batches + batches[: r - len(batches) % r]  # every rank gets as many
        return batches[self.rank :: r]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._shard(self._batches()))

    def __len__(self) -> int:
        return len(self._shard(self._batches()))


class LengthBucketSampler(_Bucketed):
    """Batches of ``batch_size`` sequences of similar length (see the module docstring)."""

    def __init__(
        self,
        lengths: Sequence[int] | torch.Tensor,
        batch_size: int,
        *,
        bucket_batches: int = 50,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        if batch_size < 1 or bucket_batches < 1:
            raise ValueError("batch_size and bucket_batches must be >= 1")
        super().__init__(
            lengths,
            bucket_size=batch_size * bucket_batches,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            num_replicas=num_replicas,
            rank=rank,
        )
        self.batch_size = batch_size

    def _batches(self) -> list[list[int]]:
        out = []
        for bucket in self._sorted_buckets():
            idx = bucket.tolist()
            out += [idx[i : i + self.batch_size] for i in range(0, len(idx), self.batch_size)]
        return out


class TokenBudgetBatchSampler(_Bucketed):
    """Batches whose padded size (count x longest) stays within ``max_tokens``."""

    def __init__(
        self,
        lengths: Sequence[int] | torch.Tensor,
        max_tokens: int,
        *,
        bucket_size: int = 4096,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        super().__init__(
            lengths,
            bucket_size=bucket_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            num_replicas=num_replicas,
            rank=rank,
        )
        longest = int(self.lengths.max())
        if max_tokens < longest:
            raise ValueError(f"max_tokens {max_tokens} is below the longest sequence ({longest})")
        self.max_tokens = max_tokens

    def _batches(self) -> list[list[int]]:
        out: list[list[int]] = []
        for bucket in self._sorted_buckets():
            batch: list[int] = []
            longest = 0
            for i, n in zip(bucket.tolist(), self.lengths[bucket].tolist()):
                if batch and max(longest, n) * (len(batch) + 1) > self.max_tokens:
                    out.append(batch)
                    batch, longest = [], 0
                batch.append(i)
                longest = max(longest, n)
            if batch:
                out.append(batch)
        return out
