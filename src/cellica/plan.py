"""The run plan: what a config asks the workflow to build, decided once, without Snakemake.

``workflow/rules/common.smk`` builds one :class:`RunPlan` from Snakemake's ``config`` and
only asks it: the checked config (defaults filled), which model the run embeds with, the
output paths, each rule's inputs, the ground truth and evaluation seeds, the perturbation's
name on the pages, the config hash every report cites, and the progress hint. Everything
here is plain Python, so it is tested without Snakemake (``tests/test_plan.py``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import shlex
from typing import Any

from cellica._plan_sets import applicable_baselines, model_tag
from cellica.config import (
    apply_overrides,
    check_config_size,
    command_args,
    config_problem,
    config_rules,
    config_schema,
)
from cellica.core.errors import CellicaError
from cellica.estimates import cost_warnings
from cellica.registry import (
    BASELINES,
    MODELS,
    REFERENCE_VARIANT,
    VARIANTS,
    model_pattern,
    seeded_variants,
)
from cellica.stability.params import AlignParams
from cellica.transform.params import TransformParams


def fill_defaults(config: dict[str, Any], schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """Set every key the config leaves out to its schema default, section by section (in place).

    The same filling as ``snakemake.utils.validate(config, schema, set_default=True)``
    (a test holds them equal), done without Snakemake; a default is copied, never shared.
    """
    def fill(node: dict[str, Any], props: dict[str, Any]) -> None:
        for key, sub in props.items():
            if "default" in sub:
                node.setdefault(key, copy.deepcopy(sub["default"]))
            if isinstance(node.get(key), dict) and "properties" in sub:
                fill(node[key], sub["properties"])

    fill(config, (schema or config_schema())["properties"])
    return config


def checked_config(config: dict[str, Any]) -> dict[str, Any]:
    """The workflow's config checked and completed in place, or a :class:`CellicaError`.

    In order: its size (a YAML alias bomb stops before anything walks it), the
    ``--config`` overrides retyped by their fields, the schema (each problem one line
    naming the key), the defaults filled, then every rule the schema cannot state
    (:func:`cellica.config.config_rules`).
    """
    check_config_size(config)
    apply_overrides(config)
    schema = config_schema()
    problem = config_problem(config, schema)
    if problem:
        raise CellicaError(problem)
    fill_defaults(config, schema)
    problem = config_rules(config)
    if problem:
        raise CellicaError(problem)
    return config


def config_hash(config: dict[str, Any]) -> str:
    """Short hash of the checked config (defaults filled): every report number cites it."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


def entity_label(source: str, column_map: dict[str, str] | None = None) -> str:
    """What the perturbations are called on the pages: ``gene`` for simulated screens, the
    mapped column's name for imported profiles (``Metadata_moa`` -> ``MoA``, ``compound``),
    else ``perturbation``."""
    if source == "simulate":
        return "gene"
    column = (column_map or {}).get("perturbation", "")
    name = str(column).removeprefix("Metadata_").strip("_ ").lower()
    if source != "features" or not name or name == "perturbation":
        return "perturbation"
    return {"moa": "MoA"}.get(name, name)


