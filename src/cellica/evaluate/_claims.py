"""The paper's claims, judged from the paired comparisons: each holds, fails or is
inconclusive at 95%, with the numbers behind it and how many seeds agree.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from cellica.core.logs import get_logger
from cellica.registry import BASELINES, BATCH_CLAIM, CLAIM_WINNER, CLAIMS, RECALL_CLAIM, Claim

log = get_logger("compare")


def claims_table(comparisons: pd.DataFrame, batch: pd.DataFrame | None = None,
                 baseline_comparisons: pd.DataFrame | None = None, baselines=()) -> pd.DataFrame:
    """The paper's claims, each ``holds`` / ``fails`` / ``inconclusive`` / ``not tested``, with the numbers.

    With ``baselines`` (their comparisons from :func:`cellica.evaluate._compare.compare_baselines`),
    the ``baselines`` column says whether each claim's winner also beats every baseline on the
    claim's metrics (:func:`beats_baselines`); the batch claim has none to compare (``n/a``).
    """
    idx = comparisons.set_index(["metric", "variant", "other"])
    rows = []
    for claim in CLAIMS:
        parts, verdicts, per_seed = [], [], []
        for metric, better, worse in claim.parts:
            if (metric, better, worse) not in idx.index:
                verdicts.append("not tested")
                parts.append(f"{better} > {worse}: not compared")
                continue
            r = idx.loc[(metric, better, worse)]
            verdicts.append(r["verdict"])
            parts.append(_part_text(better, worse, r))
            if r["verdict"] != "not tested":
                per_seed.append(json.loads(r["by_seed"]))
        tested = [v for v in verdicts if v != "not tested"]
        if any(v == "lower" for v in tested):
            verdict = "fails"
        elif tested and all(v == "higher" for v in tested):
            verdict = "holds"
        elif tested:
            verdict = "inconclusive"
        else:
            verdict = "not tested"
        row = {"claim": claim.name, "verdict": verdict, "detail": "; ".join(parts) + _seed_text(per_seed),
               **_in_a_sentence(claim, idx, verdict, parts)}
        if baselines:
            row["baselines"], text = beats_baselines(claim, baseline_comparisons, baselines)
            row["detail"] += f"; baselines: {text}"
        rows.append(row)
    rows.append({**_batch_claim(batch), **({"baselines": "n/a"} if baselines else {})})
    return pd.DataFrame(rows)


def p_text(p: float) -> str:
    """A p-value as a table shows it: ``p < 0.001`` below a thousandth, else two significant digits
    in fixed point (never ``1e-04`` beside ``0.012``)."""
    if not np.isfinite(p):
        return "p n/a"
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def _decisive(better: str, worse: str, r) -> str:
    return (f"{better} \u2212 {worse} = {r['value']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], "
            f"Holm {p_text(r['p_holm'])}")


def _in_a_sentence(claim: Claim, idx: pd.DataFrame, verdict: str, parts: list[str]) -> dict[str, str]:
    """The claim read in 30 seconds: one sentence, and the one comparison that decides the
    verdict (holds: the weakest of its parts, the largest Holm p; fails: the strongest part
    against it; inconclusive: the weakest part not yet significant)."""
    found = [(m, b, w, idx.loc[(m, b, w)]) for m, b, w in claim.parts if (m, b, w) in idx.index
             and idx.loc[(m, b, w)]["verdict"] != "not tested"]
    if verdict == "not tested" or not found:
        return {"sentence": "Not tested: " + "; ".join(parts) + ".", "decides": ""}
    k = len(claim.parts)
    if verdict == "holds":
        m, b, w, r = max(found, key=lambda f: f[3]["p_holm"])
        every = "The comparison goes" if k == 1 else f"All {k} comparisons go"
        return {"sentence": f"{every} the claimed way, each significant after Holm correction; the weakest is "
                            f"{b} over {w}.", "decides": _decisive(b, w, r)}
    if verdict == "fails":
        m, b, w, r = min((f for f in found if f[3]["verdict"] == "lower"), key=lambda f: f[3]["p_holm"])
        return {"sentence": f"{w} is significantly higher than {b} on {m.replace('_', ' ')}: the opposite of the "
                            "claim.", "decides": _decisive(b, w, r)}
    m, b, w, r = max((f for f in found if f[3]["verdict"] != "higher"), key=lambda f: f[3]["p_holm"])
    settled = sum(f[3]["verdict"] == "higher" for f in found)
    return {"sentence": f"{settled} of {k} comparisons are significant the claimed way; {b} over {w} is not "
                        "settled either way.", "decides": _decisive(b, w, r)}


def beats_baselines(claim: Claim, comparisons: pd.DataFrame, baselines) -> tuple[str, str]:
    """Whether ``claim``'s winner beats every baseline on the claim's metrics: ``yes`` (each
    baseline beaten, every tested comparison higher), ``no`` (significantly lower on one),
    ``inconclusive`` or ``not tested``; and the numbers behind it."""
    winner = CLAIM_WINNER
    metrics = list(dict.fromkeys(m for m, _, _ in claim.parts))
    idx = comparisons.set_index(["metric", "variant", "other"]) if len(comparisons) else None
    per_baseline, parts = [], []
    for b in baselines:
        verdicts, shared = [], [m for m in metrics if m in BASELINES[b].metrics]
        if not shared:  # by design (cell_count has no importances to compare): no part of the verdict
            parts.append(f"{b}: compared on {', '.join(BASELINES[b].metrics)} only")
            continue
        for metric in shared:
            key = (metric, winner, b)
            r = idx.loc[key] if idx is not None and key in idx.index else None
            parts.append(f"{metric}: {_part_text(winner, b, r)}" if r is not None else
                         f"{metric}: {winner} > {b}: not compared")
            if r is not None and r["verdict"] != "not tested":
                verdicts.append(r["verdict"])
        per_baseline.append("not tested" if not verdicts else "no" if "lower" in verdicts
                            else "yes" if all(v == "higher" for v in verdicts) else "inconclusive")
    tested = [v for v in per_baseline if v != "not tested"]
    verdict = ("not tested" if not tested else "no" if "no" in tested
               else "yes" if len(tested) == len(per_baseline) and all(v == "yes" for v in tested) else "inconclusive")
    return verdict, "; ".join(parts)


def _seed_text(per_seed: list[dict[str, float]]) -> str:
    """In how many seeds every tested part's point estimate goes the claimed way."""
    seeds = set.intersection(*(set(d) for d in per_seed)) if per_seed else set()
    if not seeds:
        return ""
    ok = sum(all(d[s] > 0 for d in per_seed) for s in seeds)
    return f"; every tested part's point estimate the claimed way in {ok} of {len(seeds)} seed(s)"


