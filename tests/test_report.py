import html
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.evaluate.batch import batch_metrics, phenotypic_activity
from cellica.evaluate.genes import evaluate_genes
from cellica.evaluate.params import EvalParams
from cellica.evaluate.summary import summary_table
from cellica.report._pages import ReportBuilder
from cellica.report.build import build_report
from cellica.report.content import ReportInputs

UNSAFE = ["GENE/1", "../etc", "<script>alert(1)</script>"]
FAST = EvalParams(n_trees=10, min_data_in_leaf=5, map_null_size=100)


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.links, self.scripts, self.tables, self._in_script = [], [], [], 0, False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.tables += tag == "table"
        if tag == "a":
            self.links.append(dict(attrs)["href"])
        self._in_script = tag == "script"

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)

    def handle_endtag(self, tag):
        self._in_script = False


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


@pytest.fixture(scope="module")
def eval_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    rng = np.random.default_rng(0)
    rows, xs = [], []
    for b in ("B1", "B2"):
        for gene in ["ctrl", *UNSAFE]:
            x = rng.normal(size=(30, 5))
            if gene == UNSAFE[0]:
                x[:, 1] += 2
            xs.append(x)
            rows += [{"plate": f"{b}P", "well": f"{gene}{k % 3}", "batch": b, "perturbation": gene,
                      "is_control": gene == "ctrl"} for k in range(30)]
    obs = pd.DataFrame(rows, index=[f"s{i}" for i in range(len(rows))])
    data = ad.AnnData(np.vstack(xs).astype(np.float32), obs=obs, var=pd.DataFrame(index=[f"f{i}" for i in range(5)]))
    paths = {"per_gene": {}, "importances": {}, "features": {}}
    per_gene, batches, acts = [], [], []
    for variant in ("base", "pca"):
        pg, imp = evaluate_genes(data, FAST, variant=variant)
        (root / variant).mkdir()
        pg.to_parquet(root / variant / "per_gene.parquet")
        imp.to_parquet(root / variant / "importances.parquet")
        data.uns["transform"] = {"variant": variant, "diagnostics": {"fit_rows": 60}}
        data.write_h5ad(root / f"{variant}.h5ad")
        paths["per_gene"][variant] = root / variant / "per_gene.parquet"
        paths["importances"][variant] = root / variant / "importances.parquet"
        paths["features"][variant] = root / f"{variant}.h5ad"
        per_gene.append(pg)
        batches.append(batch_metrics(data, variant, FAST))
        acts.append(phenotypic_activity(data, variant, FAST))
    summary_table(pd.concat(per_gene), pd.DataFrame(batches), pd.concat(acts)).to_parquet(root / "summary.parquet")
    return ReportInputs(summary=root / "summary.parquet", config_hash="abc123", **paths)


def test_index_and_gene_pages_are_complete_and_safe(eval_outputs, tmp_path):
    index = build_report(eval_outputs, tmp_path / "reports")
    page = parse(index)
    assert page.tables >= 3 and "svg" in page.tags
    text = index.read_text()
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "abc123" in text and "How to read this" in text
    gene_links = [link for link in page.links if link.startswith("genes/")]
    assert len(gene_links) == len(UNSAFE)
    for link in gene_links:
        target = (index.parent / link).resolve()
        assert target.is_file() and target.parent == (tmp_path / "reports" / "genes" / "0-of-1").resolve()
        gene_page = parse(target)
        assert "svg" in gene_page.tags and gene_page.tables >= 2
        assert "../../index.html" in gene_page.links
        assert "<script>alert" not in target.read_text()
    # Only the page's own sorting script, never a script from a gene name; no external resources.
    assert len(page.scripts) == 1 and "http" not in page.scripts[0]
    assert "Example tiles are unavailable" in (tmp_path / "reports" / gene_links[0]).read_text()


def test_unknown_gene_and_missing_inputs(eval_outputs, tmp_path):
    builder = ReportBuilder(eval_outputs, tmp_path)
    with pytest.raises(CellicaError, match=r"no results for gene\(s\) \['NOPE'\]"):
        builder.build_genes(["NOPE"])
    missing = ReportInputs(**{**eval_outputs.__dict__, "summary": tmp_path / "none.parquet"})
    with pytest.raises(CellicaError, match="summary .* does not exist"):
        ReportBuilder(missing, tmp_path)


