"""ICA back-ends on whitened float32 data: time to converge and Amari distance, in one process.

    python benchmarks/ica.py [--shapes 22062x128,22062x384,100000x384] [--backends cellica,sklearn,picard]
                             [--max-iter 200] [--demo results/embeddings/seed0/embeddings.h5ad]
                             [--transform-stage] [--iteration-cost 22062x384]

Synthetic data, as the pipeline hands them to ICA: Laplace sources mixed by a random
(Gaussian, non-orthogonal) matrix, then whitened *exactly* on their sample covariance with
the transform stage's own routine (``fit_whitening``), so every back-end gets data whose
sample covariance is the identity; the true unmixing in that whitened space is known
(Amari distance 0 = perfect).
Real-shaped data (``--demo``): the demo's embeddings whitened on their controls as the
transform stage does (no known mixing: the relative gradient is reported instead).
``--transform-stage`` also times the whole pca_ica transform on the last shape.
``--iteration-cost`` breaks our solver's time at one shape into its parts: how many
contrast evaluations and gradients the fit makes, and what each costs on this machine
(the two float32 matrix products at their measured GFLOP/s, the fused elementwise pass),
so the fit's floor on this path is known (docs/benchmarks.md, block ica-iteration-cost).

Every back-end is timed after a small warm-up fit (torch's and BLAS's first-call
costs are not the solver's), with the same ``--max-iter`` and ``tol`` (1e-4). A
back-end that fails (scikit-learn's FastICA can diverge at 384 dims) is reported
as failed with its error, not dropped. Whether each converged, and its Amari
distance, stand beside its time: a speed-up counts only at equal or lower Amari
distance (scikit-learn did not converge at 128 or 384 dims here, python-picard
not at 22,062 x 384).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from cellica.transform.ica import amari_distance, fit_rotation, whiteness_error
from cellica.transform.params import IcaParams
from cellica.transform.whitening import fit_whitening


def synthetic(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Whitened data ``z`` (n x d, float32) and the mixing of the sources in that space."""
    rng = np.random.default_rng(seed)
    s = rng.laplace(size=(n, d))
    a = rng.standard_normal((d, d))
    x = s @ a.T
    white = fit_whitening(x, None, 1e-12, "benchmark")  # the transform stage's whitening, every direction
    z = white.apply(x)
    assert whiteness_error(z) < 1e-6, whiteness_error(z)
    # z = s @ a.T @ V with V = components.T * scale: the mixing in the whitened space is V.T @ a
    v = white.components.T * white.scale
    return z.astype(np.float32), v.T @ a


def demo_whitened(path: str, config: str) -> np.ndarray:
    """The rows and space the pipeline's pca_ica fits ICA on: the fit controls, whitened
    with the config's transform settings (the demo keeps 16 components)."""
    from dataclasses import fields

    import yaml

    from cellica.core.adata import read_h5ad
    from cellica.transform.params import TransformParams
    from cellica.transform.steps import controls_mask
    from cellica.transform.variants import make_transform

    with open(config) as fh:
        section = yaml.safe_load(fh).get("transform") or {}
    known = {f.name for f in fields(TransformParams)}
    params = TransformParams(**{k: v for k, v in section.items() if k in known})
    out = make_transform("pca", params).fit_transform(read_h5ad(path))
    return np.asarray(out.X, np.float32)[controls_mask(out.obs)]


def warm_up(backends) -> None:
    """One tiny fit per back-end, so the timed fits do not pay for imports and first calls."""
    x, _ = synthetic(500, 4, seed=99)
    for b in backends:
        fit_rotation(x, IcaParams(backend=b, max_iter=20, tol=1e-4))


