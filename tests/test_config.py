"""The config schema (generated: see test_params.py) validates the shipped configs; unknown keys and
wrong types fail."""

import pytest
import yaml
from snakemake.utils import validate

from tests.conftest import REPO

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def _schema():
    return yaml.safe_load(SCHEMA.read_text())


def test_every_key_is_documented():
    def walk(node, path):
        for key, sub in node.get("properties", {}).items():
            assert sub.get("description"), f"{path}{key}"
            # Only a value the library cannot default (the channels of an ingestion) has none.
            assert "default" in sub or f"{path}{key}" == "ingest.channels", f"{path}{key}"
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


def test_a_same_outputs_setting_reaches_the_command_only_when_changed():
    """Settings that leave every output the same (their tests: the direct decoder against zarr
    for both compressors in test_tilestore.py, workers and read threads against one process in
    test_embed.py)
    are passed only when set, so adding such a key re-runs no finished job."""
    import dataclasses

    from cellica.config import SECTIONS, command_args
    from cellica.store.params import IngestParams, SimulationParams

    marked = {(name, f.name) for name, classes in SECTIONS.items() for cls in classes
              for f in dataclasses.fields(cls) if f.metadata.get("same_outputs")}
    assert marked == {("simulate", "compression"), ("ingest", "compression"), ("embed", "num_workers"),
                      ("embed", "read_threads")}
    config = {"simulate": {"shard_tiles": 16, "compression": "zstd"}, "ingest": {"compression": "lz4"}}
    assert command_args(config, "simulate", SimulationParams) == "--shard-tiles 16"
    config["simulate"]["compression"] = "lz4"
    assert command_args(config, "simulate", SimulationParams) == "--shard-tiles 16 --compression lz4"
    assert command_args(config, "ingest", IngestParams) == "--compression lz4"