def test_thousand_genes_index_stays_small(eval_outputs, tmp_path):
    pg = pd.read_parquet(eval_outputs.per_gene["base"])
    many = pd.concat([pg.assign(gene=[f"G{i:04d}_{j}" for j in range(len(pg))]) for i in range(334)])
    (tmp_path / "base").mkdir()
    many.to_parquet(tmp_path / "base" / "per_gene.parquet")
    inputs = ReportInputs(**{**eval_outputs.__dict__, "per_gene": {"base": tmp_path / "base" / "per_gene.parquet"}})
    builder = ReportBuilder(inputs, tmp_path / "r")
    index = builder.build_index()
    assert index.stat().st_size < 2_000_000
    assert "filter genes" in index.read_text()


def test_render_index_in_headless_chromium(eval_outputs, tmp_path):
    """What a browser shows: the table script ran (its count names every gene and entity), the rows
    it drew are the table's genes, and the painted page carries the charts' variant colours."""
    from PIL import Image

    from cellica.report._svg import PALETTE

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("Debian's chromium is not installed here")
    index = build_report(eval_outputs, tmp_path / "reports")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1280,2400"]
    dom = subprocess.run([*flags, "--dump-dom", index.as_uri()], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    genes = pd.read_parquet(eval_outputs.per_gene["base"])["gene"].unique()
    assert f'id="count">{len(genes)} of {len(genes)} genes</span>' in dom  # written by the page's script
    body = dom.split('<table id="genes">')[1].split("</table>")[0].split("<tbody>")[1]
    assert body.count("<tr") == len(genes)
    shot = tmp_path / "index.png"
    subprocess.run([*flags, f"--screenshot={shot}", index.as_uri()], check=True, capture_output=True, timeout=120)
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    colours = {tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in PALETTE[:2]}  # base and pca bars
    painted = {tuple(p) for p in np.unique(pixels, axis=0)}
    assert colours <= painted, "the variants' bars were not painted"


def test_pages_show_one_seed_of_a_multi_seed_run(eval_outputs, tmp_path):
    paths = {}
    for kind in ("per_gene", "importances"):
        paths[kind] = {}
        for v, p in getattr(eval_outputs, kind).items():
            t = pd.read_parquet(p)
            both = pd.concat([t.assign(seed=0), t.assign(seed=1)], ignore_index=True)
            (tmp_path / v).mkdir(exist_ok=True)
            both.to_parquet(tmp_path / v / f"{kind}.parquet")
            paths[kind][v] = tmp_path / v / f"{kind}.parquet"
    inputs = ReportInputs(**{**eval_outputs.__dict__, **paths})
    builder = ReportBuilder(inputs, tmp_path / "r")
    page = builder.build_genes(["GENE/1"])[0].read_text()
    assert "top-20 importances (of 5)" in page and "Classifier seed 0 (of 2" in page


def test_gene_pages_in_chunks_and_a_paged_index(eval_outputs, tmp_path):
    from cellica.report.params import ReportParams

    out = tmp_path / "reports"
    two = ReportParams(chunks=2, page_size=10)
    genes = ReportBuilder(eval_outputs, out).genes
    for part in range(2):  # two page jobs, as the DAG's report_pages runs them
        build_report(eval_outputs, out, params=two, part=part)
    assert not (out / "index.html").exists()  # a page job writes no index
    written = sorted(p.relative_to(out).as_posix() for p in out.glob("genes/*/*.html") if p.name != "index.html")
    assert len(written) == len(genes) and {p.split("/")[1] for p in written} == {"0-of-2", "1-of-2"}
    for part in ("0-of-2", "1-of-2"):  # each chunk's folder has its own entry page, linking its pages
        entry = out / "genes" / part / "index.html"
        links = [link for link in parse(entry).links if not link.startswith("../")]
        assert links and all((entry.parent / link).is_file() for link in links)
    with pytest.raises(CellicaError, match="part 2 is out of range"):
        build_report(eval_outputs, out, params=two, part=2)
    with pytest.raises(CellicaError, match="page_size"):
        ReportParams(page_size=1)
    # the index job: with 2 genes per page, the 3 genes take 2 pages, linked from the index
    index = ReportBuilder(eval_outputs, out, page_size=2, chunks=2).build_index()
    pages = sorted((out / "gene_index").glob("genes-*.html"))
    assert [p.name for p in pages] == ["genes-1.html", "genes-2.html"]
    assert {"gene_index/genes-1.html", "gene_index/genes-2.html"} <= set(parse(index).links)
    rows = [[link for link in parse(p).links if link.startswith("../genes/")] for p in pages]
    assert [len(r) for r in rows] == [2, 1]
    assert all((p.parent / link).resolve().is_file() for p, r in zip(pages, rows, strict=True) for link in r)
    first = [link for link in parse(index).links if link.startswith("genes/")]
    assert len(first) == 2 and all((out / link).is_file() for link in first)  # the first page only
    assert "../../index.html" in parse(out / first[0]).links


def test_a_page_job_reads_only_its_genes(eval_outputs, tmp_path):
    builder = ReportBuilder(eval_outputs, tmp_path)
    one = builder._read_per_gene(genes=[UNSAFE[0]])
    assert set(one["gene"]) == {UNSAFE[0]} and len(one) == 2  # two variants, one seed
    light = builder._read_per_gene(["gene", "variant", "no_such_column"])
    assert list(light.columns) == ["gene", "variant"]


def test_bars_start_at_zero_with_a_labelled_axis_and_the_chance_line():
    """0.557 and 0.643 draw as bars in that ratio (not 80 vs 123 px from a cut at 0.4); a
    negative concentration extends left of zero; the axis names its range; chance is marked."""
    import re

    from cellica.report._svg import bar_chart

    svg = bar_chart(["a", "b", "c"], [0.557, 0.643, -0.1], "AUROC", vmin=-0.1, vmax=1.0, reference=0.5,
                    reference_label="chance")
    rects = [(float(x), float(w)) for x, w in re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)]
    (xa, wa), (xb, wb), (xc, wc) = rects
    assert xa == xb and abs(wa / wb - 0.557 / 0.643) < 0.005  # both from zero, lengths as the values
    assert xc + wc == xa and abs(wc / wb - 0.1 / 0.643) < 0.01  # the negative bar ends at zero
    ticks = re.findall(r'font-size="9" text-anchor="middle">([^<]+)</text>', svg)
    assert ticks == ["-0.10", "0", "1.00"] and 'fill="#555">chance</text>' in svg
    assert "<title>b: 0.643</title>" in svg


