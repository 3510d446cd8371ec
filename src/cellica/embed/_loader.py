"""Streaming tiles from a store into torch: shard-aligned slabs, normalised in the workers.

Reading a tile store shard by shard is an order of magnitude faster than random
access, so both training and extraction read whole contiguous blocks. Training
shuffles the order of blocks and the tiles within a buffer of blocks (the
"shuffle buffer" of streaming datasets), seeded per epoch, so it stays
deterministic without random reads.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from cellica.embed._mae import TileNormalizer
from cellica.store.tilestore import TileStore


class TileBlocks(IterableDataset):
    """Yield ``(indices, tiles)`` batches from a tile store.

    Parameters
    ----------
    store_path
        The tile store (each worker opens its own handle).
    indices
        Sorted tile indices to visit (a subset, a shard's range, or all).
    normalizer
        Turns raw tiles into float32 model input.
    batch_size
        Tiles per batch (the last batch may be smaller).
    shuffle_seed
        ``None``: store order (extraction), in batches of ``batch_size`` whatever the store's
        shard size (a batch may span shards). Otherwise blocks and tiles are shuffled with this
        seed (training; pass a new seed per epoch).
    buffer_blocks
        Blocks mixed together when shuffling.
    generation
        The store generation the caller opened (:attr:`TileStore.generation`): a worker that
        finds another (the store was replaced meanwhile) fails instead of mixing two stores.
    raw
        Yield the pixels in their stored integer type, not normalised (:func:`raw_tensor`): the
        caller normalises them on its device (:func:`pixels_to_float`, ``TileNormalizer.torch``).
    read_threads
        Threads reading (and, in store order, batching and normalising) blocks ahead of the
        consumer, in this process: Blosc, crc32c and numpy release the GIL, so reading scales
        with cores without the copy of every batch that worker processes pay. The batches and
        their order are the same whatever the number.
    pin
        Put each batch in page-locked memory where it is made (in the read threads), so its
        copy to a CUDA device runs asynchronously, without pinning in the consumer's thread.
        In-process reading only (``num_workers`` 0): a worker process cannot pin.
    """

    def __init__(self, store_path: str | os.PathLike, indices: np.ndarray, normalizer: TileNormalizer,
                 batch_size: int, shuffle_seed: int | None = None, buffer_blocks: int = 4,
                 generation: str | None = None, raw: bool = False, read_threads: int = 0, pin: bool = False):
        super().__init__()
        self.store_path = str(store_path)
        self.indices = np.asarray(indices, dtype=np.int64)
        self.normalizer = normalizer
        self.batch_size = int(batch_size)
        self.shuffle_seed = shuffle_seed
        self.buffer_blocks = buffer_blocks
        self.generation = generation
        self.raw = raw
        self.read_threads = int(read_threads)
        self.pin = bool(pin)
        self._store: TileStore | None = None

    def _blocks(self, shard_tiles: int) -> list[np.ndarray]:
        """The indices grouped by store shard (each group is read as one slab)."""
        groups = np.split(self.indices, np.flatnonzero(np.diff(self.indices // shard_tiles)) + 1)
        return [g for g in groups if g.size]

    def __iter__(self):
        if self._store is None:
            self._store = TileStore.open(self.store_path, generation=self.generation)
        store = self._store
        blocks = self._blocks(store.shard_tiles)
        rng = None if self.shuffle_seed is None else np.random.default_rng(self.shuffle_seed)
        if rng is not None:
            blocks = [blocks[i] for i in rng.permutation(len(blocks))]
        # Workers take interleaved groups of blocks; DataLoader returns their batches round-robin.
        # In store order a group holds enough shards for a whole batch (a small shard size does
        # not cap a GPU's batch); shuffled, ``buffer_blocks`` of them mixed.
        info = get_worker_info()
        step = self.buffer_blocks if rng is not None else max(1, -(-self.batch_size // store.shard_tiles))
        groups = [blocks[i : i + step] for i in range(0, len(blocks), step)]
        if info is not None:
            groups = groups[info.id :: info.num_workers]
        if rng is None:  # store order: each group read and normalised (by a read thread), then batched
            yield from rebatch(read_ahead(lambda g: self._group(store, g), groups, self.read_threads),
                               self.batch_size, self.pin)
            return
        for idx, tiles in read_ahead(lambda g: self._tiles(store, g), groups, self.read_threads):
            perm = rng.permutation(idx.size)
            yield from self._batches(idx[perm], tiles[perm])

    def _group(self, store: TileStore, group: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """A group's indices and model input (raw or normalised; pinned if asked), as tensors."""
        idx, tiles = self._tiles(store, group)
        x = raw_tensor(tiles) if self.raw else torch.from_numpy(self.normalizer(tiles))
        return torch.from_numpy(idx), x.pin_memory() if self.pin else x

    @staticmethod
    def _tiles(store: TileStore, group: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """A group's indices and tiles, read slab by slab (consecutive tiles as one slab)."""
        idx = np.concatenate(group)
        if idx.size > 1 and (np.diff(idx) == 1).all():  # consecutive tiles: one read across shards, no copy
            return idx, store.read_range(int(idx[0]), int(idx[-1]) + 1)
        slabs = [store.read_range(int(g[0]), int(g[-1]) + 1) for g in group]
        # A block of consecutive tiles is its slab as read; only gaps need picking (a copy).
        slabs = [s if g.size == s.shape[0] else s[g - g[0]] for g, s in zip(group, slabs, strict=True)]
        return idx, slabs[0] if len(slabs) == 1 else np.concatenate(slabs)

    def _batches(self, idx: np.ndarray, tiles: np.ndarray):
        for start in range(0, idx.size, self.batch_size):
            sl = slice(start, start + self.batch_size)
            x = raw_tensor(tiles[sl]) if self.raw else torch.from_numpy(self.normalizer(tiles[sl]))
            yield torch.from_numpy(idx[sl]), x.pin_memory() if self.pin else x


def rebatch(parts, batch_size: int, pin: bool = False):
    """Batches of ``batch_size`` rows (the last one smaller) from ``(indices, tensor)`` parts, in
    order. A batch inside a part is a view of it (no copy; pinned if the part is); only a batch
    spanning two parts is concatenated (and pinned again if ``pin``)."""
    held: list[tuple[torch.Tensor, torch.Tensor]] = []
    count = 0
    for idx, x in parts:
        start = 0
        if held:  # complete the batch begun in the previous part
            start = min(batch_size - count, len(idx))
            held.append((idx[:start], x[:start]))
            count += start
            if count < batch_size:
                continue
            yield _joined(held, pin)
            held, count = [], 0
        while start + batch_size <= len(idx):
            yield idx[start : start + batch_size], x[start : start + batch_size]
            start += batch_size
        if start < len(idx):
            held, count = [(idx[start:], x[start:])], len(idx) - start
    if held:
        yield _joined(held, pin)


def _joined(held: list[tuple[torch.Tensor, torch.Tensor]], pin: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if len(held) == 1:
        return held[0]
    x = torch.cat([x for _, x in held])
    return torch.cat([i for i, _ in held]), x.pin_memory() if pin else x


def read_ahead(work, items: list, threads: int):
    """``work(item)`` for each item, in order; with ``threads`` > 0 computed by that many threads,
    at most ``threads + 1`` items ahead of the consumer (every thread busy, memory bounded)."""
    if threads <= 0:
        yield from map(work, items)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    pending = iter(items)
    with ThreadPoolExecutor(threads, thread_name_prefix="cellica-read") as pool:
        ahead = deque(pool.submit(work, item) for _, item in zip(range(threads + 1), pending, strict=False))
        try:
            while ahead:
                done = ahead.popleft().result()
                for item in pending:
                    ahead.append(pool.submit(work, item))
                    break
                yield done
        finally:  # the consumer stopped early (an error): no read is left running
            for future in ahead:
                future.cancel()


def raw_tensor(tiles: np.ndarray) -> torch.Tensor:
    """Tiles in their stored integer type as a tensor: uint8 as it is; uint16 reinterpreted as
    int16 (the same bytes; every torch device copies and widens int16), undone by :func:`pixels_to_float`."""
    tiles = np.ascontiguousarray(tiles)
    return torch.from_numpy(tiles.view(np.int16) if tiles.dtype == np.uint16 else tiles)


def pixels_to_float(x: torch.Tensor, stored: np.dtype) -> torch.Tensor:
    """Float32 pixels of a :func:`raw_tensor` batch (on any device): the exact stored values."""
    if np.dtype(stored) == np.uint16:
        return x.to(torch.int32).bitwise_and_(0xFFFF).float()
    return x.float()


def make_loader(dataset: TileBlocks, num_workers: int = 0, pin_memory: bool = False) -> DataLoader:
    """A DataLoader over pre-batched blocks (batching happens in the dataset). With several
    workers, batches arrive interleaved across workers, not in tile order: callers that need
    the order put it back from the indices each batch carries. ``pin_memory`` (for a CUDA
    device) lets the host-to-device copies run asynchronously."""
    return DataLoader(dataset, batch_size=None, num_workers=num_workers, pin_memory=pin_memory,
                      persistent_workers=False, prefetch_factor=4 if num_workers else None,
                      worker_init_fn=one_thread_per_worker if num_workers else None)


def one_thread_per_worker(_: int) -> None:
    """A loader worker decodes with one thread (torch already gives each worker one): N workers
    then use N cores, not N times Blosc's thread pool (as many threads as the node has cores)."""
    from numcodecs import blosc

    blosc.set_nthreads(1)


# Read threads a GPU job starts by default, at most: one core reads and decodes 2,200-2,700
# raw 6-channel 224 px tiles a second (docs/benchmarks.md), so 16 feed a GPU tens of
# thousands; each thread holds one group of batches ahead in memory.
MAX_AUTO_READ_THREADS = 16


def job_cpus() -> int:
    """The CPUs this job may use: its SLURM allocation (``SLURM_CPUS_PER_TASK``), else the CPUs
    this process is allowed to run on."""
    value = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def auto_read_threads(device: torch.device) -> int:
    """Read threads when ``embed.read_threads`` is null: on a GPU every CPU of the job but one
    (at most :data:`MAX_AUTO_READ_THREADS`), so reading keeps the GPU fed; on CPU none, as the
    model needs the cores itself."""
    if device.type != "cuda":
        return 0
    return max(0, min(MAX_AUTO_READ_THREADS, job_cpus() - 1))
