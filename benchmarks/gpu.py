"""GPU figures in one script: embedding and MAE-training throughput, and ICA on CUDA.

    python benchmarks/gpu.py [--docs]        # on a machine with a CUDA GPU
    python benchmarks/gpu.py --smoke         # every step at toy sizes on the CPU (checks the script)

Measured, in this one process, after a warm-up of each step:

* embedding: ViT-S/16 and ViT-B/16 (timm, random weights: speed does not depend on them)
  at 224 px with 6 channels in bf16, tiles/s of ``embed_store``'s loop, as its log says (its defaults:
  read threads for the job's CPUs, pixels normalised on the device, copies ahead of the
  forward pass) at batch ``--batch`` and at the batch it sizes itself (``embed.batch_size:
  null``), each against the bare forward pass of the same model at the same batch on
  tensors already on the device (#34's floor: the goal is at least 0.8 of it), the loader
  alone (the same read threads, raw tiles), and the model FLOPs utilisation against the
  GPU's dense bf16 peak (``--peak-tflops``, 989 for an H100/H200);
* MAE training: tiles/s of one optimiser step (forward, backward, AdamW) of each model at
  batch ``--batch`` in bf16 autocast;
* ICA: our solver on CUDA and on this machine's CPU cores, on Laplace sources whitened
  exactly as the transform stage does (``benchmarks/ica.py``), at 22,062 x 384 and
  1,000,000 x 384: seconds, iterations, converged, Amari distance.

Without a CUDA device (and without ``--smoke``) it says so and measures nothing.
``--docs`` writes the tables, with the GPU's name, into ``docs/benchmarks.md`` (``gpu``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).parent))
import numpy as np  # noqa: E402
from _docs import DOCS, markdown, write_block  # noqa: E402
from embed import forward_rate, make_store, vit_flops_per_tile  # noqa: E402
from ica import synthetic  # noqa: E402

from cellica.embed._checkpoints import save_model  # noqa: E402
from cellica.embed._loader import TileBlocks, auto_read_threads, job_cpus, make_loader  # noqa: E402
from cellica.embed._mae import MAEConfig, MaskedAutoencoder, TileNormalizer  # noqa: E402
from cellica.embed.extract import embed_store  # noqa: E402
from cellica.embed.params import EmbedParams  # noqa: E402
from cellica.transform.ica import amari_distance, fit_rotation  # noqa: E402
from cellica.transform.params import IcaParams  # noqa: E402

MODELS = ("vit_small_patch16_224", "vit_base_patch16_224")


def raw_loader_rate(store: Path, n: int, batch: int, threads: int) -> float:
    """Tiles/s of the loader as a GPU job runs it: raw integer tiles, ``threads`` read threads."""
    data = TileBlocks(store, np.arange(n), TileNormalizer("tile"), batch, raw=True, read_threads=threads)
    t0 = time.perf_counter()
    count = sum(len(i) for i, _ in make_loader(data))
    return count / (time.perf_counter() - t0)


def embedding(root: Path, device: str, args) -> list[dict]:
    store = make_store(root, args.px, args.tiles)
    threads = auto_read_threads(torch.device(device)) if args.read_threads is None else args.read_threads
    rows = []
    for name in args.models:
        torch.manual_seed(0)
        model = MaskedAutoencoder(MAEConfig(model_name=name, in_chans=6, img_size=args.px, patch_size=16))
        ckpt = save_model(model, TileNormalizer("tile"), root / f"{name}.safetensors")
        for batch in (args.batch, None):
            params = EmbedParams(batch_size=batch, device=device, read_threads=args.read_threads)
            embed_store(store, ckpt, params=params)  # warm-up: kernels, allocator
            out = embed_store(store, ckpt, params=params)
            # the embedding loop's rate, as the job logs it (the sizing's rate): without the
            # model's loading and the AnnData's making, which do not grow with the tiles
            rate = out.n_obs / out.uns["provenance"]["seconds"]
            used = out.uns["provenance"]["batch_size"]
            bare = forward_rate(model, args.px, out.n_obs, used, device)
            load = raw_loader_rate(store, out.n_obs, used, threads)
            rows.append({"model": name, "batch": f"{used}" if batch else f"{used} (sized)", "tiles": out.n_obs,
                         "read threads": threads, "embed tiles/s": rate, "bare forward tiles/s": bare,
                         "embed/bare": rate / bare, "loader tiles/s": load, "loader/bare": load / bare,
                         "MFU %": 100 * vit_flops_per_tile(model) * rate / (args.peak_tflops * 1e12)})
            print(rows[-1], flush=True)
    return rows


def train_step(model, opt, x, device: str) -> None:
    """One MAE optimiser step: forward (bf16 autocast on CUDA), backward, AdamW."""
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(x)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def training(device: str, args) -> list[dict]:
    rows = []
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for name in args.models:
        torch.manual_seed(0)
        model = MaskedAutoencoder(MAEConfig(model_name=name, in_chans=6, img_size=args.px, patch_size=16)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(args.batch, 6, args.px, args.px, device=device)
        for _ in range(2):
            train_step(model, opt, x, device)  # warm-up
        sync()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            train_step(model, opt, x, device)
        sync()
        seconds = (time.perf_counter() - t0) / args.steps
        rows.append({"model": name, "px": args.px, "batch": args.batch, "s/step": seconds,
                     "train tiles/s": args.batch / seconds})
        print(rows[-1], flush=True)
    return rows


def ica(device: str, args) -> list[dict]:
    rows = []
    for shape in args.ica_shapes.split(","):
        n, d = (int(v) for v in shape.split("x"))
        z, mixing = synthetic(n, d)
        for dev in dict.fromkeys([device, "cpu"]):
            if dev == "cpu" and n > args.cpu_ica_max_rows:
                continue  # the CPU is measured where it finishes in minutes
            p = IcaParams(backend="cellica", max_iter=args.ica_max_iter, tol=1e-4, device=dev)
            fit_rotation(z[:2000, :8], p)  # warm-up
            t0 = time.perf_counter()
            res = fit_rotation(z, p)
            rows.append({"shape": shape, "device": dev, "seconds": time.perf_counter() - t0,
                         "iterations": res.diagnostics["n_iter"], "converged": bool(res.diagnostics["converged"]),
                         "amari": amari_distance(res.rotation, mixing)})
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="toy sizes on the CPU: checks that every step runs")
    ap.add_argument("--px", type=int, default=224)
    ap.add_argument("--tiles", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument(
        "--read-threads", type=int, default=None, help="default: embed.read_threads null (the job's CPUs but one)"
    )
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--ica-shapes", default="22062x384,1000000x384")
    ap.add_argument("--ica-max-iter", type=int, default=1000)
    ap.add_argument("--cpu-ica-max-rows", type=int, default=100000)
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args()
    args.models = MODELS
    if args.smoke:
        device = "cpu"
        args.px, args.tiles, args.batch, args.steps, args.read_threads = 32, 64, 16, 1, 2
        args.ica_shapes, args.ica_max_iter = "2000x16", 200
        args.models = ("vit_tiny_patch16_224",)
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print("no CUDA device here: nothing measured (the script is ready for a GPU machine; --smoke checks it "
              "on the CPU)")
        return
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU (smoke)"
    print(f"device: {name}, torch {torch.__version__}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tables = {"embedding (bf16)": pd.DataFrame(embedding(Path(tmp), device, args)),
                  "MAE training step (bf16)": pd.DataFrame(training(device, args)),
                  "ICA (cellica solver)": pd.DataFrame(ica(device, args))}
    for title, table in tables.items():
        print(f"\n{title}\n{table.to_string(index=False, float_format=lambda v: f'{v:,.4g}')}")
    if args.docs and not args.smoke:
        parts = [f"`python benchmarks/gpu.py --docs` on {name} (torch {torch.__version__}, {job_cpus()} CPUs, "
                 f"{torch.get_num_threads()} CPU threads for the CPU rows)."]
        parts += [f"\n**{title}**\n\n{markdown(t, '.4g')}" for title, t in tables.items()]
        write_block(DOCS / "benchmarks.md", "gpu", "\n".join(parts))


if __name__ == "__main__":
    main()
