"""Extension points: an image format, a baseline and a metric are each one registry entry
(plus, for a format, its own field source), and everything downstream follows from the entry.
The variant's counterpart is in tests/test_registry.py."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from cellica import registry
from cellica.core.errors import CellicaError


# ------------------------------------------------------------------------------ format
class NpyFields:
    """A dummy format: one ``.npy`` file per field, (channels, height, width): its own module's
    whole job (here, this test module)."""

    columns = ("path", "plate", "well", "site", "batch", "perturbation")

    @classmethod
    def check_manifest(cls, df, path):
        if df.duplicated(["plate", "well", "site"]).any():
            raise CellicaError(f"manifest {path}: a field listed twice")

    def __init__(self, manifest, p, source):
        self.p, self.skipped = p, []
        self.groups = [((r["batch"], r["plate"], r["well"], r["site"]), r, [r["_file"]])
                       for _, r in manifest.sort_values(["plate", "well", "site"]).iterrows()]

    def load(self, images):
        return np.load(images[0])

    def provenance(self):
        return {"npy_fields": len(self.groups)}


def _npy_manifest(tmp_path):
    rng = np.random.default_rng(0)
    rows, arrays = [], {}
    for i, (well, gene) in enumerate([("A01", "ctrl"), ("A02", "G1"), ("A03", "ctrl")]):
        arrays[well] = rng.integers(0, 60000, size=(2, 40, 40), dtype=np.uint16)
        np.save(tmp_path / f"{well}.npy", arrays[well])
        rows.append({"path": f"{well}.npy", "plate": "P1", "well": well, "site": "1", "batch": "B1",
                     "perturbation": gene, "row_number": i})
    pd.DataFrame(rows).to_csv(tmp_path / "manifest.csv", index=False)
    return tmp_path / "manifest.csv", arrays


def test_a_new_image_format_is_its_field_source_and_one_registry_entry(tmp_path, monkeypatch):
    """Registering ``npy`` (one Format entry naming the class) makes ``ingest.format: npy`` a
    valid setting, and ingestion cuts, labels and records its fields like any format's."""
    from cellica.store.ingest import ingest
    from cellica.store.params import IngestParams

    with pytest.raises(CellicaError, match="'npy' is not allowed"):
        IngestParams(channels=[0, 1], format="npy").validate()
    monkeypatch.setitem(registry.FORMATS, "npy", registry.Format("npy", "one .npy per field",
                                                                 f"{__name__}:NpyFields"))  # the one place
    manifest, arrays = _npy_manifest(tmp_path)
    p = IngestParams(channels=[0, 1], format="npy", tile_size=20, control_label="ctrl", normalize=None)
    p.validate()
    store = ingest(manifest, tmp_path / "s.zarr", p)
    assert store.n_tiles == 3 * 4 and store.channel_names == ["0", "1"]
    md = store.metadata
    assert md["perturbation"].tolist() == ["ctrl"] * 4 + ["G1"] * 4 + ["ctrl"] * 4
    assert md["is_control"].tolist() == [True] * 4 + [False] * 4 + [True] * 4
    np.testing.assert_array_equal(store.read([5])[0], arrays["A02"][:, 0:20, 20:40])  # y0 x20 of the 2nd field
    assert store.attrs["provenance"]["npy_fields"] == 3 and store.attrs["provenance"]["format"] == "npy"
    bad = pd.read_csv(manifest)
    pd.concat([bad, bad.iloc[[0]]]).to_csv(tmp_path / "twice.csv", index=False)
    with pytest.raises(CellicaError, match="twice.csv: a field listed twice"):
        ingest(tmp_path / "twice.csv", tmp_path / "t.zarr", p)