def test_captions_say_the_split_actually_used():
    from cellica.report.content import split_words

    assert split_words("batch", "gene")["auroc"] == "AUROC on held-out batches"
    random = split_words("random", "compound")
    assert random["auroc"] == "AUROC on a stratified random split" and "held-out" not in random["fold"]
    assert "this compound was seen in one batch" in random["caption"]
    template = (Path(__file__).resolve().parents[1] / "src" / "cellica" / "report" / "templates" / "gene.html")
    assert "{{ split.caption }}" in template.read_text() and "held-out fold" not in template.read_text()


def test_importances_pair_with_their_variant_whatever_their_order(tmp_path, monkeypatch):
    """`--per-gene` in one order, `--importances` in another: each table's lineage names its
    variant, so the report pairs them correctly (a list order is no contract)."""
    import pandas as pd

    import cellica.report.build as build
    from cellica.core.atomic import write_parquet
    from cellica.core.lineage import tag

    for v in ("pca", "pca_ica"):
        write_parquet(tag(pd.DataFrame({"variant": [v], "gene": ["G1"], "seed": [0], "auroc_mean": [0.6]}),
                          {v: f"id-{v}"}), tmp_path / f"{v}_pg.parquet")
        write_parquet(tag(pd.DataFrame({"seed": [0], "gene": ["G1"], "feature": ["f"], "importance": [1.0]}),
                          {v: f"id-{v}"}), tmp_path / f"{v}_imp.parquet")
    write_parquet(pd.DataFrame({"table": ["claim"]}), tmp_path / "s.parquet")
    captured = {}
    monkeypatch.setattr(build, "build_report", lambda inputs, out_dir, **kw: captured.update(inputs.importances))
    build.report_from_files(tmp_path / "s.parquet", [tmp_path / "pca_pg.parquet", tmp_path / "pca_ica_pg.parquet"],
                            [tmp_path / "pca_ica_imp.parquet", tmp_path / "pca_imp.parquet"],
                            out_dir=tmp_path / "rep")
    assert captured == {"pca": tmp_path / "pca_imp.parquet", "pca_ica": tmp_path / "pca_ica_imp.parquet"}


