"""The config schema: defaults agree with the library, unknown keys and wrong types fail."""

import dataclasses

import pytest
import yaml
from snakemake.utils import validate

from cellica.embed import EmbedParams
from cellica.features import FeatureTableParams
from cellica.ingest import IngestParams
from cellica.params import EvalParams, TransformParams
from cellica.simulate import SimulationParams
from cellica.train import TrainParams
from tests.conftest import REPO

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def _schema():
    return yaml.safe_load(SCHEMA.read_text())


# Keys the rules set themselves (threads, the per-seed rotation seed) and keys that are the
# rule's inputs, not options.
SECTIONS = [
    ("simulate", SimulationParams, set(), set()),
    ("ingest", IngestParams, set(), {"manifest"}),
    ("mae", TrainParams, {"threads"}, {"checkpoint"}),
    ("embed", EmbedParams, {"threads"}, {"shards"}),
    ("features", FeatureTableParams, set(), {"path", "truth"}),
    ("transform", TransformParams, {"rotation_seed"}, {"variants", "level"}),
    ("evaluate", EvalParams, set(), {"chunks"}),
]


@pytest.mark.parametrize("section, cls, skip, rule_keys", SECTIONS)
def test_schema_keys_and_defaults_match_the_library(section, cls, skip, rule_keys):
    props = _schema()["properties"][section]["properties"]
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    assert set(props) - rule_keys == set(fields)
    for name, f in fields.items():
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:  # required in the library (e.g. ingest channels): the schema's default is empty
            default = props[name]["default"]
        assert props[name]["default"] == (list(default) if isinstance(default, tuple) else default), name
        assert props[name].get("description"), f"{section}.{name} is undocumented"


def test_every_key_is_documented():
    def walk(node, path):
        for key, sub in node.get("properties", {}).items():
            assert "description" in sub and "default" in sub, f"{path}{key}"
            walk(sub, f"{path}{key}.")

    walk(_schema(), "")


def test_shipped_configs_validate_and_defaults_fill():
    for path in [REPO / "config" / "config.yaml", *sorted((REPO / "config" / "examples").glob("*.yaml"))]:
        cfg = yaml.safe_load(path.read_text())
        validate(cfg, str(SCHEMA))
        assert cfg["simulate"]["shard_tiles"] == 256, path


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"simulate": {"n_gene": 3}}, "n_gene"),
        ({"simulate": {"n_genes": "many"}}, "many"),
        ({"source": "download"}, "download"),
        ({"colour": "blue"}, "colour"),
        ({"evaluate": {"seeds": []}}, "should be non-empty|is too short"),
        ({"evaluate": {"seeds": [1, 1]}}, "non-unique|has non-unique elements"),
        ({"evaluate": {"binning": "quantiles"}}, "quantiles"),
    ],
)
def test_unknown_keys_and_wrong_types_fail(cfg, match):
    with pytest.raises(Exception, match=match):
        validate(cfg, str(SCHEMA))
