# Config validation, output paths and the helper that turns a config section into CLI options.
import shlex

from snakemake.utils import validate


validate(config, schema="../schemas/config.schema.yaml")

RESULTS = config["results_dir"]
LOGS = f"{RESULTS}/logs"
BENCH = f"{RESULTS}/benchmarks"
TILES = f"{RESULTS}/tiles.zarr"
EMB = f"{RESULTS}/embeddings/embeddings.h5ad"
WELLS = f"{RESULTS}/embeddings/wells.h5ad"
MODEL = config["mae"]["checkpoint"] or f"{RESULTS}/mae/model.safetensors"
N_SHARDS = config["embed"]["shards"]
GPUS = config["compute"]["gpus"]
VARIANTS = config["transform"]["variants"]
FEATURES = f"{RESULTS}/features/{{variant}}.h5ad"
CONDA_ENV = "../envs/cellica.yaml"


def cli_value(value):
    """One config value in the syntax of cellica's generated CLI options."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def cli_args(section, skip=()):
    """Render a config section as `--key value` options (keys map 1:1 to CLI options)."""
    return " ".join(
        f"--{key.replace('_', '-')} {shlex.quote(cli_value(value))}"
        for key, value in section.items()
        if key not in skip
    )


def transform_input(wildcards):
    """Tile embeddings, or well means when transform.level is wells (image sources only)."""
    if config["transform"]["level"] == "wells" and config["source"] != "features":
        return WELLS
    return EMB


def final_outputs():
    features = expand(FEATURES, variant=VARIANTS)
    if config["source"] == "features":
        return features
    return [f"{RESULTS}/qc/tiles_summary.txt", *features]
