# Config validation, output paths and the helper that turns a config section into CLI options.
import shlex

from snakemake.utils import validate


validate(config, schema="../schemas/config.schema.yaml")

RESULTS = config["results_dir"]
LOGS = f"{RESULTS}/logs"
BENCH = f"{RESULTS}/benchmarks"
TILES = f"{RESULTS}/tiles.zarr"
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


def final_outputs():
    return [f"{RESULTS}/qc/tiles_summary.txt"]