def run(x, backends, max_iter, mixing=None) -> list[dict]:
    rows = []
    for b in backends:
        t0 = time.perf_counter()
        try:
            res = fit_rotation(x, IcaParams(backend=b, max_iter=max_iter, tol=1e-4))
        except Exception as err:  # noqa: BLE001 - a failed reference is a result, not a crash
            rows.append({"backend": b, "seconds": time.perf_counter() - t0, "iterations": np.nan,
                         "converged": f"failed: {type(err).__name__}: {err}", "rel. gradient": np.nan, "amari": np.nan})
        else:
            rows.append({"backend": b, "seconds": time.perf_counter() - t0, "iterations": res.diagnostics["n_iter"],
                         "converged": res.diagnostics["converged"], "rel. gradient": res.diagnostics["gradient_norm"],
                         "amari": amari_distance(res.rotation, mixing) if mixing is not None else float("nan")})
        print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    return rows


def write_docs(tables: dict[str, pd.DataFrame], args) -> None:
    """The tables, as run, into docs/benchmarks.md (no figure copied by hand)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from _docs import DOCS, markdown, write_block

    parts = [f"`python benchmarks/ica.py --docs` (one process, every back-end after a warm-up, at most "
             f"{args.max_iter} iterations, tol 1e-4; Laplace sources mixed by a random matrix and whitened exactly "
             "on their sample covariance by the transform stage's whitening; the demo row: the demo's fit "
             "controls whitened as the transform stage does, no known mixing). Speed-up = "
             "scikit-learn's seconds / the back-end's: it counts only at an equal or lower Amari distance."]
    for name, t in tables.items():
        shown = t.copy()
        shown["converged"] = shown["converged"].astype(str)
        parts += ["", f"**{name}**", "", markdown(shown, floatfmt=".4g")]
    write_block(DOCS / "benchmarks.md", "ica-speed", "\n".join(parts))


def _best_of(fn, repeats: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def iteration_cost(shape: str) -> pd.DataFrame:
    """Our solver's fit at ``shape``, counted by part: each part's calls, its best-of-7 cost
    per call on the fit's own thread count, and the product; the fit's own wall time last."""
    import torch

    from cellica.core.threads import NUMERIC_THREADS
    from cellica.transform import _ica_solver as ica_solver

    n, d = (int(v) for v in shape.split("x"))
    x, _ = synthetic(n, d)
    calls = {"rotate": 0, "evaluate": 0, "grad": 0}
    originals = {k: getattr(ica_solver._Problem, k) for k in calls}

    def counting(name):
        def wrapped(self, *a):
            calls[name] += 1 if self.n == n else 0  # the full-data stage only; the warm start is its own row
            return originals[name](self, *a)
        return wrapped

    for k in calls:
        setattr(ica_solver._Problem, k, counting(k))
    try:
        t0 = time.perf_counter()
        res = fit_rotation(x, IcaParams(backend="cellica", max_iter=200, tol=1e-4))
        wall = time.perf_counter() - t0
    finally:
        for k, f in originals.items():
            setattr(ica_solver._Problem, k, f)
    torch.set_num_threads(NUMERIC_THREADS)
    prob = ica_solver._Problem(torch.as_tensor(np.ascontiguousarray(x.T)), torch)
    w = torch.as_tensor(res.rotation, dtype=torch.float64)
    y = prob.rotate(w.float())
    _, psi = prob.evaluate(y)
    signs = torch.ones(d, dtype=torch.float64)
    each = {"rotate": _best_of(lambda: prob.rotate(w.float())), "evaluate": _best_of(lambda: prob.evaluate(y)),
            "grad": _best_of(lambda: prob.grad(y, psi, signs))}
    what = {"rotate": f"W @ X: one float32 GEMM, {2 * d * d * n / each['rotate'] / 1e9:.0f} GFLOP/s",
            "evaluate": "log cosh and tanh: one fused elementwise pass",
            "grad": f"tanh(Y) @ Y^T: one float32 GEMM, {2 * d * d * n / each['grad'] / 1e9:.0f} GFLOP/s"}
    rows = [{"part": k, "what": what[k], "calls": calls[k], "ms per call": 1e3 * each[k],
             "seconds": calls[k] * each[k]} for k in calls]
    floor = sum(r["seconds"] for r in rows)
    warm = res.diagnostics.get("warm_start", [])
    rows.append({"part": "full-data parts together", "what": f"{res.diagnostics['n_iter']} iterations, converged "
                 f"{res.diagnostics['converged']}", "calls": np.nan, "ms per call": np.nan, "seconds": floor})
    rows.append({"part": "whole fit (wall)", "what": "warm start on " + ", ".join(
                 f"{s['samples']:,} rows ({s['n_iter']} iterations)" for s in warm) + ", then all rows",
                 "calls": np.nan, "ms per call": np.nan, "seconds": wall})
    return pd.DataFrame(rows)


def write_cost_docs(table: pd.DataFrame, shape: str) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from _docs import DOCS, markdown, write_block

    text = (f"`python benchmarks/ica.py --shapes '' --backends cellica --iteration-cost {shape} --docs` (one "
            "process; calls counted in the fit itself, each part's cost the best of 7 calls after the fit, on the "
            "fit's own thread count):\n\n" + markdown(table, floatfmt=".4g"))
    write_block(DOCS / "benchmarks.md", "ica-iteration-cost", text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="22062x128,22062x384")
    ap.add_argument("--backends", default="cellica,sklearn,picard")
    ap.add_argument("--max-iter", type=int, default=200)
    ap.add_argument("--demo", default=None, help="embeddings .h5ad for the real-shaped case")
    ap.add_argument("--config", default="config/config.yaml", help="its transform settings whiten --demo")
    ap.add_argument("--transform-stage", action="store_true", help="also time the whole pca_ica transform")
    ap.add_argument("--iteration-cost", default=None, metavar="NxD",
                    help="break our solver's fit at this shape into its parts")
    ap.add_argument("--docs", action="store_true", help="write the tables into docs/benchmarks.md (ica-speed)")
    args = ap.parse_args()
    backends = args.backends.split(",")
    warm_up(backends)
    tables = {}
    for shape in filter(None, args.shapes.split(",")):
        n, d = (int(v) for v in shape.split("x"))
        print(f"\n== synthetic {n} x {d} (Laplace sources, known mixing)")
        x, a = synthetic(n, d)
        tables[shape] = pd.DataFrame(run(x, backends, args.max_iter, a))
    if args.demo:
        x = demo_whitened(args.demo, args.config)
        print(f"\n== real-shaped: demo embeddings whitened on controls, {x.shape[0]} x {x.shape[1]}")
        tables["demo"] = pd.DataFrame(run(x, backends, args.max_iter))
    print("\nsummary (speed-up = sklearn seconds / backend seconds)")
    for name, t in tables.items():
        if "sklearn" in set(t.backend):
            t["speed-up vs sklearn"] = float(t.loc[t.backend == "sklearn", "seconds"].iloc[0]) / t["seconds"]
        print(f"-- {name}\n{t.to_string(index=False, float_format=lambda v: f'{v:.4g}')}")
    if args.docs and tables:
        write_docs(tables, args)
    if args.iteration_cost:
        cost = iteration_cost(args.iteration_cost)
        print(f"\n== our solver at {args.iteration_cost}, by part\n{cost.to_string(index=False)}")
        if args.docs:
            write_cost_docs(cost, args.iteration_cost)
    if args.transform_stage:
        import anndata as ad

        from cellica.transform.variants import make_transform

        last = ([s for s in args.shapes.split(",") if s] or ["100000x384"])[-1]
        n, d = (int(v) for v in last.split("x"))
        x, _ = synthetic(n, d)
        obs = pd.DataFrame({"plate": "P", "well": "W", "batch": np.arange(n) % 4, "perturbation": "c",
                            "is_control": True}, index=[f"s{i}" for i in range(n)])
        obs["batch"] = obs["batch"].astype(str)
        adata = ad.AnnData(x, obs=obs)
        t0 = time.perf_counter()
        make_transform("pca_ica").fit_transform(adata)
        print(f"whole pca_ica transform stage on {n} x {d}: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