def test_a_recall_source_with_nothing_to_recall_is_one_line_not_a_chart(tmp_path):
    import pandas as pd

    from cellica.core.atomic import write_parquet
    from cellica.report._maps import recall_bars

    t = pd.DataFrame({"variant": ["pca", "pca_ica"] * 2, "source": ["CORUM"] * 2 + ["SIGNOR"] * 2,
                      "recall": [0.3, 0.4, float("nan"), float("nan")], "n_pairs": [10, 10, 0, 0],
                      "null_recall": [0.1, 0.1, float("nan"), float("nan")]})
    write_parquet(t, tmp_path / "r.parquet")
    charts, note = recall_bars(tmp_path / "r.parquet", ["pca", "pca_ica"])
    assert len(charts) == 1 and "CORUM: recall of 10 known pairs" in charts[0]
    assert note.startswith("No chart for SIGNOR: none of its known pairs has both members in the map")


def test_a_no_split_flag_names_its_feature_set_and_marks_only_genes_whose_variants_failed(eval_outputs, tmp_path):
    """The cell_count baseline (one feature) made no split for every gene and pca none for one:
    the index marks only that gene red, naming pca; the baseline's flag is muted and named; each
    gene page says which set, with the evaluation's reason, in its first lines."""
    paths = {"per_gene": dict(eval_outputs.per_gene), "importances": dict(eval_outputs.importances),
             "features": dict(eval_outputs.features)}
    base = pd.read_parquet(eval_outputs.per_gene["base"])
    flagged = UNSAFE[0]  # the gene with an effect: its variants split
    (tmp_path / "cell_count").mkdir()
    (tmp_path / "pca").mkdir()
    base.assign(variant="cell_count", no_split=True, no_split_reason="one feature, min_data_in_leaf=20").to_parquet(
        tmp_path / "cell_count" / "per_gene.parquet")
    pca = pd.read_parquet(eval_outputs.per_gene["pca"])
    assert not pca.loc[pca["gene"] == flagged, "no_split"].any() and not base.loc[base["gene"] == flagged,
                                                                                   "no_split"].any()
    pca.loc[pca["gene"] == flagged, ["no_split", "no_split_reason"]] = [True, "every leaf below min_data_in_leaf"]
    pca.to_parquet(tmp_path / "pca" / "per_gene.parquet")
    paths["per_gene"].update(cell_count=tmp_path / "cell_count" / "per_gene.parquet",
                             pca=tmp_path / "pca" / "per_gene.parquet")
    paths["importances"]["cell_count"] = eval_outputs.importances["base"]
    paths["features"]["cell_count"] = eval_outputs.features["base"]
    index = build_report(ReportInputs(**{**eval_outputs.__dict__, **paths}), tmp_path / "reports")
    rows = index.read_text().split('<table id="genes">')[1].split("</tbody>")[0].split("<tr>")[2:]
    assert len(rows) == len(UNSAFE)
    both = pd.concat([base, pca])
    for row in rows:
        gene = next(g for g in UNSAFE if ">" + html.escape(g) + "</a>" in row)
        failed = [v for v in ("base", "pca") if both.loc[(both["gene"] == gene) & (both["variant"] == v),
                                                         "no_split"].any()]
        assert '<span class="muted" title="no classifier of these baselines made a split' in row
        assert "(no split: cell_count)" in row
        red = ('<span class="warn" title="no classifier of these variants made a split: AUROC 0.5 by construction">'
               f"(no split: {', '.join(failed)})</span>")
        assert (red in row) == bool(failed) and row.count('class="warn"') == bool(failed), row
        assert (gene == flagged) <= (failed == ["pca"])
    pages = sorted((tmp_path / "reports" / "genes").rglob("*.html"))
    page = next(p.read_text() for p in pages if f"<h1>{html.escape(flagged)}</h1>" in p.read_text())
    head = page.split("<h2>")[0]  # the lines above the first table
    assert '<span class="warn">No split in pca: every leaf below min_data_in_leaf.</span>' in head
    assert '<span class="muted">No split in cell_count (a baseline): one feature, min_data_in_leaf=20.</span>' in head