class RunPlan:
    """Paths, inputs and options of one run, from its checked config.

    Parameters
    ----------
    config : dict
        The workflow's config; checked and completed in place (:func:`checked_config`)
        unless ``checked`` says it already is.
    checked : bool, default False
        Skip the checks (the config came from :func:`checked_config`).
    configfiles : list, optional
        Its files, read again to refuse a key given twice (:func:`cellica.core.yamlfiles.load_unique`).

    Raises
    ------
    CellicaError
        The config's first problems, one line each.

    Attributes
    ----------
    warnings : list of str
        Settings out of proportion, with the estimate (:func:`cellica.estimates.cost_warnings`).
    """

    def __init__(self, config: dict[str, Any], checked: bool = False, configfiles: list | None = None):
        from cellica.core.yamlfiles import load_unique

        for path in configfiles or []:
            load_unique(path)
        self.config = config if checked else checked_config(config)
        c = self.config
        self.results, self.reports = c["results_dir"], c["reports_dir"]
        self.logs, self.bench = f"{self.results}/logs", f"{self.results}/benchmarks"
        self.tiles = f"{self.results}/tiles.zarr"
        self.truth_tables = f"{self.results}/truth"  # cellica export-truth: what evaluation reads
        self.model_tag = model_tag(c)
        self.model_of = f"{self.results}/mae/{{model}}/model.safetensors"
        self.emb_of = f"{self.results}/embeddings/{{model}}/embeddings.h5ad"
        self.wells_of = f"{self.results}/embeddings/{{model}}/wells.h5ad"
        self.emb, self.wells = (p.format(model=self.model_tag) for p in (self.emb_of, self.wells_of))
        self.n_shards = c["embed"]["shards"]
        # Only train_mae and embed use a GPU, and only when compute.gpus asks (docs/hpc.md).
        self.gpu_resources = {"gpu": c["compute"]["gpus"]} if c["compute"]["gpus"] else {}
        self.container = c["compute"]["container"]  # only --software-deployment-method apptainer uses it
        self.variants = list(c["transform"]["variants"])
        self.features = f"{self.results}/features/{{variant}}.h5ad"
        # Baselines: feature sets of their own, evaluated and summarised beside the variants.
        self.baselines, self.baseline_notes = applicable_baselines(c)
        self.evaluated = self.variants + self.baselines
        # Evaluation seeds after the first re-fit the seeded variants (ICA start, random rotation).
        self.seeds = list(c["evaluate"]["seeds"])
        self.seeded = [v for v in self.variants if v in seeded_variants()]
        self.seed_features_of = f"{self.results}/features/seeds/{{variant}}-{{seed}}"
        self.eval = f"{self.results}/eval"
        self.summary = f"{self.eval}/summary.parquet"
        self.truth_genes = f"{self.eval}/truth_genes.parquet"  # simulated screens: cellica truth-genes
        self.environment = f"{self.results}/environment.json"  # the software of the run (the report's index)
        self.maps = f"{self.results}/maps"
        self.n_chunks, self.n_page_chunks = c["evaluate"]["chunks"], c["report"]["chunks"]
        self.examples_of = f"{self.results}/qc/examples/{{chunk}}-of-{self.n_page_chunks}.parquet"
        self.entity = c["report"]["entity"] or entity_label(c["source"], c["features"]["column_map"])
        self.stability = f"{self.results}/stability"
        self.alignment = f"{self.stability}/alignment.parquet"
        self.hash = config_hash(c)
        self.warnings = cost_warnings(c)
        # Where the run's samples come from: which rules exist (tiles.smk, embed.smk, baselines.smk).
        self.source = c["source"]
        self.simulates, self.ingests = self.source == "simulate", self.source == "ingest"
        self.imports_features = self.source == "features"
        self.has_images = not self.imports_features
        self.manifest, self.features_table = c["ingest"]["manifest"], c["features"]["path"]

    def threads(self, section: str) -> int:
        """The threads a section's jobs ask for (``mae.threads``, ``embed.threads``)."""
        return self.config[section]["threads"]

    @staticmethod
    def optional(option: str, key: str, *, more: tuple[str, str] | None = None):
        """A rule's ``params`` function passing ``option`` with its input ``key`` only when the
        rule has that optional input (``--truth``, ``--store``, ``--alignment``), and with it
        ``more``'s option and input (a list: ``--maps`` beside ``--recall``)."""
        def quoted(files) -> str:
            return " ".join(shlex.quote(f) for f in ([files] if isinstance(files, str) else files))

        def text(wildcards, input) -> str:
            if key not in input.keys():
                return ""
            return f"{option} {quoted(input[key])}" + (f" {more[0]} {quoted(input[more[1]])}" if more else "")

        return text

    def wildcard_constraints(self) -> dict[str, str]:
        """The regular expression of each wildcard the rules use."""
        return {"variant": "|".join(self.evaluated), "seed": r"-?\d+",
                "model": model_pattern(),
                "shard": r"\d+", "chunk": r"\d+"}

    @staticmethod
    def model_patterns() -> tuple[str, str]:
        """The ``{model}`` wildcards of the MAEs cellica trains, and of every model the embed rule runs."""
        return model_pattern(trained=True), model_pattern(encoder=True)

    def cli_args(self, section: str, cls) -> str:
        """The options of ``cls``'s command from ``config[section]`` (shell-quoted)."""
        return command_args(self.config, section, cls)

    def transform_args(self, variant: str) -> str:
        """Only the transform parameters the variant uses: changing another leaves it up to date."""
        return command_args(self.config, "transform", TransformParams, only=VARIANTS[variant].uses)

    def align_args(self) -> str:
        """``cellica align`` whitens and rotates as the transform stage does: its settings, and the split."""
        split = command_args(self.config, "stability", AlignParams)
        return f"{command_args(self.config, 'transform', AlignParams)} {split}"

    def transform_input(self) -> str:
        """Tile embeddings, or well means when ``transform.level`` is wells (image sources only)."""
        return self._at_level(self.model_tag)

    def _at_level(self, model: str) -> str:
        """The embeddings of ``{model}`` at ``transform.level`` (image sources), or the imported features."""
        if self.imports_features:
            return self.emb
        return (self.wells_of if self.config["transform"]["level"] == "wells" else self.emb_of).format(model=model)

    def stability_embeddings(self) -> list[str]:
        """The embeddings of the MAEs trained with each of ``stability.seeds`` (aligned pairwise)."""
        return [self.emb_of.format(model=f"seed{s}") for s in self.config["stability"]["seeds"]]

    def model_file(self, model: str) -> str:
        """The MAE a ``{model}`` names: a trained seed, the untrained baseline's, or the user's checkpoint."""
        return (
            self.config["mae"]["checkpoint"]
            if model == MODELS["checkpoint"].name
            else self.model_of.format(model=model)
        )

    def baseline_input(self, name: str) -> str:
        """A baseline's embeddings: tiles or wells as ``transform.level`` says (image sources), or
        the imported features whose ``baselines.cell_count_column`` is the count."""
        return self._at_level(BASELINES[name].model)

    def nuclei_args(self) -> str:
        """``cellica count-nuclei`` options: only the profile parameters a count depends on."""
        from cellica.embed.cell_count import USES
        from cellica.embed.params import ProfileParams

        return command_args(self.config, "profiles", ProfileParams, only=USES)

    def baseline_args(self, name: str) -> str:
        """``cellica baseline`` options: the base variant's parameters, and the count's column of imported features."""
        column = BASELINES[name].column
        extra = (f" --column {shlex.quote(self.config['baselines'][column])}"
                 if column and self.imports_features else "")
        return self.transform_args(REFERENCE_VARIANT) + extra

    def truth(self) -> str | None:
        """The ground truth: the simulated store's exported tables, ``features.truth``, or None."""
        if self.config["source"] == "simulate":
            return self.truth_tables
        if self.imports_features and self.config["features"]["truth"]:
            return self.config["features"]["truth"]
        return None

    def _with_truth(self, inputs: dict[str, Any]) -> dict[str, Any]:
        truth = self.truth()
        return inputs if truth is None else {**inputs, "truth": truth}

    def variant_files(self, template: str) -> list[str]:
        """``template`` (with ``{variant}``) for every variant, in the config's order."""
        return [template.format(variant=v) for v in self.variants]

    def seed_features(self, variant: str) -> list[str]:
        """The features each evaluation seed classifies: one file for an unseeded variant, else the
        main file for the first seed and a re-seeded transform for each further seed."""
        main = self.features.format(variant=variant)
        if variant not in self.seeded:
            return [main]
        return [main] + [self.seed_features_of.format(variant=variant, seed=s) + ".h5ad" for s in self.seeds[1:]]

    def evaluate_inputs(self, variant: str) -> dict[str, Any]:
        """The variant's features (per seed), plus the ground truth when there is one."""
        return self._with_truth({"features": self.seed_features(variant)})

    def batch_metrics_inputs(self) -> dict[str, Any]:
        """Every variant's features, plus the ground truth when there is one."""
        return self._with_truth({"features": self.variant_files(self.features)})

    def evaluated_files(self, template: str) -> list[str]:
        """``template`` (with ``{variant}``) for every variant, then every baseline."""
        return [template.format(variant=v) for v in self.evaluated]

    def summarize_inputs(self) -> dict[str, Any]:
        """The evaluation's tables (variants and baselines), plus the gene maps' recall and consistency
        when maps are on."""
        inputs = {"per_gene": self.evaluated_files(f"{self.eval}/{{variant}}/per_gene.parquet"),
                  "batch": f"{self.eval}/batch_metrics.parquet", "activity": f"{self.eval}/activity.parquet"}
        if self.config["maps"]["enabled"]:
            inputs["recall"] = f"{self.maps}/recall.parquet"
            inputs["recall_differences"] = f"{self.maps}/recall_differences.parquet"
            inputs["consistency"] = self.variant_files(f"{self.maps}/{{variant}}_consistency.parquet")
        return inputs

    @staticmethod
    def summarize_map_args(inputs: dict[str, Any]) -> str:
        """``cellica summarize`` options naming the gene maps' tables (quoted), when maps are on."""
        if "recall" not in inputs:
            return ""
        files = " ".join(shlex.quote(f) for f in inputs["consistency"])
        return (f"--recall {shlex.quote(inputs['recall'])} --recall-differences "
                f"{shlex.quote(inputs['recall_differences'])} --consistency {files}")

    def qc_tables(self) -> list[str]:
        """The plate-layout tables ``cellica qc`` writes (:data:`cellica.qc.read.TABLES`)."""
        from cellica.qc.read import qc_paths

        return [str(p) for p in qc_paths(f"{self.results}/qc").values()]

    def qc_inputs(self) -> dict[str, Any]:
        """Every variant's features, and the tile store when there is one."""
        inputs: dict[str, Any] = {"features": self.variant_files(self.features)}
        if self.has_images:
            inputs["tiles"] = self.tiles
        return inputs

    def report_inputs(self) -> dict[str, Any]:
        """Everything the HTML reports read; the tile store only when there is one."""
        inputs: dict[str, Any] = {
            "summary": self.summary,
            "per_gene": self.evaluated_files(f"{self.eval}/{{variant}}/per_gene.parquet"),
            "importances": self.evaluated_files(f"{self.eval}/{{variant}}/importances.parquet"),
            "features": self.variant_files(self.features), "qc": self.qc_tables()}
        if self.has_images:
            inputs["examples"] = [self.examples_of.format(chunk=i) for i in range(self.n_page_chunks)]
        if self.simulates:
            inputs["truth_genes"] = self.truth_genes
        if self.config["stability"]["enabled"]:
            inputs["alignment"] = self.alignment
        if self.config["maps"]["enabled"]:
            inputs["maps"] = self.variant_files(f"{self.maps}/{{variant}}.h5ad")
            inputs["recall"] = f"{self.maps}/recall.parquet"
        return inputs

    def final_outputs(self) -> list[str]:
        """What a plain ``snakemake`` builds."""
        outputs = [self.summary, f"{self.reports}/index.html", f"{self.reports}/gene_index"]
        if self.has_images:
            outputs.append(f"{self.results}/qc/tiles_summary.txt")
        if self.config["maps"]["enabled"]:
            outputs += [f"{self.maps}/recall.parquet", f"{self.maps}/efaar"]
        return outputs

    @property
    def software(self) -> str:
        """The digest of the packages installed where the workflow is planned: the rule
        ``environment`` re-records the run's software when it changes (docs/deploy.md)."""
        from cellica.core.environment import digest, installed

        return digest(installed())

    def hold_results(self) -> None:
        """Hold the results folder's run lock while this process lives (:mod:`cellica.core.runlock`)."""
        from cellica.core.runlock import hold_run_lock

        hold_run_lock(self.results)

    def progress_hint(self) -> str:
        """Where each job's progress is, naming a log this run writes."""
        if self.imports_features:
            example = (f"`tail -f {self.logs}/evaluate/{self.variants[0]}-0-of-{self.n_chunks}.log` while the "
                       "classifiers run")
        elif self.model_tag == MODELS["cp_measure"].name:
            example = f"`tail -f {self.logs}/profile_tiles/0-of-{self.n_shards}.log` while the tiles are measured"
        elif self.model_tag == MODELS["checkpoint"].name:
            example = (
                f"`tail -f {self.logs}/embed/{self.model_tag}/0-of-{self.n_shards}.log` while the tiles are embedded"
            )
        else:
            example = f"`tail -f {self.logs}/train_mae/{self.model_tag}.log` while the MAE trains"
        return (f"each job's progress (rate and ETA, a line every 30 s) is in its log file under {self.logs}/; "
                f"e.g. {example}")
