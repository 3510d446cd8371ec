"""One definition per parameter: the config schema, the CLI options and the dataclasses agree.

Every config key of a stage's section is a field of the stage's parameter class and an
option of its command, with the same type, default and allowed values; values written
by the workflow are read back by the CLI unchanged.
"""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import yaml

from cellica.cli.options import dataclass_from_args, parse_value
from cellica.cli.parser import COMMANDS, build_parser
from cellica.config import (
    SECTIONS,
    apply_overrides,
    command_args,
    config_problem,
    config_schema,
    config_sources,
    defaults,
    provenance,
    schema_yaml,
)
from cellica.core.errors import CellicaError
from cellica.core.params import Params
from cellica.embed.params import EmbedParams
from cellica.evaluate.params import EvalParams
from cellica.registry import VARIANTS
from cellica.stability.params import AlignParams
from cellica.store.params import SimulationParams
from cellica.transform.params import TransformParams
from tests.conftest import REPO

JSON_TYPE = {"int": "integer", "float": "number", "str": "string", "bool": "boolean", "list": "array",
             "tuple": "array", "dict": "object"}


def test_the_shipped_schema_is_the_generated_one():
    """workflow/schemas/config.schema.yaml is written by `cellica schema`: never edited by hand."""
    shipped = (REPO / "workflow" / "schemas" / "config.schema.yaml").read_text()
    assert shipped == schema_yaml(), "run: cellica schema --out workflow/schemas/config.schema.yaml"


def test_the_configuration_reference_is_the_generated_one():
    from cellica.config import reference_markdown

    doc = (REPO / "docs" / "configuration.md").read_text()
    block = doc.split("<!-- config-reference:start -->\n")[1].split("\n<!-- config-reference:end -->")[0]
    assert block == reference_markdown(), "run: cellica schema --out ... --docs docs/configuration.md"


def _commands_by_class():
    return {params[1]: name for name, _, _, _, params in COMMANDS if params}


def _default(f):
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


@pytest.mark.parametrize("section", list(SECTIONS))
def test_config_key_cli_option_and_field_agree(section):
    """Name, type, default and choices, for every key of every section, both ways."""
    schema = config_schema()["properties"][section]["properties"]
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    seen = set()
    for cls in SECTIONS[section]:
        kinds = cls.kinds()
        command = _commands_by_class().get(cls.__name__)
        options = {a.dest: a for a in subparsers[command]._actions} if command else {}
        for f in dataclasses.fields(cls):
            in_config = f.metadata.get("config", True)
            if in_config:
                seen.add(f.name)
                prop = schema[f.name]
                kind = kinds[f.name]
                types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
                assert types[0] == JSON_TYPE[kind.name], f"{section}.{f.name}: type"
                assert ("null" in types) == kind.nullable, f"{section}.{f.name}: nullable"
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                    d = _default(f)
                    assert prop["default"] == (list(d) if isinstance(d, tuple) else d), f"{section}.{f.name}"
                choices = f.metadata.get("choices")
                if choices:
                    assert set(prop["enum"]) - {None} == set(choices), f"{section}.{f.name}: choices"
                assert prop["description"] == f.metadata["help"] and prop["description"]
            if command and f.metadata.get("cli", True):
                option = options.get(f.name)
                assert option is not None, f"{section}.{f.name} has no option in `cellica {command}`"
                assert option.option_strings == [f"--{f.name.replace('_', '-')}"]
                assert f.metadata["help"].replace("%", "%%") in option.help
                for choice in f.metadata.get("choices") or ():
                    assert str(choice) in option.help, f"--{f.name} help lists {choice}"
    assert set(schema) == seen, f"{section}: schema keys without a field: {set(schema) ^ seen}"


@pytest.mark.parametrize("section", ["simulate", "mae", "embed", "transform", "evaluate", "features"])
def test_a_config_section_passes_through_the_cli_unchanged(section):
    """The workflow renders config values as options; the CLI parses them back to the same values."""
    config = {section: defaults()[section]}
    if section == "transform":
        config[section].update(n_components=8, batch_correction=None, standardize="controls")
    if section == "evaluate":
        config[section].update(seeds=[3, 1, 2], reg_alpha=0.5)
    import argparse
    import shlex

    from cellica.cli.options import add_dataclass_args

    cls = SECTIONS[section][-1]
    parser = argparse.ArgumentParser()
    add_dataclass_args(parser, cls)  # the options of its `cellica` command
    parsed = dataclass_from_args(cls, parser.parse_args(shlex.split(command_args(config, section, cls))))
    for f in dataclasses.fields(cls):
        if f.name in config[section]:
            want = config[section][f.name]
            got = getattr(parsed, f.name)
            assert (list(got) if isinstance(got, tuple) else got) == want, f.name


