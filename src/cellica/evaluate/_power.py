"""How many genes an inconclusive comparison would need, and whether more seeds would help.

A paired comparison of two variants is decided by the Wilcoxon signed-rank test of the
per-gene differences at the Holm level. For a comparison left inconclusive, the genes that
would decide the observed mean difference ``d`` at 80% power, given the observed spread
``s`` of the per-gene differences, follow the normal approximation of a paired two-sided
test, divided by the Wilcoxon test's efficiency relative to the t-test (3/pi under normal
differences)::

    n = ((z[1 - level/2] + z[power]) * s / |d|)^2 / (3/pi)

with ``level`` the strictest Holm level, alpha / m over the m comparisons tested (an upper
estimate: later Holm steps are less strict). More seeds help only when seed noise is a real
part of the uncertainty: when the seed-to-seed sd of the mean difference, over the square
root of the seeds, is at least half the gene-to-gene standard error s / sqrt(n).
"""

from __future__ import annotations

import math

ARE_WILCOXON = 3 / math.pi  # the signed-rank test's efficiency relative to the t-test, normal data
POWER = 0.8


def genes_needed(diff: float, sd: float, level: float, power: float = POWER) -> int | None:
    """Genes a paired two-sided Wilcoxon test at ``level`` needs to find a mean difference ``diff``
    with ``power``, given the per-gene differences' sd (``None`` when it cannot be said)."""
    from scipy.stats import norm

    if not all(map(math.isfinite, (diff, sd, level))) or diff == 0 or sd <= 0 or not 0 < level < 1:
        return None
    n = ((norm.ppf(1 - level / 2) + norm.ppf(power)) * sd / abs(diff)) ** 2 / ARE_WILCOXON
    return max(2, math.ceil(n))


def seeds_would_help(seed_sd: float, n_seeds: int, sd: float, n: int) -> bool:
    """Whether seed noise is at least half the gene-to-gene standard error of the mean difference."""
    if n_seeds < 2 or not math.isfinite(seed_sd) or n < 2:
        return False
    return seed_sd / math.sqrt(n_seeds) >= 0.5 * sd / math.sqrt(n)


def about(n: int) -> str:
    """A count for a sentence, to two significant digits with thousands separators (411675 ->
    ``410,000``; 37 -> ``37``): an estimate should not read as exact."""
    if n < 100:
        return str(int(n))
    digits = len(str(int(n))) - 2
    return f"{int(round(n, -digits)):,}"


def power_note(diff: float, sd: float, n: int, seed_sd: float, n_seeds: int, level: float,
               entity: str = "gene") -> str:
    """One sentence for an inconclusive comparison: the genes (``entity``: what the
    perturbations are called) that would decide it, and whether more seeds would help."""
    need = genes_needed(diff, sd, level)
    if need is None:
        return f"no estimate of the {entity}s needed (no difference or no spread)"
    more = "more seeds would help" if seeds_would_help(seed_sd, n_seeds, sd, n) else \
        f"more seeds would not (seed noise is small beside the {entity}-to-{entity} spread)"
    return (f"about {about(need)} {entity}s would decide a difference of {diff:+.3g} (per-{entity} sd {sd:.3g}) at "
            f"{POWER:.0%} power at the Holm level {level:.2g}, against {n} now; {more}")
