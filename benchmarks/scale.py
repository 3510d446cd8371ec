"""Genome scale: what each rule of the real DAG costs as a screen grows, and what a whole
genome-wide screen will cost.

    python benchmarks/scale.py [--preset small|default|large] [--points 20000x100,80000x100]
                               [--dims 384] [--workdir /tmp/cellica-scale] [--budget 500] [--cheap-trees 10]
                               [--target-genes 20000] [--target-tiles 2000000] [--target-controls 100000]
                               [--nodes 10] [--cores-per-node 32] [--docs]

Each point (controls x genes) is an embedding-level synthetic screen written straight to a
parquet table (no MAE): 16 latent factors mixed linearly into ``--dims`` dims plus noise,
8 batches each shifting the embedding, genes with 4 guides of 50 tiles each, every guide in
its own batch (so the classifiers hold out 4 batches per gene). The real Snakefile runs it
from ``import_features`` to the HTML reports (variants base, pca, pca_ica, pca_rand; one
evaluation seed; gene maps scored on known pairs of genes that share their strongest factor) with
``--cores``, twice over one results folder:

1. every control (``evaluate.max_controls: null``, the default), for a sample of
   ``--sample-genes`` genes per variant (chunk 0 of ``genes / sample`` chunks): the
   per-gene classifier cost at full controls;
2. the whole DAG with cheap classifiers (``evaluate.max_controls: --budget``, ``n_trees:
   --cheap-trees``) so that the smallest point stays under ~10 minutes: every other rule
   (gather, batch metrics, summary, reports) at its real size, on per-gene tables of the
   real shape. These classifiers' time is shown but not extrapolated (the budget's own
   effect and speed-up: ``benchmarks/controls.py``).

Snakemake's ``benchmark:`` files give each job's wall time and peak RSS. Each stage's summed
job time is fitted as fixed + slope x what it grows with: the rows it reads (import,
transforms, batch metrics, gene maps, the report index) or the genes (gather, recall, summary,
report pages); "grows with" shows the
log-log exponent of the totals (1 = linear; below 1 while start-up dominates). The per-gene
classifier time (from the evaluate logs, without start-up) is fitted as a power law in the
controls. Peak memory is fitted as fixed + k x the input matrix (k: how many copies of its
input a job holds) + c x the controls' matrix (what grows with the controls alone: the ICA
fit set, LightGBM's binning of the training controls); the points vary the two apart.
All is extrapolated to the target screen: CPU-hours per stage and variant, peak memory per job, the wall time on a
SLURM cluster of ``--nodes`` nodes with the shipped profile's threads, and the
``evaluate.chunks`` that keeps each job under two hours. ``--docs`` writes the tables into
``docs/benchmarks.md`` (``scale-*`` blocks).
"""

from __future__ import annotations

import argparse
import math
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from _docs import DOCS, markdown, write_block

from cellica._launch import run_snakemake
from cellica.core.jobtimes import benchmark_jobs
from cellica.registry import PAPER_VARIANTS

REPO = Path(__file__).resolve().parents[1]
VARIANTS = list(PAPER_VARIANTS)
PRESETS = {
    "small": ["20000x100"],
    "default": ["20000x100", "80000x100", "20000x400"],
    "large": ["20000x100", "80000x100", "320000x100", "20000x400", "20000x1600"],
}
GUIDES, TILES_PER_GUIDE, BATCHES, FACTORS = 4, 50, 8, 16