def _part_text(better: str, worse: str, r) -> str:
    if r["verdict"] == "not tested":
        return f"{better} > {worse}: {r['detail'] or 'not tested'}"
    text = (f"{better} - {worse} = {r['value']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], "
            f"n={int(r['n'])}, Holm {p_text(r['p_holm'])} ({r['verdict']})")
    power = r.get("power", "") if hasattr(r, "get") else ""
    return f"{text}: {power}" if isinstance(power, str) and power else text


def _batch_claim(batch: pd.DataFrame | None) -> dict:
    """Holds when each batch classifier's interval on the winner lies below the reference's, fails when above
    (:data:`cellica.registry.BATCH_CLAIM`)."""
    claim = BATCH_CLAIM
    name, win, (ref,) = claim.name, claim.better, claim.others
    if batch is None or batch.empty or not {ref, win} <= set(batch["variant"]):
        return {"claim": name, "verdict": "not tested", "detail": f"needs the {ref} and {win} batch metrics",
                "sentence": f"Not tested: it needs the {ref} and {win} batch metrics.", "decides": ""}
    b = batch.set_index("variant")
    verdicts, parts = [], []
    for col in claim.metrics:
        if f"{col}_ci_low" not in b or not np.isfinite(b.loc[[ref, win], f"{col}_ci_low"]).all():
            continue
        lo_i, hi_i = b.loc[win, [f"{col}_ci_low", f"{col}_ci_high"]]
        lo_b, hi_b = b.loc[ref, [f"{col}_ci_low", f"{col}_ci_high"]]
        v = "holds" if hi_i < lo_b else "fails" if lo_i > hi_b else "inconclusive"
        verdicts.append(v)
        parts.append(f"{col}: {win} {b.loc[win, col]:.3f} [{lo_i:.3f}, {hi_i:.3f}] vs {ref} "
                     f"{b.loc[ref, col]:.3f} [{lo_b:.3f}, {hi_b:.3f}] (chance {b.loc[ref, 'chance_accuracy']:.3f})")
    if not verdicts:
        return {"claim": name, "verdict": "not tested", "detail": "no batch classifier could be cross-validated",
                "sentence": "Not tested: no batch classifier could be cross-validated.", "decides": ""}
    verdict = "holds" if all(v == "holds" for v in verdicts) else "fails" if "fails" in verdicts else "inconclusive"
    sentence = {"holds": f"{win}'s batch classifiers are less accurate than {ref}'s: less batch information is left.",
                "fails": f"{win}'s batch classifiers are more accurate than {ref}'s: more batch information is left.",
                "inconclusive": f"The batch classifiers' 95% intervals on {win} and {ref} overlap."}[verdict]
    return {"claim": name, "verdict": verdict, "detail": "; ".join(parts) + " (95% bootstrap intervals over controls)",
            "sentence": sentence, "decides": parts[verdicts.index(verdict) if verdict in verdicts else 0]}


