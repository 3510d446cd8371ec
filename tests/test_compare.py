import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.evaluate._claims import claims_table
from cellica.evaluate._compare import bootstrap_ci, compare_variants, gene_values, holm, wilcoxon_p
from cellica.evaluate.summary import summary_table
from cellica.registry import PAPER_VARIANTS


def test_bootstrap_ci_by_hand():
    # Constant values: the interval collapses on the mean.
    assert bootstrap_ci([2.0, 2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)
    mean, lo, hi = bootstrap_ci(np.arange(100.0), n_boot=4000, seed=1)
    # Mean 49.5; the standard error is 29.0 / sqrt(100) = 2.9, so the 95% interval is about +-5.7.
    assert (
        mean == pytest.approx(49.5)
        and lo == pytest.approx(49.5 - 5.7, abs=0.8)
        and hi == pytest.approx(49.5 + 5.7, abs=0.8)
    )
    assert bootstrap_ci([1.0, 2.0, 3.0, np.nan])[0] == pytest.approx(2.0)  # NaN dropped
    with pytest.raises(CellicaError, match=r"needs >= 3 genes with a value, got 2"):
        bootstrap_ci([1.0, 2.0, np.nan])


def test_wilcoxon_and_holm_by_hand():
    # Five positive differences, no ties: exact two-sided p = 2 / 2**5.
    assert wilcoxon_p([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2 / 32)
    assert wilcoxon_p([0.0, 0.0, 0.0]) == 1.0
    # Holm: sorted p (0.01, 0.02, 0.04) x (3, 2, 1) = 0.03, 0.04, 0.04 (monotone); NaN stays.
    np.testing.assert_allclose(holm([0.04, 0.01, np.nan, 0.02]), [0.04, 0.03, np.nan, 0.04])
    assert holm([0.9, 0.8])[0] == 1.0  # capped at 1


def _per_gene(values: dict[str, list[float]], metric="auroc_mean", seeds=(0,), n_features=None, split="batch"):
    rows = []
    for variant, vals in values.items():
        for seed in seeds:
            for i, v in enumerate(vals):
                rows.append({"variant": variant, "gene": f"G{i}", "seed": seed, "skipped": "", "split": split,
                             "no_split": False, "n_features": (n_features or {}).get(variant, 16),
                             "auroc_mean": np.nan, "auroc_within": np.nan, "sparsity": np.nan,
                             "concentration": np.nan, metric: v + 0.001 * seed})
    return pd.DataFrame(rows)


def test_paired_comparison_and_claim_verdicts():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.5, 0.7, 30)
    pg = _per_gene(
        {"base": base, "pca": base + 0.05, "pca_rand": base + 0.02, "pca_ica": base + 0.10 + rng.normal(0, 0.01, 30)}
    )
    values = gene_values(pg)
    comps = compare_variants(values, {}, n_boot=1000, seed=0)
    row = comps.set_index(["metric", "variant", "other"]).loc[("auroc_heldout", "pca_ica", "pca")]
    assert row["value"] == pytest.approx(0.05, abs=0.01) and row["ci_low"] > 0 and row["verdict"] == "higher"
    assert row["n"] == 30 and row["p_holm"] < 0.05
    claims = claims_table(comps).set_index("claim")
    auroc = claims.loc[[c for c in claims.index if c.startswith("AUROC")][0]]
    assert auroc["verdict"] == "holds" and "pca_ica - pca = +0.05" in auroc["detail"]
    # Sparsity was not measured: not tested, never a silent pass.
    assert claims.loc[[c for c in claims.index if c.startswith("Sparsity")][0], "verdict"] == "not tested"


def test_claim_fails_when_the_order_is_reversed_and_is_inconclusive_in_noise():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.5, 0.7, 25)
    worse = _per_gene({"base": base, "pca": base + 0.05, "pca_rand": base + 0.01, "pca_ica": base})
    claims = claims_table(compare_variants(gene_values(worse), {}, 1000, 0)).set_index("claim")
    assert claims.iloc[0]["verdict"] == "fails"
    noise = _per_gene({v: base + rng.normal(0, 0.05, 25) for v in PAPER_VARIANTS})
    claims = claims_table(compare_variants(gene_values(noise), {}, 1000, 0)).set_index("claim")
    assert claims.iloc[0]["verdict"] == "inconclusive"