def make_table(controls: int, genes: int, dims: int, path: Path, seed: int = 0) -> int:
    """Write the synthetic screen as parquet; returns its rows."""
    rng = np.random.default_rng(seed)
    mixing = rng.standard_normal((FACTORS, dims)).astype(np.float32)
    batch_shift = rng.normal(0, 0.5, (BATCHES, dims)).astype(np.float32)
    effects = np.zeros((genes, FACTORS), np.float32)
    for g in range(genes):
        hit = rng.choice(FACTORS, rng.integers(1, 4), replace=False)
        effects[g, hit] = rng.uniform(0.3, 1.5, hit.size) * rng.choice([-1, 1], hit.size)
    blocks, meta = [], []
    ctrl_batch = np.arange(controls) % BATCHES
    blocks.append((ctrl_batch, np.zeros((controls, FACTORS), np.float32)))
    meta.append(pd.DataFrame({"batch": ctrl_batch, "perturbation": "non-targeting", "guide": "non-targeting",
                              "is_control": True, "well": [f"C{i // 50:05d}" for i in range(controls)]}))
    for g in range(genes):
        for k, b in enumerate(rng.choice(BATCHES, GUIDES, replace=False)):
            n = TILES_PER_GUIDE
            blocks.append((np.full(n, b), np.broadcast_to(effects[g], (n, FACTORS))))
            meta.append(pd.DataFrame({"batch": b, "perturbation": f"G{g:05d}", "guide": f"G{g:05d}_{k + 1}",
                                      "is_control": False, "well": f"G{g:05d}_{k + 1}"}, index=range(n)))
    batch = np.concatenate([b for b, _ in blocks])
    z = rng.standard_normal((batch.size, FACTORS)).astype(np.float32) + np.concatenate([e for _, e in blocks])
    x = z @ mixing + batch_shift[batch] + rng.normal(0, 0.3, (batch.size, dims)).astype(np.float32)
    obs = pd.concat(meta, ignore_index=True)
    obs["batch"] = "B" + obs["batch"].astype(str)
    obs["plate"] = obs["batch"] + "-P1"
    obs["tile_id"] = [f"t{i}" for i in range(len(obs))]
    table = pd.concat([obs, pd.DataFrame(x, columns=[f"f{j}" for j in range(dims)])], axis=1)
    table.to_parquet(path, index=False)
    known_pairs(effects, path.with_name("known_pairs.csv"))
    return len(table)


