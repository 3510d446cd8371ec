"""One registry: every list of variant, metric or claim names is cellica.registry's, and
adding a variant is one registry entry plus its estimator class."""

import ast
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cellica import registry
from cellica.registry import METRICS, VARIANTS
from tests.conftest import REPO

REGISTRY = REPO / "src" / "cellica" / "registry.py"
NAMES = {"variant": set(VARIANTS), "metric": set(METRICS), "baseline": set(registry.BASELINES),
         "model": set(registry.MODELS) - {"seed"}}
# In the library and the workflow two names make a list to keep in step. Tests and benchmarks
# pick a few variants or metrics for a table or a fixture: a list of three variants, five
# metrics or three baselines or models is what must come from the registry there.
LEAST = {"library": dict.fromkeys(NAMES, 2), "elsewhere": {"variant": 3, "metric": 5, "baseline": 3, "model": 3}}
QUOTED = re.compile(r"""["']([a-z_0-9]+)["']""")
# One name spelled alone in the library (compared with, looked up, defaulted to) is a second
# definition too, unless it means something else there: a step's name (a variant may share
# one), a config key (mae.checkpoint), a registry lookup (``MODELS["cp_measure"]``).


def _step_names() -> set[str]:
    import cellica.transform.variants  # noqa: F401  (registers every step)
    from cellica.transform.steps import Step

    found, todo = set(), [Step]
    while todo:
        cls = todo.pop()
        found.add(cls.name)
        todo.extend(cls.__subclasses__())
    return found


ALONE = ((set(VARIANTS) - _step_names()) | set(registry.BASELINES) | set(registry.MODELS) - {"seed", "checkpoint"})
LOOKUPS = {"VARIANTS", "METRICS", "BASELINES", "MODELS"}
OTHER_MEANING = {
    ("store/_render.py", "cell_count"): "a simulated factor: the number of cells drawn in a tile",
    ("embed/cell_count.py", "cell_count"): "the nuclei counter's own provenance format",
    ("embed/profiles.py", "cp_measure"): "the package's name (its version, the provenance format)",
    ("embed/train.py", "untrained"): "a training summary's key: whether any step was taken",
}


def _literals(tree: ast.AST):
    """(line, strings) of every list, tuple and set literal, and of every dict literal that maps
    names to text (a label table); a dict computing values under metric names is a producer,
    and a list assigned to ``*_COLUMNS`` is a table's schema (its column names)."""
    schemas = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id.endswith("_COLUMNS") for t in n.targets)}
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple | ast.Set) and id(node) not in schemas:
            elts = node.elts
        elif isinstance(node, ast.Dict) and all(isinstance(v, ast.Constant) and isinstance(v.value, str)
                                                for v in node.values):
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        yield node.lineno, {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


# Files that must not read the registry, and why.
INDEPENDENT = {REPO / "benchmarks" / "reference_recipe.py": "the independent reference imports nothing from cellica"}


def _sources():
    for folder in ("src", "benchmarks", "workflow", "tests"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".smk") and path != REGISTRY and path not in INDEPENDENT:
                yield path


def _lists_of_names(path: Path, text: str) -> list[str]:
    least = LEAST["library" if path.parts[len(REPO.parts)] in ("src", "workflow") else "elsewhere"]
    if path.suffix == ".py":
        literals = _literals(ast.parse(text))
    else:  # Snakemake files: bracketed lists of quoted names
        literals = ((text[:m.start()].count("\n") + 1, set(QUOTED.findall(m.group())))
                    for m in re.finditer(r"[\[(][^\[\]()]*[\])]", text))
    return [f"{path.relative_to(REPO)}:{line}: {kind}s {sorted(strings & names)}"
            for line, strings in literals for kind, names in NAMES.items() if len(strings & names) >= least[kind]]


def _alternatives(text: str) -> list[str]:
    """The registry names a string is, or lists as a regular expression's alternatives (a
    wildcard constraint ``seed-?\\d+|checkpoint|untrained``)."""
    return [part for part in text.split("|") if part in ALONE]


def _names_alone(path: Path, text: str) -> list[str]:
    """Registry names spelled one at a time in the library (src/cellica) or the workflow."""
    if path.parts[len(REPO.parts)] not in ("src", "workflow"):
        return []
    where = path.relative_to(REPO / "src" / "cellica").as_posix() if path.suffix == ".py" else ""
    if path.suffix == ".py":
        tree = ast.parse(text)
        lookups = {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)
                   and isinstance(n.value, ast.Name) and n.value.id in LOOKUPS}
        found = [(n.lineno, part) for n in ast.walk(tree) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and id(n) not in lookups for part in _alternatives(n.value)]
    else:
        found = [(text[:m.start()].count("\n") + 1, part) for m in re.finditer(r"""["']([^"'\n]*)["']""", text)
                 for part in _alternatives(m.group(1))]
    return [f"{path.relative_to(REPO)}:{line}: {name!r}" for line, name in found
            if (where, name) not in OTHER_MEANING]


