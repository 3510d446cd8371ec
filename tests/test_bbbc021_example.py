"""End-to-end: the shipped BBBC021 example (real CellProfiler well profiles of a compound screen,
``config/examples/cellprofiler_profiles.yaml``) run by the real Snakefile to the report, and the
report read back as a user reads it: every number against its table, and words that follow the
data (compounds, the random split every compound used, no known pairs to recall)."""

import re
from html import unescape
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cellica.registry import PAPER_VARIANTS
from tests.conftest import REPO, shared
from tests.report_checks import Tables, check_index_numbers, check_table_numbers
from tests.test_workflow import snakemake

pytestmark = pytest.mark.e2e
EXAMPLE = REPO / "config" / "examples" / "cellprofiler_profiles.yaml"


@pytest.fixture(scope="module")
def bbbc021_run(tmp_path_factory):
    """The example as shipped, but for the paper's four variants (the three batch-correction
    comparators are the same code as on the tiny run) and results in a scratch folder."""
    data = shared("bbbc021_profiles_weeks1-5")
    workdir = tmp_path_factory.mktemp("bbbc021")
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg["features"]["path"] = str(data / Path(cfg["features"]["path"]).name)
    cfg["transform"]["variants"] = list(PAPER_VARIANTS)
    config = workdir / "bbbc021.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run = snakemake(workdir, configfile=config)
    assert run.returncode == 0, run.stderr[-4000:]
    return workdir / cfg["results_dir"], workdir / cfg["reports_dir"]


def _text(html: str) -> str:
    """What a reader sees: no scripts, styles or tags."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_every_shown_number_of_the_compound_screen_equals_its_table(bbbc021_run):
    results, reports = bbbc021_run
    check_index_numbers(results, reports, entity="compound", least=12)
    check_table_numbers(results, reports, least=12)


def test_the_pages_speak_of_compounds_and_the_split_each_used(bbbc021_run):
    results, reports = bbbc021_run
    index = (reports / "index.html").read_text()
    seen = _text(index)
    assert "69 compounds × 4 feature sets (variants)" in seen and "Compound maps" in seen
    assert " of \" + rows.length + \" compounds\"" in index  # the gene table's counter
    # Every compound occurs in one week: no held-out AUROC exists, and the claim says why.
    claims = {row[0]: (row[1], row[2]) for row in Tables(index).tables["claims"][1:]}
    verdict, detail = claims["AUROC (held-out batches): PCA+ICA > PCA > PCA+Rand, Base"]
    assert verdict == "not tested" and "no compound was evaluated on held-out batches" in detail
    # Known relationships are gene databases: nothing to recall, said once, never "inconclusive".
    recall = next(v for k, v in claims.items() if k.startswith("Known relationships: PCA+ICA's compound map"))
    assert recall[0] == "not tested" and "no known pair has both members in the map" in recall[1]
    comps = [r for r in Tables(index).tables["comparisons"][1:] if r[0] == "recall"]
    assert comps and {r[7] for r in comps} == {"not tested"}
    assert "nothing to recall" in seen and "recall of known pairs (null" not in index  # a line, no empty chart
    assert "AUROC, random split (mean over compounds)" in index  # the AUROC there is, charted with chance
    for words in ("no gene", "genes would decide", "per-gene sd", "Gene map", "(auroc", "MAP vs", "KNN"):
        assert words not in seen, words
    # Each gene page states the split its classifiers used: a random one, never held-out batches.
    per_gene = pd.read_parquet(results / "eval" / "pca_ica" / "per_gene.parquet")
    assert set(per_gene["split"]) == {"random"}
    pages = sorted(p for p in (reports / "genes").rglob("*.html") if p.name != "index.html")
    assert len(pages) == per_gene["gene"].nunique() == 69
    for page in pages[:5]:
        text = _text(page.read_text())
        assert "stratified random split (this compound was seen in one batch" in text
        assert "held-out batches" not in text and "held-out batch's fold" not in text
