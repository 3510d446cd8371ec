"""Known-relationship recall of the demo's gene maps, with the biology on and off.

    python benchmarks/maps.py [--workdir /tmp/cellica-maps] [--docs]
        [--bbbc021 ../shared/data/bbbc021_profiles_weeks1-5]

Runs the real Snakefile on the demo's config twice, up to the gene maps' recall
(``results/maps/recall.parquet``; the classifiers are not needed):

* ``simulate.complexes: shared`` (the demo): genes named after members of real CORUM
  complexes, the members of one complex sharing one factor effect: the maps have known
  relationships to recover;
* ``simulate.complexes: independent`` (the negative control): the same names, each gene's
  effect drawn alone: recall should sit at the null.

Prints recall per variant and source with its 95% interval (genes resampled) and the null,
then the paired differences PCA+ICA - PCA and PCA+ICA - PCA+Rand; ``--docs`` writes both into
``docs/maps.md`` (``maps-demo`` block). About 12 minutes on 2 cores (two MAE trainings).

``--bbbc021 FOLDER`` scores instead a compound-level map of the real BBBC021 CellProfiler
profiles (``config/examples/cellprofiler_profiles.yaml`` with the compound as the perturbation
and its concentrations as the "guides"): mechanism-of-action labels stand in for known
relationships, every pair of different compounds with the same MoA (from the table's
``Metadata_MoA`` column, the BBBC021 MoA annotation) being a known pair, given to the DAG as
``maps.annotation_file`` (``maps-bbbc021`` block). About 2 minutes.

``--sources`` only counts the shipped pair lists (``maps-sources`` block): seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
from _docs import DOCS, markdown, write_block

from cellica._launch import run_snakemake
from cellica.registry import CLAIMED_ORDER, variant_order

REPO = Path(__file__).resolve().parents[1]
MODES = ("shared", "independent")


def run(workdir: Path, mode: str, configfile: Path = REPO / "config" / "config.yaml",
        results: str = "results") -> Path:
    """The DAG up to the recall table (``simulate.complexes: mode`` for the demo); returns its maps folder."""
    override = ["--config", f"simulate={{complexes: {mode}}}"] if mode in MODES else []
    t0 = time.perf_counter()
    done = run_snakemake(*override, "--", f"{results}/maps/recall.parquet", directory=workdir, configfile=configfile)
    if done.returncode:
        sys.exit(f"snakemake failed ({mode}):\n{done.stderr[-3000:]}")
    print(f"{mode}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return workdir / results / "maps"


def bbbc021(folder: Path, workdir: Path) -> Path:
    """The compound-level map of BBBC021 and its recall of same-MoA compound pairs."""
    import yaml

    table = next(folder.glob("*well_profiles.csv.gz"))
    moa = pd.read_csv(table, usecols=["Metadata_Compound", "Metadata_MoA", "Metadata_is_control"])
    moa = moa[~moa["Metadata_is_control"]].drop_duplicates("Metadata_Compound")
    pairs = moa.merge(moa, on="Metadata_MoA")
    pairs = pairs[pairs["Metadata_Compound_x"] < pairs["Metadata_Compound_y"]]
    workdir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"entity1": pairs["Metadata_Compound_x"], "entity2": pairs["Metadata_Compound_y"],
                  "source": "same MoA"}).to_csv(workdir / "moa_pairs.csv", index=False)
    config = yaml.safe_load((REPO / "config" / "examples" / "cellprofiler_profiles.yaml").read_text())
    config["features"]["path"] = str(table.resolve())
    config["features"]["column_map"]["perturbation"] = "Metadata_Compound"
    config["features"]["extra_metadata"] = ["n_images", "Metadata_Concentration"]
    config["maps"] = {"guide_key": "Metadata_Concentration", "annotation_file": str(workdir / "moa_pairs.csv")}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    return run(workdir, "bbbc021", workdir / "config.yaml", config["results_dir"])


def fmt(value, lo, hi) -> str:
    return "n/a" if value != value else f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


WHAT = {"CORUM": "members of one protein complex", "HuMAP": "hu.MAP protein complexes",
        "Reactome": "interactions within pathways", "SIGNOR": "causal signalling relationships",
        "StringDB": "high-confidence STRING interactions"}


def sources() -> str:
    """Pairs and genes of each shipped source, with its licence."""
    from cellica.core.relationships import LICENCES
    from cellica.maps.annotations import load_sources

    pairs = load_sources(list(LICENCES))
    rows = [{"source": s, "what": WHAT[s], "pairs (unordered, distinct)": len(t),
             "genes": len(set(t["gene_a"]) | set(t["gene_b"])), "licence": LICENCES[s]}
            for s, t in pairs.groupby("source", sort=False)]
    return markdown(pd.DataFrame(rows))


def tables(maps: dict[str, Path], baselines=CLAIMED_ORDER[1:]) -> str:
    recall, diffs = [], []
    for mode, folder in maps.items():
        recall.append(pd.read_parquet(folder / "recall.parquet").assign(screen=mode))
        diffs.append(pd.read_parquet(folder / "recall_differences.parquet").assign(screen=mode))
    r = pd.concat(recall)
    variants = variant_order(set(r["variant"]))
    rows = []
    for (mode, source), t in r.groupby(["screen", "source"], sort=False):
        t = t.set_index("variant")
        rows.append({"screen": mode, "source": source, "known pairs": int(t["n_pairs"].iloc[0]),
                     "null": f"{t['null_recall'].iloc[0]:.3f}",
                     **{v: fmt(t.loc[v, "recall"], t.loc[v, "ci_low"], t.loc[v, "ci_high"]) for v in variants}})
    d = pd.concat(diffs)
    d = d[d["baseline"].isin(list(baselines)) & (d["variant"] == "pca_ica")]
    drows = [{"screen": x.screen, "source": x.source, "comparison": f"{x.variant} - {x.baseline}",
              "difference [95% CI]": fmt(x.difference, x.ci_low, x.ci_high)} for x in d.itertuples()]
    return (f"Recall of known pairs per variant (95% interval over genes resampled):\n\n{markdown(pd.DataFrame(rows))}"
            f"\n\nPaired differences (the same gene resamples for both maps):\n\n{markdown(pd.DataFrame(drows))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/cellica-maps"))
    ap.add_argument("--docs", action="store_true", help="write the tables into docs/maps.md")
    ap.add_argument("--bbbc021", type=Path, default=None, help="score the BBBC021 compound map instead")
    ap.add_argument("--sources", action="store_true", help="only count the shipped pair lists")
    args = ap.parse_args()
    if args.sources:
        text = sources()
        print(text)
        if args.docs:
            write_block(DOCS / "maps.md", "maps-sources", text)
        return
    if args.bbbc021:
        maps, block = {"BBBC021": bbbc021(args.bbbc021, args.workdir / "bbbc021")}, "maps-bbbc021"
    else:
        maps, block = {mode: run(args.workdir / mode, mode) for mode in MODES}, "maps-demo"
    text = tables(maps)
    print(text)
    if args.docs:
        write_block(DOCS / "maps.md", block, text)


if __name__ == "__main__":
    main()
