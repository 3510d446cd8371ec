"""The demo's per-variant table, written into the README from the run's own summary.

    snakemake --cores 2 && python benchmarks/demo_table.py [results/eval/summary.parquet]

Prints the table (means over genes with 95% bootstrap intervals, and the claims) and
replaces the block between the ``demo-table`` markers in README.md, so the README
shows what the pipeline produced, never numbers copied by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from _docs import markdown, write_block

from cellica.registry import METRICS, variant_order

REPO = Path(__file__).resolve().parents[1]
# The registry's metrics that have a short label, in its order.
ROWS = {name: m.short for name, m in METRICS.items() if m.short}


# Two decimals: a fresh demo run on another machine differed from this table in the third
# decimal in 29 of 105 numbers, by up to 0.007 (another CPU's kernels change the last bits of
# the features, and a classifier's splits can turn on them); the second decimal holds.
DECIMALS = 2
TOLERANCE = 0.01


def cell(r) -> str:
    if r.value != r.value:  # no value: e.g. the sparsity of a one-feature baseline
        return "n/a"
    text = f"{r.value:.{DECIMALS}f}"
    if r.ci_low == r.ci_low and r.ci_high == r.ci_high:
        text += f" [{r.ci_low:.{DECIMALS}f}, {r.ci_high:.{DECIMALS}f}]"
    return text


def seeds_used(summary: Path) -> list[int]:
    """The evaluation seeds of the run, from its per-gene tables beside the summary."""
    seeds = set()
    for table in summary.parent.glob("*/per_gene.parquet"):
        seeds |= set(pd.read_parquet(table, columns=["seed"])["seed"].astype(int))
    return sorted(seeds)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "results" / "eval" / "summary.parquet"
    s = pd.read_parquet(path)
    means = s[(s["table"] == "per_variant") & (s["row"] == "mean") & s["metric"].isin(ROWS)]
    variants = variant_order(set(means["variant"]))
    rows = []
    for metric, label in ROWS.items():
        m = means[means["metric"] == metric].set_index("variant")
        if len(m):
            rows.append({"metric": label, **{v: cell(m.loc[v]) if v in m.index else "n/a" for v in variants}})
    table = pd.DataFrame(rows)
    columns = [c for c in ("row", "verdict", "baselines") if c in s and (c != "baselines" or s[c].ne("").any())]
    claims = s[s["table"] == "claim"][columns].rename(columns={"row": "claim", "baselines": "beats every baseline"})
    caption = (f"Means over genes and the evaluation seeds {seeds_used(path)} (classifiers, ICA starts and "
               f"random rotations), with 95% bootstrap intervals, to {DECIMALS} decimals: a run on another "
               f"machine agrees within about {TOLERANCE} (another CPU's kernels change the last bits).")
    text = f"{caption}\n\n{markdown(table)}\n\n{markdown(claims)}"
    print(text)
    write_block(REPO / "README.md", "demo-table", text)


if __name__ == "__main__":
    main()