# ---------------------------------------------------------------------------- baseline
def test_a_new_baseline_is_one_registry_entry(tmp_path, monkeypatch):
    """A baseline ``shuffled_untrained`` (the untrained MAE's embeddings under another name) is one
    Baseline entry: the config accepts it, the plan evaluates it where it applies and says why
    not elsewhere, reads its model's embeddings, draws it in a colour of its own and places it
    after the variants; the claims compare the winner with it on the metrics it names."""
    from cellica.evaluate._claims import beats_baselines
    from cellica.plan import RunPlan
    from cellica.report._svg import set_colour

    entry = replace(registry.BASELINES["untrained"], name="shuffled_untrained", help="a dummy", default=False,
                    metrics=("auroc_heldout",))
    monkeypatch.setitem(registry.BASELINES, "shuffled_untrained", entry)  # the one place
    plan = RunPlan({"results_dir": "out", "baselines": {"names": ["shuffled_untrained", "cell_count"]}})
    assert plan.baselines == ["shuffled_untrained", "cell_count"]
    assert plan.evaluated[-2:] == ["shuffled_untrained", "cell_count"]
    assert plan.baseline_input("shuffled_untrained") == "out/embeddings/untrained/embeddings.h5ad"
    assert "shuffled_untrained" in plan.wildcard_constraints()["variant"].split("|")
    (tmp_path / "my.safetensors").write_bytes(b"")
    ruled_out = RunPlan({"results_dir": "out", "mae": {"checkpoint": str(tmp_path / "my.safetensors")},
                         "baselines": {"names": ["shuffled_untrained"]}})
    assert ruled_out.baselines == [] and ruled_out.baseline_notes == [
        "baseline shuffled_untrained left out: the run embeds with mae.checkpoint, whose initial weights cellica "
        "cannot know"]
    assert registry.variant_order(["shuffled_untrained", "pca"]) == ["pca", "shuffled_untrained"]
    colours = {set_colour(n) for n in (*registry.VARIANTS, *registry.BASELINES)}
    assert len(colours) == len(registry.VARIANTS) + len(registry.BASELINES)  # a colour of its own
    comparisons = pd.DataFrame([{"metric": "auroc_heldout", "variant": registry.CLAIM_WINNER,
                                 "other": "shuffled_untrained", "verdict": "higher", "value": 0.1, "ci_low": 0.05,
                                 "ci_high": 0.15, "n": 20, "p_holm": 0.001}])
    verdict, text = beats_baselines(registry.CLAIMS[0], comparisons, ["shuffled_untrained"])
    assert verdict == "yes" and text.startswith(f"auroc_heldout: {registry.CLAIM_WINNER} - shuffled_untrained")
    verdict, text = beats_baselines(registry.CLAIMS[1], comparisons, ["shuffled_untrained"])
    assert (verdict, text) == ("not tested", "shuffled_untrained: compared on auroc_heldout only")
    with pytest.raises(CellicaError, match="'nonesuch' is not allowed"):
        RunPlan({"results_dir": "out", "baselines": {"names": ["nonesuch"]}})


# ------------------------------------------------------------------------------ metric
def test_a_new_per_gene_metric_is_one_registry_entry(monkeypatch):
    """A per-gene metric of a column the evaluation already writes (``auroc_sd``: the spread of a
    gene's AUROC over folds) is one Metric entry: its mean over genes with an interval in the
    summary, its row (label, direction, best in bold) and its chart on the report's index."""
    from cellica.evaluate._compare import gene_values, variant_means

    monkeypatch.setitem(registry.METRICS, "auroc_fold_sd", registry.Metric(
        "auroc_fold_sd", "AUROC spread over folds", False, "gene", "auroc_sd", chart=True,
        reference=(0.0, "none", "")))  # the one place
    per_gene = pd.DataFrame({"variant": ["pca"] * 3 + ["pca_ica"] * 3, "gene": ["g1", "g2", "g3"] * 2,
                             "seed": 0, "skipped": False, "split": "batch", "auroc_mean": 0.7,
                             "auroc_sd": [0.10, 0.20, 0.30, 0.02, 0.04, 0.06]})
    values = gene_values(per_gene)
    means = variant_means(values, n_boot=200, seed=0).set_index(["metric", "variant"])
    assert means.loc[("auroc_fold_sd", "pca"), "value"] == pytest.approx(0.2)
    assert means.loc[("auroc_fold_sd", "pca_ica"), "value"] == pytest.approx(0.04)
    assert means.loc[("auroc_fold_sd", "pca"), "ci_low"] <= 0.2 <= means.loc[("auroc_fold_sd", "pca"), "ci_high"]

    from cellica.report._charts import ci_chart, metric_row

    row = metric_row("auroc_fold_sd", "AUROC spread over folds", False, means, ["pca", "pca_ica"], {}, None)
    assert row["direction"] == "lower is better"
    assert [c["best"] for c in row["cells"]] == [False, True]  # the lower spread in bold
    chart = ci_chart("auroc_fold_sd", means, ["pca", "pca_ica"], "gene")
    assert "AUROC spread over folds (mean over genes, 95% interval)" in chart and "<title>none 0</title>" in chart