def test_null_is_written_one_way():
    assert parse_value("null", "int", "max_tiles") is None
    with pytest.raises(CellicaError, match="write null"):
        parse_value("none", "int", "max_tiles")
    # batch_correction: null is no correction; the word "none" is not a value.
    assert TransformParams(batch_correction=None).batch_correction is None
    with pytest.raises(CellicaError, match="transform.batch_correction: 'none' is not allowed; choose one of "
                                           "center, center_scale"):
        TransformParams(batch_correction="none")
    assert "null" in config_problem({"transform": {"batch_correction": "none"}})


@pytest.mark.parametrize("cls, kwargs, match", [
    (TransformParams, {"fit_fraction": 0.0}, r"transform.fit_fraction: must be > 0"),
    (TransformParams, {"n_components": 2.5}, r"whole count"),
    (TransformParams, {"ica_backend": "jade"}, r"choose one of cellica, sklearn, picard"),
    (EvalParams, {"seeds": []}, r"evaluate.seeds: give at least 1"),
    (EvalParams, {"seeds": [1, 1]}, r"evaluate.seeds: values are repeated"),
    (EvalParams, {"n_boot": 10}, r"evaluate.n_boot: must be >= 100"),
    (EvalParams, {"seeds": [0.5]}, r"evaluate.seeds: expected integer"),
    (EmbedParams, {"pooling": "max"}, r"embed.pooling: 'max' is not allowed"),
    (SimulationParams, {"experiments_per_gene": 9}, r"experiments_per_gene must be in 1..n_experiments"),
    (SimulationParams, {"strong_effect": (1.0,)}, r"expected 2 values"),
    (AlignParams, {"test_fraction": 1.0}, r"stability.test_fraction: must be < 1"),
])
def test_library_callers_meet_the_schemas_rules(cls, kwargs, match):
    with pytest.raises(CellicaError, match=match):
        cls(**kwargs)


def test_ica_settings_are_defined_once():
    t = TransformParams()
    assert t.ica == AlignParams().ica  # same defaults through both routes
    ica_fields = {f.name for f in dataclasses.fields(type(t.ica))}
    schema = config_schema()["properties"]["transform"]["properties"]
    for name in ica_fields - {"max_samples"}:
        assert schema[f"ica_{name}"]["default"] == getattr(t.ica, name)
    assert schema["ica_max_iter"]["default"] == 1000


def test_every_variant_is_in_the_schema_and_each_uses_only_transform_fields():
    fields = {f.name for f in dataclasses.fields(TransformParams)}
    schema = config_schema()["properties"]["transform"]["properties"]["variants"]
    assert schema["items"]["enum"] == list(VARIANTS) == schema["default"]
    for v in VARIANTS.values():
        assert set(v.uses) <= fields, v.name


def _screen(n=120, d=5, seed=0):
    rng = np.random.default_rng(seed)
    obs = pd.DataFrame({"plate": "P", "well": [f"W{i % 12}" for i in range(n)], "batch": ["B1", "B2", "B3"] * (n // 3),
                        "perturbation": ["c"] * (n - 30) + ["g"] * 30, "is_control": [True] * (n - 30) + [False] * 30},
                       index=[f"s{i}" for i in range(n)])
    import anndata as ad

    x = rng.laplace(size=(n, d)) @ rng.normal(size=(d, d)) + (obs["batch"] == "B2").to_numpy()[:, None]
    return ad.AnnData(x.astype(np.float32), obs=obs)


# A different valid value for every transform parameter.
OTHER = {"fit_on": "all", "fit_fraction": 0.8, "standardize": "controls", "n_components": 3, "eig_floor": 1e-3,
         "batch_correction": "center_scale", "batch_stage": "after", "batch_key": "plate", "drop_constant": True,
         "outlier_cutoff": 5.0,
         "ica_backend": "sklearn", "ica_fit_on": "all", "ica_max_samples": 50, "ica_max_iter": 3, "ica_tol": 1e-2,
         "ica_device": "cpu", "sphering_epsilon": 0.5, "harmony_theta": 0.5, "harmony_max_iter": 2, "seed": 5,
         "rotation_seed": 7, "position_correction": True, "position_table": "positions.csv"}


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "harmony"])
def test_parameters_a_variant_does_not_use_leave_its_result_unchanged(variant):
    """The DAG passes each variant only its `uses` (so changing another key reruns nothing):
    that is safe only if no other key changes its result."""
    from cellica.transform.variants import make_transform

    assert set(OTHER) == {f.name for f in dataclasses.fields(TransformParams)}
    data = _screen()
    ref = make_transform(variant, TransformParams(n_components=4)).fit_transform(data).X
    unused = [k for k in OTHER if k not in VARIANTS[variant].uses and not (k == "rotation_seed"
                                                                          and VARIANTS[variant].seeded)]
    assert unused, variant
    for key in unused:
        other = make_transform(variant, TransformParams(**{"n_components": 4, key: OTHER[key]})).fit_transform(data).X
        assert np.array_equal(ref, other), f"{variant} depends on {key}, which is not in its `uses`"