def test_a_claim_reads_as_a_sentence_and_the_number_that_decides_it():
    """holds: the weakest part (largest Holm p) decides; fails: the strongest part against the
    claim; inconclusive: the weakest part not yet significant. The numbers are the table's."""
    rng = np.random.default_rng(1)
    base = rng.uniform(0.5, 0.7, 25)
    good = _per_gene({"base": base, "pca_rand": base + 0.01, "pca": base + 0.04, "pca_ica": base + 0.08})
    comps = compare_variants(gene_values(good), {}, 1000, 0)
    claim = claims_table(comps).iloc[0]
    idx = comps.set_index(["metric", "variant", "other"])
    parts = [idx.loc[("auroc_heldout", b, w)] for b, w in (("pca_ica", "pca"), ("pca", "pca_rand"), ("pca", "base"))]
    weakest = max(range(3), key=lambda i: parts[i]["p_holm"])
    b, w = (("pca_ica", "pca"), ("pca", "pca_rand"), ("pca", "base"))[weakest]
    r = parts[weakest]
    assert claim["verdict"] == "holds"
    assert claim["sentence"] == (f"All 3 comparisons go the claimed way, each significant after Holm correction; "
                                 f"the weakest is {b} over {w}.")
    assert claim["decides"] == (f"{b} \u2212 {w} = {r['value']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], "
                                f"Holm p < 0.001")
    worse = _per_gene({"base": base, "pca": base + 0.05, "pca_rand": base + 0.01, "pca_ica": base})
    claim = claims_table(compare_variants(gene_values(worse), {}, 1000, 0)).iloc[0]
    assert claim["verdict"] == "fails" and claim["sentence"] == ("pca is significantly higher than pca_ica on auroc "
                                                                 "heldout: the opposite of the claim.")
    assert claim["decides"].startswith("pca_ica \u2212 pca = -0.050 [")
    assert "e-0" not in claim["detail"] and "e-0" not in claim["decides"]  # no 1e-04 beside 0.012


def test_a_p_value_reads_in_fixed_point():
    from cellica.evaluate._claims import p_text

    assert [p_text(p) for p in (1e-12, 0.00099, 0.001, 0.0123, 0.5, float("nan"))] == [
        "p < 0.001", "p < 0.001", "p = 0.001", "p = 0.012", "p = 0.5", "p n/a"]


def test_sparsity_is_not_compared_across_feature_counts_and_random_splits_stay_apart():
    vals = {"base": [0.1, 0.2, 0.3, 0.4], "pca": [0.5, 0.6, 0.7, 0.8]}
    pg = _per_gene(vals, metric="sparsity", n_features={"base": 192, "pca": 16})
    comps = compare_variants(gene_values(pg), {"base": 192, "pca": 16}, 500, 0).set_index(
        ["metric", "variant", "other"]
    )
    assert "not comparable: pca has 16 features, base 192" in comps.loc[("sparsity", "pca", "base"), "detail"]
    assert comps.loc[("sparsity", "pca", "base"), "verdict"] == "not tested"
    # A pair naming a variant that was not run says so (never a silent pass or NaN).
    missing = comps.loc[("auroc_heldout", "pca_ica", "pca")]
    assert missing["verdict"] == "not tested" and "variant pca_ica is not in the results" in missing["detail"]
    rand = _per_gene({"base": [0.6, 0.7, 0.8]}, split="random")
    v = gene_values(rand)
    assert set(v["metric"]) >= {"auroc_random_split"} and "auroc_heldout" not in set(v["metric"])


