"""Keeping a model busy on its device: the batch size from the device's memory, each batch's
copy to the device made while the previous one computes, and the embeddings brought back in
a few transfers.

On a GPU a forward pass takes milliseconds, so whatever the host does on its path shows in the
rate. Three things would: a copy of the tiles on the stream the model computes on (the model
waits for it), bringing each batch's embeddings back to the host (the host then waits for the
device after every batch, and the device for the host's next launches), and batches sized for
a CPU. On CPU all three are no-ops: the same tensors, the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

from cellica.core.errors import CellicaError

# The batch when ``embed.batch_size`` is null and the model runs on the CPU (where the batch
# does not change the rate much, nor the embeddings at all: float32, checked in the tests).
CPU_BATCH = 128
# The largest batch chosen for a GPU: ViT-S and larger saturate an H100 well below it, and the
# loader holds a group of batches per read thread in page-locked host memory.
MAX_AUTO_BATCH = 512
# The share of the device's free memory a batch's forward pass may use (the rest: the
# allocator's fragmentation, batches in flight, the outputs waiting to be brought back).
MEMORY_SHARE = 0.5
PROBE_TILES = 8


def pick_batch_size(budget_bytes: float, bytes_per_tile: float, cap: int = MAX_AUTO_BATCH) -> int:
    """The largest power of two, at most ``cap``, whose batch needs at most ``budget_bytes``
    (``bytes_per_tile`` each); 1 when not even that fits (the forward pass will then say so).

    Examples
    --------
    >>> pick_batch_size(1000, 10)  # 64 tiles take 640 bytes, 128 would take 1,280
    64
    >>> pick_batch_size(10**12, 10)
    512
    """
    if not (bytes_per_tile > 0 and budget_bytes >= 0 and cap >= 1):
        raise CellicaError(f"batch sizing needs positive sizes, got {budget_bytes} bytes for {bytes_per_tile} a tile")
    batch = 1
    while batch * 2 <= cap and batch * 2 * bytes_per_tile <= budget_bytes:
        batch *= 2
    return batch


def device_batch_size(encode: Callable[[torch.Tensor], torch.Tensor], tile_shape: tuple[int, ...],
                      device: torch.device) -> int:
    """The batch for ``embed.batch_size: null``: on CUDA from a probe (a forward pass of
    :data:`PROBE_TILES` tiles measures the memory a tile takes, as ``encode`` runs it: same
    pooling, block and arithmetic) and the memory free after it; on CPU :data:`CPU_BATCH`."""
    if device.type != "cuda":
        return CPU_BATCH
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    encode(torch.zeros((PROBE_TILES, *tile_shape), device=device))
    torch.cuda.synchronize(device)
    per_tile = max(1, torch.cuda.max_memory_allocated(device) - before) / PROBE_TILES
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(device)
    return pick_batch_size(MEMORY_SHARE * free, per_tile)


def batches_on_device(batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                      device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``(indices, tiles)`` with the tiles on ``device``, in the order given.

    On CUDA each batch is copied on a stream of its own, one batch ahead: the copy of batch
    k + 1 runs while batch k computes (from page-locked memory the copy does not hold up the
    host either). The compute stream waits for a batch's copy before using it, and the batch's
    memory is marked as used there, so the allocator does not hand it out again too early.
    """
    if device.type != "cuda":
        for idx, x in batches:
            yield idx, x.to(device)
        return
    copying = torch.cuda.Stream(device)
    compute = torch.cuda.current_stream(device)

    pending = iter(batches)

    def copy_next():
        """The next batch, its copy issued on the copying stream (None when there is none)."""
        for idx, x in pending:
            with torch.cuda.stream(copying):
                return idx, x.to(device, non_blocking=True)
        return None

    ahead = copy_next()
    while ahead is not None:
        compute.wait_stream(copying)  # this batch's copy (the only one issued so far) is done first
        idx, x = ahead
        x.record_stream(compute)
        ahead = copy_next()
        yield idx, x


class HostOutputs:
    """Embeddings gathered on the device and brought to the host every ``every`` batches in one
    transfer: a transfer waits for the device, so once per batch it would leave the device idle
    while the host prepares the next launches."""

    def __init__(self, every: int = 64):
        self.every = every
        self._pending: list[torch.Tensor] = []
        self._host: list[np.ndarray] = []

    def add(self, z: torch.Tensor) -> None:
        self._pending.append(z.float())
        if len(self._pending) >= self.every:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._host.append(torch.cat(self._pending).cpu().numpy())
            self._pending = []

    def result(self, width: int) -> np.ndarray:
        """Every embedding added, in the order added (``width`` columns when there were none)."""
        self._flush()
        return np.concatenate(self._host) if self._host else np.zeros((0, width), np.float32)
