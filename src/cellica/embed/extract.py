"""Extraction of embeddings from a tile store into AnnData (``cellica embed``).

Tiles stream from the store in shard-aligned blocks (read by threads, or worker
processes, that also normalise, or only read when the device normalises), each batch is
copied to the device while the previous one computes (:mod:`cellica.embed._feeding`), the
encoder runs in inference mode (bf16 autocast on CUDA unless ``embed.precision: fp32``; float32 on CPU)
up to the chosen block (``embed.block``: the last by default), tokens are pooled (mean of
patch tokens, the class token, or both), and the result is an AnnData: ``.X`` float32
tiles x dims, ``.obs`` the store's metadata indexed by ``tile_id``, ``.uns["provenance"]``
what made it.

For clusters, ``shard="i/n"`` embeds the i-th of n contiguous, shard-aligned
ranges; :func:`gather_embeddings` concatenates the pieces in tile order and
checks that nothing is missing or duplicated.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from cellica import __version__
from cellica.core.adata import make_adata, read_h5ad, write_h5ad
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger, progress
from cellica.core.remote import is_url, redact
from cellica.embed._checkpoints import load_encoder
from cellica.embed._feeding import HostOutputs, batches_on_device, device_batch_size
from cellica.embed._loader import TileBlocks, auto_read_threads, make_loader, pixels_to_float
from cellica.embed.params import EmbedParams
from cellica.embed.train import resolve_device
from cellica.store.tilestore import TileStore

log = get_logger("embed")

def parse_shard(spec: str | None, n_tiles: int, shard_tiles: int) -> tuple[int, int, int, int]:
    """``"i/n"`` -> (i, n, start, stop): the i-th (0-based) of n shard-aligned tile ranges."""
    if spec in (None, "", "none"):
        return 0, 1, 0, n_tiles
    try:
        i_text, n_text = str(spec).split("/")
        i, n = int(i_text), int(n_text)
    except ValueError:
        raise CellicaError(f"shard {spec!r} is not of the form i/n (e.g. 0/4)") from None
    if n < 1 or not 0 <= i < n:
        raise CellicaError(f"shard {spec!r} is out of range: need 0 <= i < n")
    n_blocks = -(-n_tiles // shard_tiles)
    if n > n_blocks:
        raise CellicaError(f"shard {spec!r}: the store has only {n_blocks} shard(s) of {shard_tiles} tiles to split")
    edges = np.linspace(0, n_blocks, n + 1).round().astype(int) * shard_tiles
    return i, n, int(edges[i]), int(min(edges[i + 1], n_tiles))


def _encoder(model, p: EmbedParams, device):
    """``x -> embeddings`` as extraction runs it: inference mode, bf16 autocast on CUDA unless
    ``embed.precision: fp32``."""
    bf16 = device.type == "cuda" and p.precision == "bf16"

    def encode(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            return model.encode(x, p.pooling, p.block)

    return encode


def _encode_all(model, data: TileBlocks, p: EmbedParams, device, shard: tuple[int, int, int, int],
                stored: np.dtype) -> np.ndarray:
    """Embeddings of every tile of ``data``, in tile order (checked); ``data.raw`` tiles (of the
    store's integer type ``stored``) are normalised on ``device``."""
    i, n, start, stop = shard
    encode = _encoder(model, p, device)
    outputs, seen = HostOutputs(), []
    bar = progress(total=stop - start, desc=f"embed {i}/{n}", unit="tile")
    # Batches the read threads did not pin (worker processes cannot) are pinned by the DataLoader.
    batches = make_loader(data, p.num_workers, pin_memory=device.type == "cuda" and not data.pin)
    with torch.inference_mode():
        for idx, x in batches_on_device(batches, device):
            if data.raw:
                x = data.normalizer.torch(pixels_to_float(x, stored))
            outputs.add(encode(x))
            seen.append(idx.numpy())
            bar.update(len(idx))
    bar.close()
    # Workers' batches arrive interleaved: each tile goes back to its place by its index (a
    # tile's embedding does not depend on the order; every tile exactly once is checked).
    order = np.concatenate(seen) if seen else np.zeros(0, int)
    place = np.argsort(order, kind="stable")
    if not np.array_equal(order[place], np.arange(start, stop)):
        raise CellicaError(f"internal error: the loader did not return every tile of shard {i}/{n} exactly once")
    return outputs.result(model.encoder.embed_dim * (2 if p.pooling == "both" else 1))[place]


def embed_store(store_path: str | os.PathLike, checkpoint: str | os.PathLike, out: str | os.PathLike | None = None,
                *, params: EmbedParams | None = None, shard: str | None = None):
    """Embed the tiles of a store (or one shard of it) with a checkpoint's encoder.

    Parameters
    ----------
    store_path
        Tile store.
    checkpoint
        cellica ``.safetensors`` or timm-format state dict (see :mod:`cellica.embed._checkpoints`).
    out
        Where to write the ``.h5ad`` (optional).
    params
        Batching, pooling, device.
    shard
        ``"i/n"`` to embed only that part of the store.

    Returns
    -------
    anndata.AnnData
    """
    p = params or EmbedParams()
    store = TileStore.open(store_path)
    i, n, start, stop = parse_shard(shard, store.n_tiles, store.shard_tiles)
    if p.threads:
        torch.set_num_threads(p.threads)
    device = resolve_device(p.device)
    if store.tile_shape[0] != store.tile_shape[1]:
        raise CellicaError(f"{store.path}: tiles must be square for a ViT, got {store.tile_shape}")
    model, normalizer, info = load_encoder(checkpoint, store.n_channels, store.tile_shape[0], p.model_name,
                                           p.adapt_channels, p.normalization, store_label=str(store.path))
    model = model.to(device).eval()
    block = model.block_index(p.block)  # before any tile is read: an index out of range stops here
    on_device = p.normalize_on == "device" or (p.normalize_on == "auto" and device.type == "cuda")
    threads = p.read_threads if p.read_threads is not None else auto_read_threads(device)
    batch = p.batch_size or device_batch_size(_encoder(model, p, device), (store.n_channels, *store.tile_shape),
                                              device)
    data = TileBlocks(store.path, np.arange(start, stop), normalizer, batch, generation=store.generation,
                      raw=on_device, read_threads=threads, pin=device.type == "cuda" and p.num_workers == 0)
    t0 = time.perf_counter()
    x = _encode_all(model, data, p, device, (i, n, start, stop), store.dtype)
    seconds = time.perf_counter() - t0
    store.check_unchanged()  # replaced during the read: fail, never label new pixels with old rows
    obs = store.metadata.iloc[start:stop].set_index("tile_id", drop=False)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise CellicaError(
            f"the model produced NaN/Inf embeddings for {int(bad.sum())} tile(s) of {store.path}, e.g. "
            f"{obs.index[bad][:5].tolist()}; check the checkpoint and the tiles' intensities"
        )
    provenance = {
        **info, "store": redact(store.path) if is_url(store.path) else str(Path(store.path).resolve()),
        "store_generation": store.generation,
        "pooling": p.pooling, "block": block, "normalized_on": "device" if on_device else "loader",
        "arithmetic": "bf16 autocast" if device.type == "cuda" and p.precision == "bf16" else "float32",
        "n_blocks": len(model.encoder.blocks), "device": str(device), "batch_size": batch, "read_threads": threads,
        "cellica_version": __version__, "params": asdict(p), "n_tiles": int(stop - start),
        "shard": {"index": i, "count": n, "start": start, "stop": stop}, "seconds": round(seconds, 3),
    }
    adata = make_adata(x, obs, [f"mae_{k}" for k in range(x.shape[1])], {"provenance": provenance},
                       f"embeddings of {store.path}")
    log.info("embedded %d tiles (shard %d/%d) into %d dims with %s on %s (batches of %d, %d read thread(s)): "
             "%.1f s, %.0f tiles/s", stop - start, i, n, x.shape[1], info["architecture"]["model_name"], device,
             batch, threads, seconds, (stop - start) / max(seconds, 1e-9))
    if out is not None:
        write_h5ad(adata, out)
    return adata


def gather_embeddings(paths: list[str | os.PathLike], out: str | os.PathLike | None = None,
                      wells_out: str | os.PathLike | None = None):
    """Concatenate shard embeddings in tile order, checking the set is complete.

    Every shard of the same ``n`` must be present once, their ranges must tile
    ``[0, N)`` without gaps or overlaps, and they must come from the same
    checkpoint and store. ``wells_out`` also writes the well-level means.

    Parameters
    ----------
    paths : list of str or PathLike
        Every shard's embeddings (``.h5ad``), in any order.
    out : str or PathLike, optional
        Where to write the gathered embeddings.
    wells_out : str or PathLike, optional
        Where to write the well means.

    Returns
    -------
    anndata.AnnData
        The gathered embeddings, in tile order.
    """
    import anndata as ad

    from cellica.core.adata import aggregate_wells

    if not paths:
        raise CellicaError("gather: no shard files given")
    parts = [read_h5ad(pth) for pth in paths]
    shards = [a.uns["provenance"]["shard"] for a in parts]
    counts = {s["count"] for s in shards}
    if len(counts) != 1:
        raise CellicaError(f"gather: shards of different splits {sorted(counts)} in {list(map(str, paths))}")
    n = counts.pop()
    have = sorted(s["index"] for s in shards)
    missing = sorted(set(range(n)) - set(have))
    if missing or len(have) != len(set(have)):
        raise CellicaError(f"gather: expected shards 0..{n - 1} once each; missing {missing}, got {have}")
    for key in ("checkpoint_sha256", "store", "store_generation", "pooling", "block"):
        values = {str(a.uns["provenance"].get(key)): pth for a, pth in zip(parts, paths, strict=True)}
        if len(values) > 1:
            shown = "; ".join(f"{Path(p).name}: {v[:16]}" for v, p in values.items())
            raise CellicaError(f"gather: shards disagree on {key} ({shown}): they are not of one embedding run")
    parts = [parts[k] for k in np.argsort([s["start"] for s in shards])]
    bounds = [(a.uns["provenance"]["shard"]["start"], a.uns["provenance"]["shard"]["stop"]) for a in parts]
    for (_, stop), (start, _) in zip(bounds, bounds[1:], strict=False):
        if stop != start:
            raise CellicaError(f"gather: shard ranges do not join up: {bounds}")
    merged = ad.concat(parts, merge="first")
    if not merged.obs_names.is_unique:
        raise CellicaError(
            f"gather: duplicated tile ids, e.g. {merged.obs_names[merged.obs_names.duplicated()][:5].tolist()}"
        )
    prov = dict(parts[0].uns["provenance"])
    prov["shard"] = {"index": 0, "count": 1, "start": bounds[0][0], "stop": bounds[-1][1], "gathered_from": n}
    prov["seconds"] = float(sum(a.uns["provenance"]["seconds"] for a in parts))
    prov["n_tiles"] = int(merged.n_obs)
    merged.uns["provenance"] = prov
    log.info("gathered %d shard(s) into %d x %d", n, merged.n_obs, merged.n_vars)
    if out is not None:
        write_h5ad(merged, out)
    if wells_out is not None:
        write_h5ad(aggregate_wells(merged), wells_out)
    return merged