def known_pairs(effects: np.ndarray, path: Path, per_gene: int = 6) -> int:
    """The gene maps' known relationships: each gene paired with up to ``per_gene`` genes that share
    its strongest factor (StringDB in efaar's lists has ~6 pairs per gene)."""
    top = np.abs(effects).argmax(axis=1)
    pairs = []
    for f in np.unique(top):
        members = np.flatnonzero(top == f)
        for i, g in enumerate(members):
            pairs += [(f"G{g:05d}", f"G{h:05d}") for h in members[i + 1:i + 1 + per_gene // 2]]
    pd.DataFrame(pairs, columns=["entity1", "entity2"]).assign(source="synthetic").to_csv(path, index=False)
    return len(pairs)


def write_config(point: Path, table: Path, genes: int, chunks: int, evaluate: dict) -> Path:
    cfg = {"results_dir": str(point / "results"), "reports_dir": str(point / "reports"), "source": "features",
           "features": {"path": str(table), "id_column": "tile_id", "extra_metadata": ["guide"],
                        "column_map": {k: k for k in ("plate", "well", "batch", "perturbation", "is_control")}},
           "transform": {"variants": VARIANTS},
           "maps": {"annotation_file": str(table.with_name("known_pairs.csv"))},
           "evaluate": {"chunks": chunks, "seeds": [0], **evaluate}}
    path = point / f"config-{chunks}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def snakemake(config: Path, cores: int, targets: list[str], log: Path) -> float:
    t0 = time.perf_counter()
    done = run_snakemake("--rerun-incomplete", *targets, directory=REPO, configfile=config, cores=cores, log=log)
    if done.returncode:
        raise SystemExit(f"snakemake failed ({done.returncode}): see {log}")
    return time.perf_counter() - t0


def jobs(bench: Path) -> pd.DataFrame:
    """One row per job: rule, job, seconds, peak RSS (MB), CPU seconds (the report's own reader)."""
    return benchmark_jobs(bench).rename(columns={"step": "rule", "cpu_seconds": "cpu_s"})


def classifier_seconds(log: Path) -> tuple[int, float]:
    """Genes and seconds of the classifiers alone, from an evaluate job's log line."""
    m = re.search(r"seed \d+: (\d+) genes .* in ([\d.]+) s", log.read_text())
    return (int(m.group(1)), float(m.group(2))) if m else (0, float("nan"))


def run_point(spec: str, args) -> list[dict]:
    controls, genes = (int(v) for v in spec.split("x"))
    point = Path(args.workdir) / f"{spec}x{args.dims}"
    point.mkdir(parents=True, exist_ok=True)
    table = point / "features.parquet"
    t0 = time.perf_counter()
    rows = make_table(controls, genes, args.dims, table) if not table.is_file() else pd.read_parquet(
        table, columns=["tile_id"]).shape[0]
    print(f"== {spec} x {args.dims}: {rows} rows ({time.perf_counter() - t0:.0f} s to write)", flush=True)
    results = point / "results"
    sample_chunks = max(2, genes // args.sample_genes)
    full = write_config(point, table, genes, sample_chunks, {})
    targets = [str(results / f"eval/{v}/chunks/0-of-{sample_chunks}.parquet") for v in VARIANTS]
    wall_a = snakemake(full, args.cores, targets, point / "snakemake.log")
    chunks = max(1, math.ceil(genes / args.genes_per_chunk))
    cheap = {"max_controls": args.budget, "n_trees": args.cheap_trees}
    wall_b = snakemake(write_config(point, table, genes, chunks, cheap), args.cores, [], point / "snakemake.log")
    print(f"   sampled default classifiers {wall_a:.0f} s, whole DAG with cheap classifiers {wall_b:.0f} s", flush=True)
    out = []
    for _, j in jobs(results / "benchmarks").iterrows():
        row = {"point": spec, "controls": controls, "genes": genes, "dims": args.dims, "rows": rows,
               "input_mb": rows * args.dims * 4 / 1e6, **j}
        if j["rule"] == "evaluate":
            variant, chunk = Path(j["job"]).name.rsplit("-", 3)[0], j["job"]
            n_genes, clf_s = classifier_seconds(results / "logs" / "evaluate" / f"{Path(j['job']).name}.log")
            row.update(variant=variant, budget="cheap" if chunk.endswith(f"of-{chunks}") else "all",
                       eval_genes=n_genes, classifier_s=clf_s)
        out.append(row)
    return out


def memory_fit(input_mb: np.ndarray, controls_mb: np.ndarray, rss_mb: np.ndarray) -> tuple[float, float, float]:
    """Peak RSS = fixed + k x input matrix + c x controls matrix (MB): k is how many copies of its
    input a job holds at once, c what grows with the controls alone (the ICA fit set, LightGBM's
    binning of the training controls). The points vary both apart (same input, other controls);
    a term that comes out negative is dropped (NaN when it cannot be told apart)."""
    x1, x2, y = (np.asarray(v, float) for v in (input_mb, controls_mb, rss_mb))
    terms = [t for t, x in (("k", x1), ("c", x2)) if np.unique(x).size > 1]
    while terms:
        design = np.column_stack([np.ones_like(y)] + [x1 if t == "k" else x2 for t in terms])
        if np.linalg.matrix_rank(design) < design.shape[1]:
            terms.pop()
            continue
        coef = np.linalg.lstsq(design, y, rcond=None)[0]
        if (coef[1:] >= 0).all():
            fitted = dict(zip(terms, coef[1:], strict=True))
            return float(coef[0]), float(fitted.get("k", 0.0)), float(fitted.get("c", 0.0))
        terms.pop(int(np.argmin(coef[1:])))
    return float(np.nanmin(y)), float("nan"), float("nan")


def linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``y = fixed + slope x`` (jobs' start-up is the fixed part); through the origin with one size."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if np.unique(x).size < 2:
        return 0.0, float(np.mean(y / x))
    slope, fixed = np.polyfit(x, y, 1)
    return float(max(fixed, 0.0)), float(max(slope, 0.0))


def power_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``y = c x^a`` by least squares on logs; a = 1 when x does not vary."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0)
    if np.unique(x[ok]).size < 2:
        return float(np.nanmean(y[ok]) / np.nanmean(x[ok])), 1.0
    a, logc = np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)
    return float(np.exp(logc)), float(a)


# rule -> what its cost grows with
DRIVERS = {"import_features": "rows", "transform": "rows", "evaluate": "controls", "gather_eval": "genes",
           "batch_metrics": "rows", "gene_map": "rows", "recall": "genes", "summarize": "genes",
           "report_pages": "genes", "report": "rows"}  # the index draws every variant's wells (UMAP)


def stage_table(measured: pd.DataFrame) -> pd.DataFrame:
    """Per rule and point: jobs, summed seconds, largest peak RSS."""
    m = measured.copy()
    label = {"all": "evaluate (default: all controls, sampled genes)", "cheap": "evaluate (cheap, whole DAG)"}
    m["kind"] = np.where(m["rule"] == "evaluate", m["budget"].map(label), m["rule"])
    g = m.groupby(["point", "kind"], sort=False)
    out = g.agg(jobs=("job", "size"), seconds=("seconds", "sum"), max_rss_mb=("max_rss_mb", "max"),
                input_mb=("input_mb", "first")).reset_index()
    per_gene = m[m["rule"] == "evaluate"].groupby(["point", "kind"])[["classifier_s", "eval_genes"]].sum()
    per_gene = (per_gene["classifier_s"] / per_gene["eval_genes"]).rename("s/gene (classifiers)")
    return out.merge(per_gene.reset_index(), on=["point", "kind"], how="left")


def extrapolate(measured: pd.DataFrame, args) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per stage at the target screen: CPU-hours, jobs, hours and peak memory per job; and the
    settings and wall time on the cluster that follow from them."""
    target = {"rows": args.target_tiles, "genes": args.target_genes, "controls": args.target_controls}
    target_mb = args.target_tiles * args.dims * 4 / 1e6
    target_ctrl_mb = args.target_controls * args.dims * 4 / 1e6
    held_back = 0.5  # transform.fit_fraction: half of each batch's controls are left for the classifiers
    rows = []
    for rule, driver in DRIVERS.items():
        m = measured[measured["rule"] == rule]
        if rule == "evaluate":
            m = m[m["budget"] == "all"]
        if m.empty:
            continue
        peaks = m.assign(controls_mb=m["controls"] * args.dims * 4 / 1e6).groupby("point")
        fixed, k, c = memory_fit(*peaks[["input_mb", "controls_mb", "max_rss_mb"]].max().to_numpy().T)
        row = {"stage": rule, "peak MB = fixed": fixed, "+ k x input (k)": k, "+ c x controls (c)": c,
               "peak MB per job": fixed + np.nan_to_num(k) * target_mb + np.nan_to_num(c) * target_ctrl_mb}
        if rule == "evaluate":
            # one gene's classifiers (every fold), single-threaded, against the held-back controls
            per = m.groupby("point").agg(x=("controls", "first"), y=("classifier_s", "sum"), n=("eval_genes", "sum"))
            c, a = power_fit(per["x"] * held_back, per["y"] / per["n"] * args.cores)
            per_gene = c * (target["controls"] * held_back) ** a
            row.update({"grows with": f"controls^{a:.2f} per gene", "CPU s per gene": per_gene,
                        "CPU-hours": per_gene * args.target_genes * len(VARIANTS) / 3600})
        else:
            per = m.groupby("point").agg(x=(driver, "first"), y=("seconds", "sum"))
            _, a = power_fit(per["x"], per["y"])
            fixed_s, per_unit = linear_fit(per["x"], per["y"])
            threads = 2 if rule == "transform" else 1
            row.update({"grows with": f"{driver}^{a:.2f}",
                        "CPU-hours": (fixed_s + per_unit * target[driver]) * threads / 3600})
        rows.append(row)
    table = pd.DataFrame(rows)
    return table, cluster_plan(table, args)


def cluster_plan(table: pd.DataFrame, args) -> pd.DataFrame:
    """Job sizes for the SLURM profile and the wall time on ``--nodes`` nodes."""
    hours = table.set_index("stage")["CPU-hours"]
    mem = table.set_index("stage")["peak MB per job"]
    slots = args.nodes * args.cores_per_node
    threads = 8  # set-threads: evaluate_chunk in the shipped profile
    eval_h = float(hours.get("evaluate", np.nan))
    chunks = max(1, math.ceil(eval_h / len(VARIANTS) / (args.job_hours * threads)))
    pages_h = float(hours.get("report_pages", 0.0))
    page_chunks = max(1, math.ceil(pages_h / 0.5))  # page jobs of half an hour
    # critical path: import, the slowest transform (one job per variant), the classifiers spread
    # over every core, their gather, the summary, the pages spread over the cores, the index
    serial = sum(float(hours.get(s, 0.0)) for s in ("import_features", "recall", "summarize", "report"))
    wall = (serial + float(hours.get("transform", 0.0)) / len(VARIANTS) / 2 + eval_h / slots
            + float(hours.get("gene_map", 0.0)) / len(VARIANTS)
            + float(hours.get("gather_eval", 0.0)) / len(VARIANTS) + pages_h / slots)
    rows = [("evaluate.chunks", f"{chunks}", f"jobs of {threads} threads under {args.job_hours:g} h each, per variant"),
            ("report.chunks", f"{page_chunks}", "page jobs of about half an hour"),
            ("evaluate_chunk mem_mb", f"{_round_mb(mem.get('evaluate'))}", "peak per job x 1.5"),
            ("transform mem_mb", f"{_round_mb(mem.get('transform'))}", "peak per job x 1.5"),
            ("batch_metrics mem_mb", f"{_round_mb(mem.get('batch_metrics'))}", "peak per job x 1.5"),
            ("gene_map mem_mb", f"{_round_mb(mem.get('gene_map'))}", "peak per job x 1.5"),
            ("recall mem_mb", f"{_round_mb(mem.get('recall'))}", "peak per job x 1.5"),
            ("CPU-hours, classifiers (all variants)", f"{eval_h:,.0f}", "the default: every control"),
            ("CPU-hours, every other stage", f"{float(hours.drop('evaluate', errors='ignore').sum()):,.1f}", ""),
            ("wall hours on the cluster", f"{wall:,.1f}", f"{args.nodes} nodes x {args.cores_per_node} cores, "
             "jobs packed perfectly (a lower bound)")]
    return pd.DataFrame(rows, columns=["setting or figure", "value", "from"])


def _round_mb(mb) -> int:
    """A memory request: 1.5 x the peak, rounded up to 1,000 MB."""
    mb = float(mb) if mb is not None else float("nan")
    return int(math.ceil(1.5 * mb / 1000) * 1000) if mb == mb else 0


def _summarise(measured: pd.DataFrame, args, took: float, points: list[str]) -> None:
    stages = stage_table(measured)
    model, plan = extrapolate(measured, args)
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(stages.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        print(model.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        print(plan.to_string(index=False))
    if args.docs:
        head = (f"`python benchmarks/scale.py --points {','.join(points)} --docs` ({args.dims} dims, "
                f"{args.cores} cores, {took / 60:.0f} min)")
        write_block(DOCS / "benchmarks.md", "scale-measured", f"{head}\n\n{markdown(stages, '.3g')}")
        target = (f"Target: {args.target_genes:,} genes, {args.target_tiles:,} tiles ({args.target_controls:,} "
                  f"controls, half of them held back for the classifiers), {args.dims} dims, variants "
                  f"{', '.join(VARIANTS)}, one seed.")
        write_block(DOCS / "benchmarks.md", "scale-extrapolated",
                    f"{target}\n\n{markdown(model, '.3g')}\n\n{markdown(plan)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=PRESETS, default="small")
    ap.add_argument("--points", default=None, help="controls x genes, comma-separated (overrides --preset)")
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--workdir", default="/tmp/cellica-scale")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--budget", type=int, default=500, help="evaluate.max_controls of the whole-DAG run")
    ap.add_argument("--cheap-trees", type=int, default=10, help="evaluate.n_trees of the whole-DAG run")
    ap.add_argument("--sample-genes", type=int, default=2, help="genes per variant classified at full controls")
    ap.add_argument("--genes-per-chunk", type=int, default=50)
    ap.add_argument("--target-genes", type=int, default=20000)
    ap.add_argument("--target-tiles", type=int, default=2_000_000)
    ap.add_argument("--target-controls", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--cores-per-node", type=int, default=32)
    ap.add_argument("--job-hours", type=float, default=2.0, help="longest classifier job wanted")
    ap.add_argument("--from-csv", default=None, help="jobs.csv of an earlier run: only recompute the tables")
    ap.add_argument("--took-min", type=float, default=float("nan"), help="with --from-csv: that run's minutes")
    ap.add_argument("--docs", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    points = (args.points or ",".join(PRESETS[args.preset])).split(",")
    if args.from_csv:  # recompute the tables from an earlier run's measurements
        measured = pd.read_csv(args.from_csv)
        points = list(dict.fromkeys(measured["point"]))
    else:
        measured = pd.DataFrame([r for p in points for r in run_point(p, args)])
        measured.to_csv(Path(args.workdir) / "jobs.csv", index=False)
    took = time.perf_counter() - t0
    print(f"benchmark took {took / 60:.1f} min on {args.cores} cores", flush=True)
    _summarise(measured, args, took if not args.from_csv else args.took_min * 60, points)


if __name__ == "__main__":
    main()