def recall_claim(differences: pd.DataFrame, entity: str = "gene") -> dict:
    """Holds when both paired recall differences (all sources pooled) have intervals above 0,
    fails when either lies below 0 (gene bootstrap, :mod:`cellica.maps.recall`). ``entity``
    (what the perturbations are called) words the claim."""
    claim = RECALL_CLAIM
    name, win, others = claim.name.format(entity=entity), claim.better, claim.others
    d = differences[(differences["source"] == "all") & (differences["variant"] == win)].set_index("baseline")
    verdicts, parts = [], []
    for other in others:
        if other in d.index and d.loc[other, "n_pairs"] == 0:
            parts.append(f"{win} > {other}: not compared (no known pair has both members in the map)")
            continue
        if other not in d.index or not np.isfinite(d.loc[other, "ci_low"]):
            parts.append(f"{win} > {other}: not compared")
            continue
        r = d.loc[other]
        verdicts.append("higher" if r["ci_low"] > 0 else "lower" if r["ci_high"] < 0 else "inconclusive")
        parts.append(f"{win} - {other} = {r['difference']:+.3g} [{r['ci_low']:+.3g}, {r['ci_high']:+.3g}], "
                     f"{int(r['n_pairs'])} known pairs ({verdicts[-1]})")
    verdict = ("not tested" if not verdicts else "fails" if "lower" in verdicts
               else "holds" if all(v == "higher" for v in verdicts) and len(verdicts) == len(others)
               else "inconclusive")
    tested = d.loc[[o for o in others if o in d.index]]
    if verdicts and np.allclose(tested[["difference", "ci_low", "ci_high"]].to_numpy(float), 0, atol=1e-12):
        # Cosine similarity is unchanged by an orthogonal rotation, and ICA's and the random
        # rotation are orthogonal maps of the same whitened space: equal by construction.
        return {"claim": name, "verdict": "not tested",
                "detail": "identical by construction: cosine similarities are invariant to the rotation that "
                          "separates PCA, PCA+ICA and PCA+Rand (" + "; ".join(parts) + ")",
                "sentence": "Not tested: the three maps are identical by construction (cosine similarity does not "
                            "change under the rotation that separates them).", "decides": ""}
    why = f" (95% intervals, {entity}s resampled)" if verdicts else ""
    sentence = {"holds": f"{win}'s map recalls more known pairs than " + " and ".join(f"{o}'s" for o in others) + ".",
                "fails": f"{win}'s map recalls fewer known pairs than another's.",
                "inconclusive": "The recall differences' 95% intervals include 0.",
                "not tested": "Not tested: " + "; ".join(parts) + "."}[verdict]
    decisive = [p for p, v in zip([p for p in parts if "not compared" not in p], verdicts, strict=True)
                if v == {"holds": "higher", "fails": "lower"}.get(verdict, "inconclusive")]
    return {"claim": name, "verdict": verdict, "detail": "; ".join(parts) + why, "sentence": sentence,
            "decides": decisive[0] if decisive else ""}