def test_seed_noise_is_measured_apart_from_gene_noise():
    base = np.linspace(0.5, 0.7, 10)
    pg = _per_gene({"pca": base + 0.05, "pca_ica": base + 0.1}, seeds=(0, 1, 2))
    # Seeds shift every gene of pca_ica by 0.001 * seed as well as pca's: the difference has no seed noise.
    comps = compare_variants(gene_values(pg), {}, 500, 0).set_index(["metric", "variant", "other"])
    row = comps.loc[("auroc_heldout", "pca_ica", "pca")]
    assert row["n_seeds"] == 3 and row["seeds_positive"] == 3 and row["seed_sd"] == pytest.approx(0.0, abs=1e-12)
    claim = claims_table(comps.reset_index()).iloc[0]
    assert "the claimed way in 3 of 3 seed(s)" in claim["detail"]


def test_summary_with_fewer_than_three_genes_says_so():
    pg = _per_gene({"pca": [0.6, 0.7], "pca_ica": [0.7, 0.8]})
    batch = pd.DataFrame(columns=["variant"])
    table = summary_table(pg, batch, pd.DataFrame(), n_boot=200)
    mean = table[(table.table == "per_variant") & (table.metric == "auroc_heldout")]
    assert mean["ci_low"].isna().all() and mean["detail"].str.contains("needs >= 3 genes with a value, got 2").all()
    claims = table[table.table == "claim"]
    assert (claims["verdict"] != "holds").all()
    assert set(table.columns) >= {"ci_low", "ci_high", "p_holm", "verdict", "seed_sd"}
    counts = table[(table.table == "per_variant") & (table.row == "count")].pivot(index="metric", columns="variant",
                                                                                   values="value")
    assert counts.loc["n_genes_heldout", "pca"] == 2 and counts.loc["n_genes_random_split", "pca"] == 0


def test_batch_claim_uses_the_intervals():
    batch = pd.DataFrame([
        {"variant": "base", "batch_accuracy": 0.95, "batch_accuracy_ci_low": 0.93, "batch_accuracy_ci_high": 0.97,
         "batch_accuracy_lgbm": 0.9, "batch_accuracy_lgbm_ci_low": 0.88, "batch_accuracy_lgbm_ci_high": 0.92,
         "chance_accuracy": 0.25},
        {"variant": "pca_ica", "batch_accuracy": 0.4, "batch_accuracy_ci_low": 0.36, "batch_accuracy_ci_high": 0.44,
         "batch_accuracy_lgbm": 0.5, "batch_accuracy_lgbm_ci_low": 0.45, "batch_accuracy_lgbm_ci_high": 0.55,
         "chance_accuracy": 0.25}])
    comps = compare_variants(gene_values(_per_gene({"base": [0.5, 0.6, 0.7]})), {}, 200, 0)
    claim = claims_table(comps, batch).iloc[-1]
    assert claim["verdict"] == "holds" and "chance 0.250" in claim["detail"]
    batch.loc[1, "batch_accuracy_lgbm_ci_high"] = 0.89  # overlaps base's [0.88, 0.92]
    assert claims_table(comps, batch).iloc[-1]["verdict"] == "inconclusive"


