"""Saving and loading model weights without ever executing code from a file.

Two formats are read:

* cellica's own: ``NAME.safetensors`` (the MAE's weights) plus ``NAME.json`` (the
  architecture, the tile normalisation and a training summary);
* timm-format ViT / MAE state dicts (``.pth``, ``.bin``, ``.safetensors``), e.g. the
  ``vit_base_patch16_224.mae`` weights downloaded by hand, or Meta's original MAE
  checkpoints (``{"model": ...}`` with decoder weights, which are ignored);
* channel-agnostic encoders laid out like Recursion's OpenPhenom (keys under
  ``encoder.vit_backbone.``; :mod:`cellica.embed._channel_agnostic`), whose ``model.safetensors``
  may in fact be a ``torch.save`` archive: it is then read with ``weights_only=True`` too.

``.pth``/``.bin`` files are read with ``torch.load(..., weights_only=True)``, which
refuses pickled Python objects. Weights are adapted to the store when possible
(channel count with ``adapt_channels``, position embeddings for another tile size)
and each adaptation is logged.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from cellica.core.atomic import atomic_outputs
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.embed._channel_agnostic import (
    is_openphenom,
    openphenom_architecture,
    openphenom_encoder_state,
)
from cellica.embed._mae import MAEConfig, MaskedAutoencoder, TileNormalizer

log = get_logger("checkpoints")
FORMAT = "cellica-mae-v1"


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file (for provenance)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sidecar_path(path: str | os.PathLike) -> Path:
    return Path(path).with_suffix(".json")


def save_model(model: MaskedAutoencoder, normalizer: TileNormalizer, path: str | os.PathLike,
               extra: dict[str, Any] | None = None) -> Path:
    """Write ``path`` (safetensors weights) and its JSON sidecar, each atomically."""
    from safetensors.torch import save_file

    path = Path(path)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    # Weights and sidecar are committed together: a kill never pairs new weights with an old sidecar.
    with atomic_outputs([path, sidecar_path(path)], overwrite=True) as (tmp, tmp_side):
        # Normalisation and architecture also travel in the weights' header, which weights_sha256
        # covers: an edited sidecar is then caught on loading.
        # One metadata key: safetensors writes several in no fixed order, so files would differ byte-wise.
        header = {"format": FORMAT, "normalization": normalizer.to_dict(), "architecture": model.cfg.to_dict()}
        save_file(state, str(tmp), metadata={"cellica": json.dumps(header, sort_keys=True)})
        meta = {"format": FORMAT, "architecture": model.cfg.to_dict(),
                "normalization": normalizer.to_dict(), "weights_sha256": file_sha256(tmp), **(extra or {})}
        tmp_side.write_text(json.dumps(meta, indent=2))
    return path


SIDECAR_FIELDS = {"format": str, "architecture": dict, "normalization": dict, "weights_sha256": str}


def read_sidecar(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON sidecar of ``path`` (empty for a plain timm checkpoint without one), checked:
    its schema, and that the weights are the ones it describes (``weights_sha256``)."""
    path = Path(path)
    side = sidecar_path(path)
    if not side.is_file():
        return {}
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
        raise CellicaError(f"checkpoint sidecar {side} is not valid JSON ({type(exc).__name__}: "
                           f"{str(exc)[:120]})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return meta if isinstance(meta, dict) else {}
    bad = [f"{k} (expected {t.__name__})" for k, t in SIDECAR_FIELDS.items() if not isinstance(meta.get(k), t)]
    norm = meta.get("normalization", {})
    if isinstance(norm, dict) and not {"mode", "mean", "std"} <= set(norm):
        bad.append("normalization (needs mode, mean, std)")
    if bad:
        raise CellicaError(f"checkpoint sidecar {side}: missing or malformed field(s) {', '.join(bad)}")
    actual = file_sha256(path)
    if actual != meta["weights_sha256"]:
        raise CellicaError(f"checkpoint {path}: its sha256 {actual[:12]}... differs from weights_sha256 "
                           f"{meta['weights_sha256'][:12]}... recorded in {side}: the weights or the sidecar were "
                           "changed or damaged")
    header = json.loads(_safetensors_header(path).get("cellica", "{}"))
    for key in ("normalization", "architecture"):
        if key in header and header[key] != meta[key]:
            raise CellicaError(f"checkpoint sidecar {side}: {key} differs from the one stored with the weights in "
                               f"{path} ({header[key]} vs {meta[key]}): the sidecar was edited")
    return meta


def _safetensors_header(path: Path) -> dict[str, str]:
    if path.suffix != ".safetensors":
        return {}
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception as exc:  # a damaged header
        raise CellicaError(f"checkpoint {path}: unreadable safetensors header ({exc})") from None


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read tensors from safetensors or a ``torch.save`` file, refusing pickled objects."""
    path = Path(path)
    if not path.is_file():
        raise CellicaError(f"checkpoint {path} does not exist")
    if path.suffix == ".safetensors" and not zipfile.is_zipfile(path):  # torch.save writes a zip archive
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise CellicaError(f"checkpoint {path} is truncated or not a safetensors file ({exc})") from None
    if path.suffix == ".safetensors":
        log.warning("checkpoint %s is a torch.save archive despite its name: read with weights_only=True", path)
    try:
        with open(path, "rb") as fh:  # a file object: torch would pick its reader by the name
            obj = torch.load(fh, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CellicaError(
            f"checkpoint {path} contains pickled Python objects, which cellica never loads "
            f"(it could run code). Save a plain state dict or safetensors instead. ({str(exc).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CellicaError(f"checkpoint {path} is truncated or corrupt ({type(exc).__name__}: {exc})") from None
    for key in ("model", "state_dict", "module"):  # wrappers used by MAE / Lightning / DDP
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CellicaError(f"checkpoint {path} is not a state dict of tensors")
    return obj


def _encoder_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keep the encoder's tensors, without any 'encoder.' / 'module.' / 'encoder.vit_backbone.' prefix."""
    if is_openphenom(state):
        return openphenom_encoder_state(state)
    if any(k.startswith("encoder.") for k in state):
        return {k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}
    drop = ("decoder", "mask_token", "head.", "fc_norm.")
    return {k.removeprefix("module."): v for k, v in state.items() if not k.removeprefix("module.").startswith(drop)}


def _adapt(enc_state: dict[str, torch.Tensor], cfg: MAEConfig, n_prefix: int, adapt_channels: bool,
           source: str, store: str) -> dict[str, torch.Tensor]:
    """Fit the patch embedding and position embedding of a checkpoint to the store."""
    from timm.layers import resample_abs_pos_embed
    from timm.models import adapt_input_conv

    if cfg.channel_agnostic:
        return _fits_channel_agnostic(enc_state, cfg, source, store)
    key = "patch_embed.proj.weight"
    if key not in enc_state:
        raise CellicaError(f"checkpoint {source} has no {key}: not a ViT encoder")
    w = enc_state[key]
    if w.shape[-1] != cfg.patch_size:
        raise CellicaError(f"checkpoint {source} has patch size {w.shape[-1]}, but {cfg.patch_size} was asked for")
    if w.shape[1] != cfg.in_chans:
        if not adapt_channels:
            raise CellicaError(
                f"checkpoint {source} has {w.shape[1]} input channels but {store} has {cfg.in_chans}; "
                "set adapt_channels: true to adapt the patch embedding (timm adapt_input_conv)"
            )
        enc_state[key] = adapt_input_conv(cfg.in_chans, w, base_chans=w.shape[1])
        log.warning("adapted the patch embedding from %d to %d channels (timm adapt_input_conv)",
                    w.shape[1], cfg.in_chans)
    pos = enc_state.get("pos_embed")
    grid = cfg.img_size // cfg.patch_size
    if pos is not None and pos.shape[1] - n_prefix != grid * grid:
        enc_state["pos_embed"] = resample_abs_pos_embed(pos, [grid, grid], num_prefix_tokens=n_prefix)
        log.warning("resampled position embeddings from %d to %d patches for %d px tiles",
                    pos.shape[1] - n_prefix, grid * grid, cfg.img_size)
    return enc_state


def _fits_channel_agnostic(enc_state: dict[str, torch.Tensor], cfg: MAEConfig, source: str,
                           store: str) -> dict[str, torch.Tensor]:
    """A channel-agnostic encoder is used as trained: its patch size must tile the store's tiles
    into the grid its positions were made for, and it must have positions for every channel."""
    w, pos = enc_state.get("patch_embed.proj.weight"), enc_state.get("pos_embed")
    if w is None or pos is None:
        raise CellicaError(f"checkpoint {source} has no patch_embed.proj.weight / pos_embed: not a ViT encoder")
    grid = cfg.img_size // cfg.patch_size
    if int(w.shape[-1]) != cfg.patch_size or pos.shape[1] != 1 + cfg.max_channels * grid * grid:
        per = (pos.shape[1] - 1) // max(cfg.max_channels, 1)
        raise CellicaError(f"checkpoint {source} has patch size {w.shape[-1]} and {per} positions per channel, "
                           f"which do not fit {store}'s {cfg.img_size} px tiles in {cfg.patch_size} px patches "
                           f"({grid * grid} per channel)")
    return enc_state


def _architecture(path: Path, state: dict, n_channels: int, tile_size: int, model_name: str | None,
                  normalization: str | None, store_label: str):
    """The architecture, tile normalisation and format of a cellica or timm-format checkpoint."""
    meta = read_sidecar(path)
    if meta.get("format") == FORMAT:
        arch = meta["architecture"]
        normalizer = TileNormalizer(**meta["normalization"])
        if normalizer.mode == "store" and len(normalizer.mean) != n_channels:
            raise CellicaError(
                f"checkpoint {path} was trained with store statistics of {len(normalizer.mean)} channels; "
                f"{store_label} has {n_channels}"
            )
        fmt = "cellica"
    elif is_openphenom(state):
        arch = openphenom_architecture(openphenom_encoder_state(state), tile_size, model_name, str(path))
        normalizer = TileNormalizer(mode=normalization or "instance")
        fmt = "openphenom"
    else:
        if not model_name:
            raise CellicaError(f"checkpoint {path} is a plain state dict: name its timm architecture (model_name)")
        w = state.get("patch_embed.proj.weight", state.get("encoder.patch_embed.proj.weight"))
        if w is None:
            raise CellicaError(f"checkpoint {path} has no patch_embed.proj.weight: not a ViT encoder")
        blocks = {k.split(".")[1] for k in _encoder_state(state) if k.startswith("blocks.")}
        arch = {"model_name": model_name, "patch_size": int(w.shape[-1]), "depth": len(blocks) or None}
        normalizer = TileNormalizer(mode=normalization or "tile")
        fmt = "timm"
    return arch, normalizer, fmt


def _check_fits(own: dict, enc_state: dict, path: Path, model_name: str) -> None:
    """Refuse a state dict whose keys or shapes differ from the model's, naming the first
    differing tensor (in the model's order) and then up to five of each kind."""
    missing = [k for k in own if k not in enc_state]
    unexpected = sorted(set(enc_state) - set(own))
    shape_err = [f"{k}: checkpoint {tuple(enc_state[k].shape)} vs model {tuple(v.shape)}"
                 for k, v in own.items() if k in enc_state and enc_state[k].shape != v.shape]
    if missing or unexpected or shape_err:
        first = next(k for k in [*own, *unexpected] if k not in enc_state or k not in own
                     or enc_state[k].shape != own[k].shape)
        raise CellicaError(
            f"checkpoint {path} does not fit {model_name}: first differing tensor {first}; missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}, shapes {shape_err[:5]}"
        )


def load_encoder(
    path: str | os.PathLike,
    n_channels: int,
    tile_size: int,
    model_name: str | None = None,
    adapt_channels: bool = False,
    normalization: str | None = None,
    store_label: str = "the tile store",
) -> tuple[MaskedAutoencoder, TileNormalizer, dict[str, Any]]:
    """Load a checkpoint's encoder for tiles of ``n_channels`` x ``tile_size`` px.

    Parameters
    ----------
    path
        cellica ``.safetensors`` (with its ``.json``) or a timm-format state dict.
    n_channels, tile_size
        The store's tiles.
    model_name
        timm architecture of a timm-format checkpoint (cellica's own record theirs).
    adapt_channels
        Allow adapting a checkpoint with another channel count (logged).
    normalization
        Tile normalisation for checkpoints that do not record theirs (None: ``instance`` for
        OpenPhenom-layout ones, ``tile`` for timm ones).
    store_label
        Names the store in error messages.

    Returns
    -------
    model, normalizer, info
        The MAE (only its encoder is meaningful for timm checkpoints), the tile
        normalisation to use, and provenance (format, hash, adaptations).
    """
    path = Path(path)
    state = read_state_dict(path)
    arch, normalizer, fmt = _architecture(path, state, n_channels, tile_size, model_name, normalization,
                                          store_label)
    if arch.get("architecture") == "channel_agnostic" and n_channels > arch.get("max_channels", n_channels):
        raise CellicaError(f"checkpoint {path} embeds at most {arch['max_channels']} channels; {store_label} has "
                           f"{n_channels}")
    if tile_size % arch["patch_size"]:
        raise CellicaError(
            f"tile size {tile_size} of {store_label} is not a multiple of the checkpoint's "
            f"patch size {arch['patch_size']} ({path})"
        )
    cfg = MAEConfig(**{**arch, "in_chans": n_channels, "img_size": tile_size})
    model = MaskedAutoencoder(cfg)
    enc_state = _adapt(_encoder_state(state), cfg, model.n_prefix, adapt_channels, str(path), store_label)
    _check_fits(model.encoder.state_dict(), enc_state, path, cfg.model_name)
    model.encoder.load_state_dict(enc_state, strict=True)
    model.eval()
    info = {"checkpoint": str(path), "checkpoint_sha256": file_sha256(path), "format": fmt,
            "architecture": cfg.to_dict(), "normalization": normalizer.to_dict()}
    return model, normalizer, info
