"""Time and peak memory of a run's jobs, from Snakemake's ``benchmark:`` files.

Read at the end of every run (its log), by the report's index and by the benchmarks.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def benchmark_jobs(bench_dir: Path | None) -> pd.DataFrame:
    """One row per job from Snakemake's ``benchmark:`` files: step (the rule's folder or file
    name), job (its path without suffix), wall seconds, CPU seconds and peak RSS (MB)."""
    rows = []
    if bench_dir and bench_dir.is_dir():
        for tsv in sorted(bench_dir.rglob("*.tsv")):
            t = pd.read_csv(tsv, sep="\t")
            rel = tsv.relative_to(bench_dir).with_suffix("")
            rows.append({"step": rel.parts[0] if len(rel.parts) > 1 else rel.name, "job": rel.as_posix(),
                         "seconds": float(t["s"].iloc[0]),
                         "cpu_seconds": float(t["cpu_time"].iloc[0]) if "cpu_time" in t else float("nan"),
                         "max_rss_mb": float(t["max_rss"].iloc[0]) if "max_rss" in t else float("nan")})
    return pd.DataFrame(rows, columns=["step", "job", "seconds", "cpu_seconds", "max_rss_mb"])


def stage_times(bench_dir: Path | None) -> pd.DataFrame:
    """Per rule (:func:`benchmark_jobs` summed): jobs, summed and longest wall time, summed CPU
    time and the largest peak memory of any one job (what a cluster request needs)."""
    jobs = benchmark_jobs(bench_dir)
    table = jobs.groupby("step", sort=False).agg(
        jobs=("seconds", "size"), seconds=("seconds", "sum"), longest=("seconds", "max"),
        cpu_seconds=("cpu_seconds", "sum"), max_rss_mb=("max_rss_mb", "max")).reset_index()
    return table[["step", "jobs", "seconds", "longest", "cpu_seconds", "max_rss_mb"]]


def times_text(bench_dir: Path | None) -> str:
    """:func:`stage_times` as aligned text (the end of a run's log)."""
    t = stage_times(bench_dir)
    if t.empty:
        return "no benchmark files"
    return t.to_string(index=False, float_format=lambda v: f"{v:.1f}")