def test_no_chart_text_is_clipped_in_a_browser(tmp_path):
    """A 45-character feature name and a long title: the bar chart cuts the name with an ellipsis
    (whole in its tooltip) and widens for the title; Chromium finds no text outside the chart, and
    none drawn over another. (The chart before this check let both run off its edges.)"""
    from cellica.report._svg import bar_chart
    from tests.browser_checks import layout

    name = "Cells_RadialDistribution_FracAtD_Mito_4of4_x9"
    svg = bar_chart([name, "short"], [1.0, 0.25], "pca_ica: top-20 importances (of 384), max = 1; a longer caption "
                    "than the chart is wide", bar_h=12, intervals=[(0.9, 1.0), (0.1, 0.4)], reference=0.5,
                    reference_label="chance")
    assert f"<title>{name}</title>{name[:29]}\u2026</text>" in svg
    page = tmp_path / "chart.html"
    page.write_text(f"<!doctype html><html><body>{svg}</body></html>")
    seen = layout(page, tmp_path)
    assert seen["clipped"] == [] and seen["overlaps"] == [], seen


def test_a_metric_with_a_target_is_best_closest_to_it():
    """A batch silhouette of 0 means batches mixed: -0.02 beats 0.05 (lower would pick -0.30), and the
    row says "closer to 0 is better", not "lower is better"."""
    from cellica.registry import METRICS, VARIANT_NAMES

    three = list(VARIANT_NAMES[:3])  # base, pca, pca_ica
    means = pd.DataFrame({"metric": "silhouette", "variant": three, "value": [0.05, -0.30, -0.02],
                          "ci_low": np.nan, "ci_high": np.nan, "detail": ""}).set_index(["metric", "variant"])
    from cellica.report._charts import metric_row

    row = metric_row("silhouette", "Batch silhouette", False, means, three, {}, None)
    assert row["direction"] == "closer to 0 is better" == METRICS["silhouette"].direction
    assert [c["best"] for c in row["cells"]] == [False, False, True]
    assert METRICS["batch_accuracy"].direction == "lower is better"


def test_a_report_is_written_into_a_folder_beside_a_stranger_s_files(eval_outputs, tmp_path):
    """The repository's own reports/ holds its README.md: the demo's report is written beside it,
    keeping it (a fresh clone's `snakemake --cores 2` stopped here once). A page name that holds a
    stranger's file is refused, and so is a file or a link where the folder should be."""
    site = tmp_path / "reports"
    site.mkdir()
    (site / "README.md").write_text("what this folder is for")
    index = build_report(eval_outputs, site)
    assert index.is_file() and (site / "README.md").read_text() == "what this folder is for"
    index.unlink()
    index.write_text("my own page")
    with pytest.raises(CellicaError, match="index.html exists and is a file cellica did not write"):
        build_report(eval_outputs, site)
    assert index.read_text() == "my own page"
    (tmp_path / "notes").write_text("x")
    with pytest.raises(CellicaError, match="notes exists and is a file cellica did not write"):
        build_report(eval_outputs, tmp_path / "notes")
    (tmp_path / "elsewhere").symlink_to(site)
    with pytest.raises(CellicaError, match="elsewhere exists and is a link cellica did not write"):
        build_report(eval_outputs, tmp_path / "elsewhere")
