"""Self-supervised MAE pre-training on the tiles of a store (``cellica train-mae``).

AdamW with linear warm-up and cosine decay (per step), bf16 autocast on GPU,
a progress bar with the loss, a checkpoint after every epoch (resumable), and
bit-for-bit reproducible runs on CPU for a given seed and thread count: every
random choice (initialisation, tile order, masks) comes from the seed, and the
epoch's seed does not depend on earlier epochs, so a resumed run equals an
uninterrupted one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cellica.core.atomic import atomic_output
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger, progress
from cellica.core.ownership import check_owned
from cellica.embed._checkpoints import save_model, sidecar_path
from cellica.embed._loader import TileBlocks, make_loader
from cellica.embed._mae import MaskedAutoencoder, TileNormalizer
from cellica.embed.params import TrainParams
from cellica.store.tilestore import TileStore

log = get_logger("train")


def resolve_device(name: str) -> torch.device:
    """``auto``: CUDA when available, else CPU; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise CellicaError(f"device {name!r} requested but CUDA is not available here")
    return torch.device(name)


def select_tiles(store: TileStore, train_on: str, max_tiles: int | None, seed: int) -> np.ndarray:
    """Sorted indices of the training tiles (controls or all; optionally a seeded subsample)."""
    if train_on not in ("all", "controls"):
        raise CellicaError(f"train_on must be 'all' or 'controls', got {train_on!r}")
    idx = np.arange(store.n_tiles) if train_on == "all" else np.flatnonzero(store.metadata["is_control"].to_numpy())
    if max_tiles is not None and idx.size > max_tiles:
        idx = np.sort(np.random.default_rng(seed).choice(idx, max_tiles, replace=False))
    if idx.size == 0:
        raise CellicaError(f"{store.path}: no tiles to train on (train_on={train_on})")
    return idx


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up to 1, then cosine decay to 0."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def train_mae(store_path: str | os.PathLike, out: str | os.PathLike, params: TrainParams | None = None,
              *, checkpoint_dir: str | os.PathLike | None = None, untrained: bool = False) -> dict[str, Any]:
    """Pre-train an MAE on a tile store and write ``out`` (+ ``.json`` sidecar).

    Parameters
    ----------
    store_path
        The tile store.
    out
        Final weights (``*.safetensors``).
    params
        Architecture and optimisation.
    checkpoint_dir
        Where ``last.pt`` is written after every epoch (default: beside ``out``).
        With ``params.resume`` an existing ``last.pt`` of the same set-up is continued.
    untrained
        Write the initial weights (seeded by ``params.seed``) with the store's normaliser and
        no training step: the untrained-encoder baseline, embedded exactly like the trained one.

    Returns
    -------
    dict
        The training summary (also stored in the sidecar).
    """
    p = params or TrainParams()
    ckpt_dir = Path(checkpoint_dir) if checkpoint_dir else Path(out).parent / "checkpoints"
    for path in (out, sidecar_path(out), ckpt_dir / "last.pt"):  # before any work, not after an hour of training
        check_owned(path)
    store = TileStore.open(store_path)
    if p.threads:
        torch.set_num_threads(p.threads)
    device = resolve_device(p.device)
    cfg = p.mae_config(store.n_channels, store.tile_shape[0])
    if store.tile_shape[0] != store.tile_shape[1]:
        raise CellicaError(f"{store.path}: tiles must be square for a ViT, got {store.tile_shape}")
    idx = select_tiles(store, p.train_on, p.max_tiles, p.seed)
    normalizer = TileNormalizer(mode=p.normalization)
    if p.normalization == "store":
        sample = np.sort(np.random.default_rng(p.seed).choice(idx, min(idx.size, 512), replace=False))
        normalizer.fit(store.read(sample))
    torch.manual_seed(p.seed)  # initialisation; data order and masks have their own seeded streams
    model = MaskedAutoencoder(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay, betas=(0.9, 0.95))
    steps_per_epoch = -(-idx.size // p.batch_size) + len(np.unique(idx // store.shard_tiles))  # upper bound
    total = steps_per_epoch * p.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, max(1, int(p.warmup_epochs * steps_per_epoch)), total))
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    last = ckpt_dir / "last.pt"
    # The store's content digest is part of the set-up: a checkpoint of other data is never resumed.
    setup = {"params": asdict(p), "architecture": cfg.to_dict(), "store": str(store.path), "n_train": int(idx.size),
             "store_sha256": store.content_sha256}
    history: list[dict[str, float]] = []
    start_epoch = 0
    if p.resume and last.is_file() and not untrained:
        start_epoch, history = _resume(last, setup, (model, opt, sched), device)
    log.info("%s %s (%d px, %d channels, patch %d) on %d %s tiles for %d epochs on %s",
             "initialising (untrained baseline)" if untrained else "training", cfg.model_name, cfg.img_size,
             cfg.in_chans, cfg.patch_size, idx.size, p.train_on, 0 if untrained else p.epochs, device)
    for epoch in range(start_epoch, 0 if untrained else p.epochs):
        t0 = time.perf_counter()
        data = TileBlocks(store.path, idx, normalizer, p.batch_size, shuffle_seed=p.seed * 1000 + epoch,
                          generation=store.generation)
        mean_loss = _train_epoch((model, opt, sched), data, p, epoch, device, idx.size)
        history.append({"epoch": epoch + 1, "loss": mean_loss, "seconds": time.perf_counter() - t0})
        log.info("epoch %d/%d: loss %.4f, %.1f s", epoch + 1, p.epochs, mean_loss, history[-1]["seconds"])
        _save_checkpoint(last, (model, opt, sched), epoch, _setup_key(setup), history)
    store.check_unchanged()  # replaced during training: the weights would mix two stores
    summary = {**setup, "history": history, "device": str(device), "untrained": untrained,
               "final_loss": history[-1]["loss"] if history else None}
    save_model(model.cpu(), normalizer, out, extra={"training": summary})
    log.info("wrote %s (final loss %s)", out, "none: untrained" if untrained else f"{summary['final_loss']:.4f}")
    return summary