def test_genes_needed_by_hand_and_its_power_on_a_simulated_effect():
    """n = ((z_0.975 + z_0.8) * s / d)^2 / (3/pi): d = 0.5, s = 1 -> 31.4 / 0.955 = 32.9 -> 33 genes.
    Then Wilcoxon tests of that many simulated genes at the Holm level decide a known effect
    about 80% of the time (the promise), and half as many genes far less often."""
    import numpy as np

    from cellica.evaluate._compare import wilcoxon_p
    from cellica.evaluate._power import genes_needed, power_note, seeds_would_help

    assert genes_needed(0.5, 1.0, 0.05) == 33
    assert genes_needed(0.0, 1.0, 0.05) is None and genes_needed(0.1, 0.0, 0.05) is None
    level = 0.05 / 6  # six comparisons tested: Holm's strictest step
    d, s = 0.02, 0.05
    n = genes_needed(d, s, level)
    rng = np.random.default_rng(0)

    def power(genes):
        return np.mean([wilcoxon_p(rng.normal(d, s, genes)) < level for _ in range(400)])

    assert 0.72 <= power(n) <= 0.88, (n, power(n))
    assert power(n // 2) < 0.55
    assert seeds_would_help(seed_sd=0.02, n_seeds=3, sd=0.05, n=24)  # 0.0115 >= 0.5 * 0.0102
    assert not seeds_would_help(seed_sd=0.002, n_seeds=3, sd=0.05, n=24)
    note = power_note(d, s, 24, 0.002, 3, level)
    assert n < 100 and note.startswith(f"about {n} genes would decide a difference of +0.02") and "would not" in note


@pytest.mark.parametrize("n, text", [(7, "7"), (99, "99"), (100, "100"), (1234, "1,200"), (1250, "1,200"),
                                     (411675, "410,000"), (2_000_001, "2,000,000")])
def test_an_estimated_count_reads_as_an_estimate(n, text):
    from cellica.evaluate._power import about

    assert about(n) == text


def test_a_comparison_identical_on_every_gene_is_not_tested_and_leaves_holm_alone():
    """pca and a copy of it: every paired difference is 0 by construction, so the comparison is
    "not tested" (not "inconclusive") and is not counted in the Holm family of the others."""
    from cellica.evaluate._compare import compare_variants

    rng = np.random.default_rng(0)
    rows = []
    for g in range(12):
        for v, shift in (("base", 0.0), ("pca", 0.05), ("copy", 0.05)):
            rows.append({"variant": v, "gene": f"G{g}", "seed": 0, "metric": "auroc_heldout",
                         "value": 0.7 + shift + (rng.normal(0, 0.01) if v != "copy" else 0.0)})
    values = pd.DataFrame(rows)
    values.loc[values["variant"] == "copy", "value"] = values.loc[values["variant"] == "pca", "value"].to_numpy()
    out = compare_variants(values, {}, 200, 0, pairs=[("pca", "base"), ("pca", "copy")],
                           metrics=("auroc_heldout",)).set_index("other")
    assert out.loc["copy", "verdict"] == "not tested"
    assert (
        out.loc["copy", "detail"] == "not tested: pca and copy are identical on every gene and seed (by construction)"
    )
    alone = compare_variants(values, {}, 200, 0, pairs=[("pca", "base")], metrics=("auroc_heldout",))
    assert out.loc["base", "p_holm"] == alone["p_holm"].iloc[0]


def test_sentences_name_the_entity_and_say_why_nothing_was_compared():
    """A compound screen where every compound was seen in one batch: no held-out AUROC exists,
    and the comparison says so in the screen's words (not "no gene scored by both")."""
    from cellica.evaluate._power import power_note
    from cellica.registry import METRICS

    vals = {v: [0.6, 0.7, 0.8, 0.9] for v in PAPER_VARIANTS}
    comps = compare_variants(gene_values(_per_gene(vals, split="random")), {}, 200, 0, entity="compound")
    row = comps.set_index(["metric", "variant", "other"]).loc[("auroc_heldout", "pca_ica", "pca")]
    assert row["verdict"] == "not tested"
    assert row["detail"].startswith("no compound was evaluated on held-out batches (each was seen in one batch")
    assert claims_table(comps).iloc[0]["verdict"] == "not tested"
    note = power_note(0.02, 0.05, 24, 0.002, 3, 0.05 / 6, entity="compound")
    assert note.startswith("about ") and " compounds would decide" in note and "per-compound sd" in note
    assert METRICS["recall"].text("MoA") == "MoA map: recall of known relationships (all sources)"
    assert METRICS["map_mean"].text("compound") == "mAP vs controls"  # only a leading entity is capitalised
    assert METRICS["guide_consistent_fraction"].text("compound").startswith("Compound map: compounds whose")
