"""The control budget (``evaluate.max_controls``): what it changes and what it saves.

    python benchmarks/controls.py [--controls 20000,80000] [--budgets 2000,5000,10000] [--genes 24]
                                  [--dims 128] [--seeds 0,1] [--threads 2] [--bbbc021-budgets 36,54]
                                  [--docs] [--hpc]

For each screen size, every gene is classified against all controls (the default, the
paper's recipe) and with each budget, with the same seeds, in this one process. Per metric
(held-out AUROC, Hoyer sparsity, concentration), the per-gene difference budget - all,
averaged over seeds, gets its mean and a 95% bootstrap interval over genes; beside it the
all-controls path's own seed noise (mean |seed a - seed b| per gene) for scale. A budget
*agrees* when its interval contains 0 and lies within +-0.01. Speed: seconds per gene of
each path (``--threads`` genes in parallel) and the ratio.

The screen is ``benchmarks/evaluate.py``'s: standard-normal controls over 4 batches, 64
tiles per gene in 2 of them, each gene shifting 1-3 features by 0.3-1 SD.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import pandas as pd
from _docs import DOCS, markdown, write_block
from evaluate import make_screen, paired

from cellica.evaluate._compare import bootstrap_ci
from cellica.evaluate.genes import evaluate_genes
from cellica.evaluate.params import EvalParams

METRICS = {"auroc_mean": "held-out AUROC", "sparsity": "Hoyer sparsity", "concentration": "concentration"}


def timed(data, params: EvalParams, threads: int) -> tuple[pd.DataFrame, float]:
    t0 = time.perf_counter()
    table, _ = evaluate_genes(data, params, threads=threads)
    return table, time.perf_counter() - t0


def seed_noise(table: pd.DataFrame, metric: str) -> float:
    """Mean over genes of |first seed - second seed| (NaN with one seed)."""
    wide = table.pivot_table(index="gene", columns="seed", values=metric)
    return float((wide.iloc[:, 0] - wide.iloc[:, 1]).abs().mean()) if wide.shape[1] > 1 else float("nan")


def compare(controls: int, args, data=None, base: EvalParams | None = None, budgets=None,
            screen: str = "simulated") -> tuple[list[dict], list[dict]]:
    """Every gene against all controls and under each budget, same seeds; ``data`` defaults to
    the simulated screen of ``controls`` controls."""
    data = make_screen(args.genes, controls, args.dims, 64, seed=3) if data is None else data
    base = base or EvalParams(seeds=args.seeds)
    n_genes = data.obs.loc[~data.obs["is_control"], "perturbation"].nunique()
    full, t_full = timed(data, base, args.threads)
    print(f"{screen} {controls} controls, all: {t_full / n_genes:.2f} s/gene", flush=True)
    rows, speed = [], [{"screen": screen, "controls": controls, "budget": "all", "s/gene": t_full / n_genes,
                        "speed-up": 1.0}]
    for budget in budgets or args.budgets:
        sub, t_sub = timed(data, replace(base, max_controls=budget), args.threads)
        speed.append({"screen": screen, "controls": controls, "budget": budget, "s/gene": t_sub / n_genes,
                      "speed-up": t_full / t_sub})
        print(f"{screen} {controls} controls, budget {budget}: {t_sub / n_genes:.2f} s/gene", flush=True)
        for metric, label in METRICS.items():
            d = paired(sub, full, metric)
            mean, lo, hi = bootstrap_ci(d, seed=0)
            rows.append({"screen": screen, "controls": controls, "budget": budget, "metric": label,
                         "genes": int(d.size),
                         "seeds": len(args.seeds), "budget - all": mean, "95% CI low": lo, "95% CI high": hi,
                         "agrees": "yes" if lo <= 0 <= hi and -0.01 <= lo and hi <= 0.01 else "NO",
                         "mean abs diff per gene": float(d.abs().mean()),
                         "seed noise (all)": seed_noise(full, metric),
                         "mean (all)": float(full.groupby("gene")[metric].mean().mean())})
    return rows, speed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--controls", default="20000,80000")
    ap.add_argument("--budgets", default="2000,5000,10000")
    ap.add_argument("--genes", type=int, default=24)
    ap.add_argument("--dims", type=int, default=128)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bbbc021-budgets", default="",
                    help="also BBBC021 by MoA (held-back DMSO wells as controls) under these budgets, e.g. 36,54")
    ap.add_argument("--docs", action="store_true", help="write the tables into docs/benchmarks.md")
    ap.add_argument("--hpc", action="store_true", help="write the sizing table into docs/hpc.md")
    args = ap.parse_args()
    args.budgets = [int(b) for b in args.budgets.split(",")]
    args.seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    agreement, speed = [], []
    for controls in (int(c) for c in args.controls.split(",")):
        a, s = compare(controls, args)
        agreement += a
        speed += s
    if args.bbbc021_budgets:
        from evaluate import bbbc021

        data = bbbc021("Metadata_MoA")
        if data is None:
            print("BBBC021: skipped (../shared/data is absent)")
        else:
            held = data[~(data.obs["is_control"] & data.obs["transform_fit"])].copy()
            base = EvalParams(seeds=args.seeds, min_samples=3, min_data_in_leaf=3, min_controls_per_batch=5)
            a, s = compare(int(held.obs["is_control"].sum()), args, held, base,
                           [int(b) for b in args.bbbc021_budgets.split(",")], "BBBC021 by MoA")
            agreement += a
            speed += s
    agreement, speed = pd.DataFrame(agreement), pd.DataFrame(speed)
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(agreement.to_string(index=False, float_format=lambda v: f"{v:+.4f}"))
        print(speed.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(f"total {time.perf_counter() - t0:.0f} s", flush=True)
    if args.docs:
        head = (f"`python benchmarks/controls.py --docs`: {args.genes} genes x {args.dims} dims, seeds "
                f"{','.join(map(str, args.seeds))}, {args.threads} genes in parallel, one process.")
        write_block(DOCS / "benchmarks.md", "control-budget", f"{head}\n\n{markdown(agreement, '+.4f')}")
        write_block(DOCS / "benchmarks.md", "control-budget-speed", markdown(speed, ".2f"))
    if args.hpc:
        write_block(DOCS / "hpc.md", "control-budget-sizing", sizing(agreement, speed))


def sizing(agreement: pd.DataFrame, speed: pd.DataFrame) -> str:
    """Per screen and budget: the speed-up and each metric's mean change [95% CI] against all controls."""
    rows = []
    for (screen, controls, budget), part in agreement.groupby(["screen", "controls", "budget"], sort=False):
        sp = speed[(speed["screen"] == screen) & (speed["controls"] == controls) & (speed["budget"] == budget)]
        row = {"screen": screen, "controls": controls, "budget": budget, "speed-up": sp["speed-up"].iloc[0]}
        for _, r in part.iterrows():
            row[f"{r['metric']} change [95% CI]"] = f"{r['budget - all']:+.3f} [{r['95% CI low']:+.3f}, " \
                                                    f"{r['95% CI high']:+.3f}]"
        rows.append(row)
    return markdown(pd.DataFrame(rows), ".2f")


if __name__ == "__main__":
    main()