def _train_epoch(parts, data, p: TrainParams, epoch: int, device, n_tiles: int) -> float:
    """One pass over the training tiles; returns the mean loss (weighted by batch size)."""
    model, opt, sched = parts
    model.train()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    gen = torch.Generator(device=device).manual_seed(p.seed * 1000 + epoch)
    losses, counts = [], []
    bar = progress(total=n_tiles, desc=f"epoch {epoch + 1}/{p.epochs}", unit="tile")
    for _, x in make_loader(data, p.num_workers):
        x = x.to(device, non_blocking=True)
        with autocast:
            loss = model(x, generator=gen)
        if not torch.isfinite(loss):
            raise CellicaError(f"training diverged at epoch {epoch + 1} (loss {loss.item()}); lower lr")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 3.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        counts.append(x.shape[0])
        bar.update(x.shape[0])
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
    bar.close()
    return float(np.average(losses, weights=counts))


def _resume(last: Path, setup: dict, parts, device) -> tuple[int, list[dict[str, float]]]:
    """Continue from ``last`` when it was written for the same set-up (else start afresh)."""
    model, opt, sched = parts
    state = _load_checkpoint(last, device)
    if state.get("setup_key") != _setup_key(setup):
        log.warning("starting afresh: %s was written for %s", last, _what_differs(state.get("setup_key"), setup))
        return 0, []
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    start_epoch = int(state["epoch"]) + 1
    history = [{"epoch": int(e), "loss": loss, "seconds": sec} for e, loss, sec in state["history"].tolist()]
    log.info("resuming from %s after epoch %d", last, start_epoch)
    return start_epoch, history


def _save_checkpoint(last: Path, parts, epoch: int, setup_key: str, history: list[dict[str, float]]) -> None:
    model, opt, sched = parts
    table = torch.tensor([[h["epoch"], h["loss"], h["seconds"]] for h in history], dtype=torch.float64)
    with atomic_output(last, overwrite=True) as tmp, _writing(tmp, last):
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "epoch": epoch, "setup_key": setup_key, "history": table}, tmp)


@contextlib.contextmanager
def _writing(tmp: Path, final: Path):
    """The writer of torch reports a full disk as a RuntimeError ("unexpected pos ..."): name the file."""
    try:
        yield
    except RuntimeError as exc:
        import resource
        import shutil

        free = shutil.disk_usage(tmp.parent).free / 1e6
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        room = f"{free:.0f} MB free on its disk" + (
            "" if limit == resource.RLIM_INFINITY else f", files limited to {limit:,} bytes (File too large? see "
            "`ulimit -f`)")
        raise CellicaError(f"{final}: could not write the checkpoint ({str(exc).splitlines()[0][:120]}); "
                           f"{room}") from None


def _load_checkpoint(path: Path, device) -> dict[str, Any]:
    """A per-epoch checkpoint, loaded without unpickling code; a damaged or pickled file is a
    one-line error naming it."""
    import pickle

    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as exc:
        raise CellicaError(f"{path}: not a loadable cellica checkpoint ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:120]}); delete it to start afresh") from None
    if not isinstance(state, dict) or not {"model", "optimizer", "scheduler", "epoch"} <= set(state):
        raise CellicaError(f"{path}: not a cellica training checkpoint (missing keys); delete it to start afresh")
    return state


def _what_differs(key: str | None, setup: dict[str, Any]) -> str:
    """Which part of the set-up a checkpoint was written for differs (for the log line)."""
    try:
        old = json.loads(key or "{}")
    except ValueError:
        return "an unreadable set-up"
    new = json.loads(_setup_key(setup))
    diff = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if "store_sha256" in diff:
        return "other data (the tile store's contents changed)"
    return f"a different set-up ({', '.join(diff) or 'unknown'})"


def _setup_key(setup: dict[str, Any]) -> str:
    """What must match for a checkpoint to be resumed: all but resume, device and workers (the
    thread count stays: it changes the weights' last bits)."""
    import json

    params = {k: v for k, v in setup["params"].items() if k not in ("resume", "device", "num_workers")}
    return json.dumps({**setup, "params": params}, sort_keys=True)
