"""Feeding the model (#34): batch sizing, batches across shards, copies ahead, outputs brought back.

The CUDA branches (a copy stream, page-locked batches, the memory probe) need a GPU; on CPU
the same functions must be the plain path: these tests hold them to it, and hold the whole
embed path to a plain loop over the store, written here independently.
"""

import numpy as np
import pytest
import torch

from cellica.core.errors import CellicaError
from cellica.embed._checkpoints import load_encoder
from cellica.embed._feeding import (
    CPU_BATCH,
    HostOutputs,
    batches_on_device,
    device_batch_size,
    pick_batch_size,
)
from cellica.embed._loader import TileBlocks, make_loader
from cellica.embed._mae import TileNormalizer
from cellica.embed.extract import embed_store
from cellica.embed.params import EmbedParams


def test_pick_batch_size_by_hand():
    assert pick_batch_size(1000, 10) == 64  # 64 x 10 = 640 fits, 128 x 10 = 1,280 does not
    assert pick_batch_size(1280, 10) == 128  # exactly the budget fits
    assert pick_batch_size(10**12, 10) == 512  # capped: a bigger batch is no faster, and costs host memory
    assert pick_batch_size(10**12, 10, cap=100) == 64  # a power of two under the cap
    assert pick_batch_size(5, 10) == 1  # nothing fits: one tile, and the forward pass says why
    for budget, per_tile in [(1000, 0), (-1, 10)]:
        with pytest.raises(CellicaError, match="positive sizes"):
            pick_batch_size(budget, per_tile)


def test_device_batch_size_on_cpu_is_the_fixed_default():
    probed = []
    assert device_batch_size(probed.append, (4, 32, 32), torch.device("cpu")) == CPU_BATCH
    assert not probed  # no probe on CPU: nothing to size against


def test_batches_on_device_keep_order_and_values_on_cpu():
    batches = [(torch.arange(k, k + 3), torch.full((3, 2), float(k))) for k in range(0, 12, 3)]
    got = list(batches_on_device(iter(batches), torch.device("cpu")))
    assert [i.tolist() for i, _ in got] == [i.tolist() for i, _ in batches]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, batches, strict=True))
    assert list(batches_on_device(iter([]), torch.device("cpu"))) == []


def test_host_outputs_bring_back_every_batch_in_order():
    out = HostOutputs(every=2)  # flushed after batches 2 and 4, the fifth at the end
    for k in range(5):
        out.add(torch.full((k + 1, 3), float(k), dtype=torch.bfloat16))
    got = out.result(3)
    assert got.dtype == np.float32 and got.shape == (15, 3)
    np.testing.assert_array_equal(got[:, 0], np.repeat(np.arange(5.0), np.arange(1, 6)))
    assert HostOutputs().result(7).shape == (0, 7)


def test_store_order_batches_span_shards(tiny_store):
    """A batch is ``batch_size`` tiles whatever the store's shard size (16 here): a small shard
    no longer caps a GPU's batch. Training's shuffled batches are unchanged (their groups are
    ``buffer_blocks`` shards, as before)."""
    norm = TileNormalizer("tile")
    n = tiny_store.n_tiles
    assert tiny_store.shard_tiles == 16 and n == 72
    for batch, sizes in [(40, [40, 32]), (16, [16] * 4 + [8]), (10, [10] * 7 + [2]), (128, [72])]:
        got = list(make_loader(TileBlocks(tiny_store.path, np.arange(n), norm, batch)))
        assert [len(i) for i, _ in got] == sizes, batch
        assert np.concatenate([i.numpy() for i, _ in got]).tolist() == list(range(n))
    # a shard's range that does not start at 0 (an embed shard) is read the same way
    got = list(make_loader(TileBlocks(tiny_store.path, np.arange(16, 64), norm, 40)))
    assert [len(i) for i, _ in got] == [40, 8] and int(got[0][0][0]) == 16


def test_embed_path_equals_a_plain_loop_over_the_store(tiny_store, tiny_model):
    """The whole embed path (batches across shards, read threads, outputs gathered) against the
    path before #34 written out by hand: every tile read, normalised by the checkpoint's
    normaliser, encoded in one batch. Equal bit for bit on CPU, whatever the batch size."""
    model, normalizer, _ = load_encoder(tiny_model, tiny_store.n_channels, tiny_store.tile_shape[0])
    model.eval()
    with torch.inference_mode():
        x = torch.from_numpy(normalizer(tiny_store.read_range(0, tiny_store.n_tiles)))
        reference = model.encode(x, "mean", -1).numpy()
    for params in (EmbedParams(), EmbedParams(batch_size=5, read_threads=2), EmbedParams(batch_size=40)):
        got = embed_store(tiny_store.path, tiny_model, params=params)
        np.testing.assert_array_equal(got.X, reference)
        assert got.obs_names.tolist() == tiny_store.metadata["tile_id"].tolist()
        assert got.uns["provenance"]["batch_size"] == (params.batch_size or CPU_BATCH)


def test_rebatch_by_hand():
    from cellica.embed._loader import rebatch

    parts = [(torch.arange(a, b), torch.arange(a, b, dtype=torch.float32) * 10) for a, b in [(0, 3), (3, 8), (8, 10)]]
    got = list(rebatch(iter(parts), 4))
    assert [i.tolist() for i, _ in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert all(torch.equal(x, i.float() * 10) for i, x in got)
    # a batch inside one part is a view of it (no copy); one spanning two parts is joined
    inside = list(rebatch(iter([parts[1]]), 2))
    assert inside[0][1].data_ptr() == parts[1][1].data_ptr()
    assert [len(i) for i, _ in rebatch(iter(parts), 100)] == [10]
    assert list(rebatch(iter([]), 4)) == []


def test_the_gpu_benchmark_runs_every_step_at_toy_sizes():
    """``benchmarks/gpu.py`` is run when a device is lent, in one try: its ``--smoke`` runs every
    step on the CPU, so a broken script is found here, not on the device's clock."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
    done = subprocess.run([sys.executable, str(script), "--smoke"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "embed/bare" in done.stdout and "(sized)" in done.stdout and "train tiles/s" in done.stdout


@pytest.mark.parametrize("threads", [0, 2])
@pytest.mark.parametrize("raw", [False, True])
def test_every_batch_holds_the_store_s_tiles_at_its_indices(tiny_store, threads, raw):
    """The loader's invariant, whatever the order: a batch's pixels are the store's pixels at
    the indices it carries. Shuffled groups whose blocks happen to span a consecutive range
    (first block lowest, last highest, the middle swapped) were once read as one sorted slab
    and paired with the shuffled indices: this checks every seed of several epochs."""
    from cellica.embed._loader import pixels_to_float

    norm = TileNormalizer("tile")
    everything = tiny_store.read_range(0, tiny_store.n_tiles)
    for seed in [None, *range(12)]:
        data = TileBlocks(tiny_store.path, np.arange(tiny_store.n_tiles), norm, 8, shuffle_seed=seed,
                          buffer_blocks=3, raw=raw, read_threads=threads)
        seen = []
        for idx, x in make_loader(data):
            want = everything[idx.numpy()]
            got = pixels_to_float(x, want.dtype).numpy() if raw else x.numpy()
            np.testing.assert_array_equal(got, want.astype(np.float32) if raw else norm(want), err_msg=f"seed {seed}")
            seen.append(idx.numpy())
        assert sorted(np.concatenate(seen).tolist()) == list(range(tiny_store.n_tiles))