def test_no_list_of_names_outside_the_registry():
    """Any literal naming two variants, metrics, baselines or models in the library (three
    variants or five metrics in tests and benchmarks), or one of them spelled alone in the
    library, is a second list to keep in step: code, workflow, benchmarks and tests derive
    theirs from cellica.registry (the claims' variants, the report's charted metrics, the
    model tags, the default baselines are registry data)."""
    found = []
    for path in _sources():
        text = path.read_text()
        found += _lists_of_names(path, text) + _names_alone(path, text)
    assert not found, "names outside cellica.registry:\n" + "\n".join(found)


def test_the_name_check_catches_what_it_is_for():
    """Each way a name escaped the registry before (issue #46) is caught: the claims' variants
    as a pair and alone, the report's chart list, a model tag pattern, the default baselines."""
    src = REPO / "src" / "cellica" / "x.py"
    cases = {"for other in ('pca', 'pca_rand'): pass": 1, "b = batch.loc['pca_ica']": 1,
             "charts = [m for m in (auroc, 'sparsity', 'concentration', 'recall')]": 1,
             "names = ['cell_count', 'untrained']": 1, "if tag == 'cp_measure': pass": 1,
             "if metric in ('sparsity', 'concentration'): pass": 1, "RECALL_COLUMNS = ['n_genes', 'recall']": 0,
             "step = 'pca'": 0, "tag = MODELS['cp_measure'].name": 0}
    for code, hits in cases.items():
        assert bool(_lists_of_names(src, code) or _names_alone(src, code)) == bool(hits), code
    smk = REPO / "workflow" / "rules" / "x.smk"
    assert _names_alone(smk, 'model=r"seed-?\\d+|checkpoint|untrained"')  # a wildcard's alternatives
    assert _names_alone(smk, 'model="untrained"') and not _names_alone(smk, 'model=TRAINED_MODELS')


def test_the_registry_is_consistent():
    """Every claim and comparison names registered variants and compared metrics; every
    variant's steps exist, its parameters are TransformParams fields, and they include every
    parameter its steps read (the DAG re-runs a variant when one of them changes); every kind is known."""
    import dataclasses

    from cellica.transform.params import TransformParams
    from cellica.transform.steps import step_class
    from cellica.transform.variants import compose

    fields = {f.name for f in dataclasses.fields(TransformParams)}
    for v in VARIANTS.values():
        assert set(v.uses) <= fields, v.name
        for entry in (*registry.COMMON_STEPS, *v.steps):
            assert set(step_class(entry.partition(":")[0]).uses) <= set(v.uses), (v.name, entry)
        everything = TransformParams(position_correction=True, standardize="controls")
        names = [s.name for s in compose(v.name, everything)]
        assert names[:2] == ["correct_positions", "standardize"] and "centre_batches:after" not in names, v.name
        assert v.role in ("paper", "comparator")
    assert registry.PAPER_VARIANTS == registry.CLAIMED_ORDER[::-1] or set(registry.PAPER_VARIANTS) == \
        set(registry.CLAIMED_ORDER)
    assert len(registry.PAIRS) == 6 and registry.PAIRS[0] == ("pca_ica", "pca")
    for claim in registry.CLAIMS:
        for metric, better, worse in claim.parts:
            assert metric in registry.COMPARED_METRICS and {better, worse} <= set(VARIANTS)
    assert {m.kind for m in METRICS.values()} <= set(registry.KINDS)
    assert all(m.column for m in METRICS.values() if m.kind == "gene")


def test_the_summary_s_rows_are_the_registry_s_metrics(tmp_path):
    """What the evaluation writes is what the registry lists: every per-variant metric and count
    of a summary is registered (nothing is shown under a name the registry lacks)."""
    from cellica.evaluate.summary import summary_table
    from tests.test_compare import _per_gene

    rng = np.random.default_rng(0)
    per_gene = _per_gene({v: rng.uniform(0.5, 0.9, 6) for v in registry.PAPER_VARIANTS})
    import pandas as pd

    batch = pd.DataFrame({"variant": list(registry.PAPER_VARIANTS), "n_controls": 10, "n_batches": 2,
                          **{m: 0.5 for m in registry.metrics_of("batch", "truth")}})
    activity = pd.DataFrame({"variant": list(registry.PAPER_VARIANTS), "perturbation": "g", "map": 0.5,
                             "p_value": 0.1, "p_value_fdr": 0.1, "significant": False})
    s = summary_table(per_gene, batch, activity, n_boot=50)
    shown = set(s.loc[s["table"] == "per_variant", "metric"])
    assert shown <= set(METRICS), shown - set(METRICS)
    assert set(registry.metrics_of("batch", "truth")) <= shown


