"""Read a rendered report back: its tables as cell texts, and every shown number against the
run's tables at the shown precision (used on the tiny run and on the BBBC021 example)."""

import re
from pathlib import Path

import numpy as np
import pandas as pd


class Tables:
    """The tables of an HTML page as lists of rows of cell texts, by table id (stdlib parser)."""

    def __init__(self, html: str):
        from html.parser import HTMLParser

        tables: dict[str, list[list[str]]] = {}
        state = {"id": None, "row": None, "cell": None, "n": 0}

        class Parser(HTMLParser):
            def handle_starttag(self, tag, attrs):
                if tag == "table":
                    state["n"] += 1
                    state["id"] = dict(attrs).get("id") or f"table{state['n']}"
                    tables[state["id"]] = []
                elif tag == "tr" and state["id"]:
                    state["row"] = []
                elif tag in ("td", "th") and state["row"] is not None:
                    state["cell"] = ""

            def handle_endtag(self, tag):
                if tag in ("td", "th") and state["cell"] is not None:
                    state["row"].append(state["cell"].strip())
                    state["cell"] = None
                elif tag == "tr" and state["row"] is not None:
                    tables[state["id"]].append(state["row"])
                    state["row"] = None
                elif tag == "table":
                    state["id"] = None

            def handle_data(self, data):
                if state["cell"] is not None:
                    state["cell"] += data

        Parser().feed(html)
        self.tables = tables


def shown(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", text)]


def agrees(shown: float, value: float) -> bool:
    """A number as rendered (3 decimals, or 1.2e-04 below 0.001) equals its table's value."""
    return abs(shown - value) <= 0.00051 or (abs(value) < 1e-3 and abs(shown - value) <= abs(value) * 0.051)


def check_index_numbers(results: Path, reports: Path, entity: str = "gene", least: int = 20) -> None:
    """The per-variant table (mean [95% CI]) and the claims on the rendered index, number by
    number, against summary.parquet (labels in the run's words: ``entity``)."""
    from cellica.registry import METRICS

    summary = pd.read_parquet(results / "eval" / "summary.parquet")
    tables = Tables((reports / "index.html").read_text()).tables
    head, *rows = tables["variants"]
    variants = head[2:]
    means = summary[(summary["table"] == "per_variant") & (summary["row"] == "mean")].set_index(["metric", "variant"])
    by_label = {m.text(entity): metric for metric, m in METRICS.items() if m.kind != "count"}
    checked = 0
    for row in rows:
        metric = by_label.get(row[0])
        if metric is None:
            continue  # a count row
        for variant, text in zip(variants, row[2:], strict=True):
            if text.replace("†", "").strip() == "n/a":  # no value (marked † too where not comparable)
                assert (metric, variant) not in means.index or means.loc[(metric, variant), "value"] != \
                    means.loc[(metric, variant), "value"]
                continue
            r = means.loc[(metric, variant)]
            want = [r["value"]] + ([r["ci_low"], r["ci_high"]] if np.isfinite(r["ci_low"]) else [])
            got = shown(text.replace("†", ""))
            assert len(got) == len(want) and all(map(agrees, got, want)), (metric, variant, text, want)
            checked += 1
    assert checked >= least
    claims = summary[summary["table"] == "claim"]
    shown_claims = {r[0]: r[1] for r in tables["claims"][1:]}
    assert shown_claims == dict(zip(claims["row"], claims["verdict"], strict=True))
    if "baselines" in claims and claims["baselines"].ne("").any():  # the column "beats every baseline"
        assert tables["claims"][0][2] == "beats every baseline"
        assert {r[0]: r[2] for r in tables["claims"][1:]} == dict(zip(claims["row"], claims["baselines"], strict=True))
    else:
        assert "beats every baseline" not in tables["claims"][0]


def check_table_numbers(results: Path, reports: Path, least: int = 20) -> None:
    """The paired comparisons against summary.parquet; the paged gene index and three gene pages
    against the per-gene tables (seed 0, as they say), number by number at the shown precision."""
    summary = pd.read_parquet(results / "eval" / "summary.parquet")
    index = Tables((reports / "index.html").read_text()).tables
    comps = summary[summary["table"] == "comparison"].set_index(["metric", "row"])
    checked = 0
    for metric, pair, n, diff, p, p_holm, seed_sd, verdict, _ in index["comparisons"][1:]:
        r = comps.loc[(metric, pair)]
        assert int(n) == r["n"] and verdict == r["verdict"], (metric, pair)
        for text, value in ((diff, r["value"]), (p, r["p_value"]), (p_holm, r["p_holm"]), (seed_sd, r["seed_sd"])):
            if text == "n/a":
                assert not np.isfinite(value)
                continue
            assert agrees(shown(text)[0], value), (metric, pair, text, value)
            checked += 1
        if diff != "n/a" and "[" in diff:
            assert all(map(agrees, shown(diff)[1:], [r["ci_low"], r["ci_high"]])), (metric, pair, diff)
    assert checked >= least
    per_gene = pd.concat([pd.read_parquet(f) for f in (results / "eval").glob("*/per_gene.parquet")])
    first = per_gene[per_gene["seed"] == per_gene["seed"].min()].set_index(["gene", "variant"])
    pages = sorted((reports / "gene_index").glob("genes-*.html"))
    head, *rows = Tables(pages[0].read_text()).tables["genes"]
    auroc_cols = {i: h.removeprefix("AUROC ") for i, h in enumerate(head) if h.startswith("AUROC ")}
    sparsity_cols = {i: h.removeprefix("sparsity ") for i, h in enumerate(head) if h.startswith("sparsity ")}
    for row in rows:
        gene = row[0].split(" (")[0]
        assert int(row[1]) == first.xs(gene, level="gene")["n_samples"].iloc[0]
        for cols, column in ((auroc_cols, "auroc_mean"), (sparsity_cols, "sparsity")):
            for i, variant in cols.items():
                value = first.loc[(gene, variant), column]
                assert (row[i] == "n/a" and not np.isfinite(value)) or agrees(shown(row[i])[0], value), \
                    (gene, variant, column, row[i], value)
    gene_pages = sorted(p for p in (reports / "genes").rglob("*.html") if p.name != "index.html")
    assert gene_pages
    for page in gene_pages[:3]:
        html = page.read_text()
        gene = re.search(r"<h1>([^<]+)</h1>", html).group(1)
        table = next(t for t in Tables(html).tables.values() if t and t[0][:3] == ["variant", "split", "AUROC"])
        for variant, split, auroc, sd, within, folds, sparsity, concentration, *_ in table[1:]:
            r = first.loc[(gene, variant)]
            assert split == r["split"] and (folds == "n/a" or int(folds) == r["n_folds"])
            for text, value in ((auroc, r["auroc_mean"]), (sd, r["auroc_sd"]), (within, r["auroc_within"]),
                                (sparsity, r["sparsity"]), (concentration, r["concentration"])):
                assert (text == "n/a" and not np.isfinite(value)) or agrees(shown(text)[0], value), \
                    (gene, variant, text, value)