def test_command_line_overrides_are_typed_by_the_field():
    # What Snakemake's own parser makes of the README's --config values (its YAML base loader
    # leaves every scalar text, list items included), not a hand-written guess of it.
    from snakemake.cli import parse_config

    config = parse_config(["transform={n_components: 8, batch_correction: null, batch_key: '8'}",
                           "evaluate={seeds: [0, 1], is_unbalance: false}", "mae={checkpoint: null}"])
    assert config["evaluate"]["seeds"] == ["0", "1"]  # what broke the README's example before
    apply_overrides(config)
    assert config["transform"] == {"n_components": 8, "batch_correction": None, "batch_key": "8"}
    assert config["evaluate"] == {"seeds": [0, 1], "is_unbalance": False}
    assert config["mae"]["checkpoint"] is None
    assert config_problem(config) is None


def test_a_misspelled_key_is_a_few_lines_naming_the_closest():
    msg = config_problem({"transform": {"n_component": 8}, "evalute": {}})
    assert msg.splitlines() == ["unknown config key 'evalute': did you mean 'evaluate'?",
                                "unknown config key 'transform.n_component': did you mean 'n_components'?"]


def test_effective_config_names_each_non_default_value_and_its_origin(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"transform": {"n_components": 8}, "evaluate": {"seeds": [0]}}))
    config = defaults()
    config["transform"]["n_components"] = 8
    config["evaluate"]["chunks"] = 3
    lines = provenance(config, config_sources([path], {"evaluate": {"chunks": 3}}))
    assert lines == [f"transform.n_components = 8  ({path})", "evaluate.chunks = 3  (--config)"]


def test_params_classes_are_all_params():
    for classes in SECTIONS.values():
        for cls in classes:
            assert issubclass(cls, Params) and dataclasses.is_dataclass(cls)


# ---------------------------------------------------------------------- pairs and config-time refusals
def _pairs():
    from cellica.config import SECTIONS

    return [(section, cls, f) for section, classes in SECTIONS.items() for cls in classes
            for f in dataclasses.fields(cls) if f.metadata.get("length") == 2]


def test_every_pair_says_whether_it_is_a_low_high_range():
    pairs = _pairs()
    assert len(pairs) >= 5, pairs
    loose = [f"{s}.{f.name}" for s, _, f in pairs if not (f.metadata.get("ordered") or f.metadata.get("unique"))]
    assert not loose, f"pairs that are neither an ordered (low, high) range nor two distinct values: {loose}"


@pytest.mark.parametrize("section, cls, field", [p for p in _pairs() if p[2].metadata.get("ordered")],
                         ids=lambda v: getattr(v, "name", None) or (v if isinstance(v, str) else ""))
def test_a_reversed_range_is_refused_naming_the_key(section, cls, field):
    low, high = field.default
    required = {f.name: ["a"] for f in dataclasses.fields(cls)  # e.g. ingest's channels
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    with pytest.raises(CellicaError, match=rf"{field.name}: \[{high}, {low}\] is not a \(low, high\) pair"):
        cls(**required, **{field.name: (high, low)})
    if field.metadata["ordered"] == "<":
        with pytest.raises(CellicaError, match="must be below the second"):
            cls(**required, **{field.name: (low, low)})


def test_the_dry_run_refuses_a_tile_size_the_mae_would_refuse():
    from cellica.embed._mae import MAEConfig
    from cellica.plan import RunPlan

    with pytest.raises(CellicaError, match="not a multiple of the patch size 7"):
        MAEConfig(img_size=32, patch_size=7, in_chans=3).validate()  # what the training job says
    cfg = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
    cfg["mae"]["patch_size"] = 7
    with pytest.raises(CellicaError, match=r"simulate.tile_size and mae.patch_size: the tile size 32 is not a "
                                           r"multiple of the patch size 7"):
        RunPlan(cfg)
    cfg["mae"]["checkpoint"] = "given.safetensors"  # a given checkpoint brings its own patch size
    with pytest.raises(CellicaError) as caught:
        RunPlan(cfg)
    assert "patch size" not in str(caught.value)