def test_a_new_variant_is_one_registry_entry_and_one_step(monkeypatch):
    """A dummy variant ("pca_sign": PCA whitening with every component's sign flipped) is added
    by touching two places: the one step it needs that no step has, and its registry entry
    (a composition of existing steps and that one). The composition, the seeded list, the DAG's
    parameters, the report's order, the schema's choices and the docs' table follow."""
    import anndata as ad
    import pandas as pd

    import cellica.transform.variants  # noqa: F401  (registers every step)
    from cellica.config import config_schema
    from cellica.transform.steps import Step
    from cellica.transform.variants import make_transform

    class FlipSigns(Step):  # place 1: the step no variant had
        name = "flip_signs"
        prefix = "FC"

        def apply(self, x, obs, ctx):
            return -x

    entry = replace(VARIANTS["pca"], name="pca_sign", help="PCA whitening, signs flipped",
                    steps=(*VARIANTS["pca"].steps, "flip_signs"), role="comparator", seeded=True)
    monkeypatch.setitem(VARIANTS, "pca_sign", entry)  # place 2: the registry entry
    rng = np.random.default_rng(0)
    obs = pd.DataFrame({"batch": ["B1", "B2"] * 40, "perturbation": ["ctrl"] * 60 + ["g"] * 20,
                        "is_control": [True] * 60 + [False] * 20, "plate": "P", "well": "W"},
                       index=[f"t{i}" for i in range(80)])
    adata = ad.AnnData(rng.normal(size=(80, 5)).astype(np.float32), obs=obs)
    flipped, plain = make_transform("pca_sign").fit_transform(adata), make_transform("pca").fit_transform(adata)
    assert [type(s) for s in make_transform("pca_sign").fit(adata).steps][-1] is FlipSigns
    np.testing.assert_array_equal(np.asarray(flipped.X), -np.asarray(plain.X))
    assert list(flipped.var_names) == [f"FC{i}" for i in range(1, 6)]
    assert "pca_sign" in registry.seeded_variants()
    assert registry.variant_order(["pca_sign", "base", "combat"]) == ["base", "combat", "pca_sign"]
    assert "`pca_sign` | PCA whitening, signs flipped | `drop_features` → `centre_batches:before` → `pca` → " \
        "`centre_batches:after` → `flip_signs`" in registry.variants_markdown()
    schema = config_schema()["properties"]["transform"]["properties"]["variants"]
    assert schema["items"]["enum"] == [*registry.VARIANT_NAMES, "pca_sign"]  # read from the registry, live


def test_a_variant_of_existing_steps_is_one_registry_entry(monkeypatch):
    """PCA scores without the whitening's scaling, ICA-rotated ("pca_scores_ica"): one registry
    entry of existing steps and nothing else; its output is the hand composition of the
    fitted arrays."""
    import anndata as ad
    import pandas as pd

    from cellica.transform.variants import make_transform

    monkeypatch.setitem(VARIANTS, "pca_scores_ica", replace(
        VARIANTS["pca_ica"], name="pca_scores_ica", help="unscaled PCA scores, ICA", role="comparator",
        steps=("drop_features", "pca:scores", "ica")))  # the one place
    rng = np.random.default_rng(1)
    obs = pd.DataFrame({"batch": "B1", "perturbation": ["ctrl"] * 60 + ["g"] * 20, "is_control": [True] * 60 +
                        [False] * 20, "plate": "P", "well": "W"}, index=[f"t{i}" for i in range(80)])
    adata = ad.AnnData(rng.laplace(size=(80, 4)).astype(np.float32), obs=obs)
    model = make_transform("pca_scores_ica", __import__("cellica.transform.params", fromlist=["x"]).TransformParams(
        batch_correction=None)).fit(adata)
    pca, unmix = model.named_steps["pca"].arrays, model.named_steps["ica"].arrays["unmixing"]
    expected = (np.asarray(adata.X, np.float64) - pca["mean"]) @ pca["components"].T @ unmix.T
    np.testing.assert_allclose(model.transform(adata).X, expected, rtol=1e-5, atol=1e-5)
    assert not model.named_steps["pca"].whiten and list(model.transform(adata).var_names)[:1] == ["IC1"]


def test_an_unknown_step_is_named():
    from cellica.core.errors import CellicaError
    from cellica.transform.steps import step_class

    with pytest.raises(CellicaError, match="no transform step has that name; known: centre_batches, combat"):
        step_class("no_such_step")


def test_docs_variant_table_says_what_the_registry_holds():
    """docs/configuration.md's variant table, read back row by row (not compared with the
    function that writes it): every registered variant once, in the registry's order, with its
    description, its steps in order, its role and whether it is re-fit per seed."""
    text = (REPO / "docs" / "configuration.md").read_text()
    block = text.split("<!-- variants:start -->")[1].split("<!-- variants:end -->")[0]
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in block.strip().splitlines()[2:]]
    assert [r[0].strip("`") for r in rows] == list(VARIANTS)
    for name, what, steps, role, seeded in rows:
        v = VARIANTS[name.strip("`")]
        assert what == v.help and role == v.role and seeded == ("yes" if v.seeded else "no")
        assert [s.strip("`") for s in steps.split(" → ")] == (list(v.steps) or ["(none)"])
    assert Path(REPO / "docs" / "stages.md").read_text().count("| `pca_ica` |") == 0
