"""The run plan (cellica.plan) without Snakemake: checks, defaults, model tags, truth and seed
pairing, inputs, entity words, config hash, progress hint, SLURM settings; and the launcher."""

import copy
import json
import re
import shlex

import pytest
import yaml

from cellica._launch import snakemake_command
from cellica.config import config_schema
from cellica.core.errors import CellicaError
from cellica.plan import (
    RunPlan,
    checked_config,
    config_hash,
    entity_label,
    fill_defaults,
)
from cellica.registry import PAPER_VARIANTS, seeded_variants
from tests.conftest import REPO

CONFIGS = [REPO / "config" / "config.yaml", REPO / "tests" / "configs" / "tiny.yaml",
           *sorted((REPO / "config" / "examples").glob("*.yaml"))]


def _features_config(tmp_path, **features):
    table = tmp_path / "t.csv"
    table.write_text("a\n1\n")
    return {"source": "features", "results_dir": "out", "features": {"path": str(table), **features}}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_defaults_are_filled_as_snakemake_fills_them(path, tmp_path):
    """The library's filling equals Snakemake's own validate(set_default=True), key for key."""
    from snakemake.utils import validate

    config = yaml.safe_load(path.read_text())
    ours = fill_defaults(copy.deepcopy(config))
    schema = tmp_path / "schema.yaml"
    schema.write_text(yaml.safe_dump(config_schema()))
    theirs = copy.deepcopy(config)
    validate(theirs, schema=str(schema))
    assert json.dumps(ours, sort_keys=True) == json.dumps(theirs, sort_keys=True)


def test_a_default_is_copied_never_shared():
    a, b = fill_defaults({}), fill_defaults({})
    a["transform"]["variants"].append("x")
    assert "x" not in b["transform"]["variants"]


def test_checks_stop_with_the_key_before_anything_runs(tmp_path):
    with pytest.raises(CellicaError, match=r"transform\.n_components"):
        RunPlan({"transform": {"n_components": "eight"}})
    with pytest.raises(CellicaError, match="evaluate.chunks"):
        RunPlan({"evaluate": {"chunks": 0}})  # schema-valid type, refused by the parameters' bounds
    with pytest.raises(CellicaError, match="stability.enabled needs an image source"):
        RunPlan({**_features_config(tmp_path), "stability": {"enabled": True}})
    bomb = {"a": []}
    for _ in range(20):
        bomb = {"a": [bomb, bomb]}
    with pytest.raises(CellicaError, match="expands to more than"):
        checked_config(bomb)


def test_overrides_arrive_as_text_and_are_retyped():
    plan = RunPlan({"evaluate": {"seeds": ["0", "2"], "chunks": "3"}})
    assert plan.seeds == [0, 2] and plan.n_chunks == 3


def test_model_tag_follows_the_source_of_the_embeddings(tmp_path):
    assert RunPlan({"mae": {"seed": 7}}).model_tag == "seed7"
    ckpt = tmp_path / "m.safetensors"
    ckpt.write_bytes(b"")
    plan = RunPlan({"mae": {"checkpoint": str(ckpt)}})
    assert plan.model_tag == "checkpoint" and plan.model_file("checkpoint") == str(ckpt)
    assert plan.model_file("seed3") == "results/mae/seed3/model.safetensors"
    assert RunPlan({"profiles": {"enabled": True}}).model_tag == "cp_measure"
    assert RunPlan({"stability": {"enabled": True, "seeds": [3, 5]}}).stability_embeddings() == [
        "results/embeddings/seed3/embeddings.h5ad", "results/embeddings/seed5/embeddings.h5ad"]


def test_each_seed_after_the_first_refits_only_the_seeded_variants():
    plan = RunPlan({"transform": {"variants": list(PAPER_VARIANTS)}, "evaluate": {"seeds": [0, 4, 9]}})
    assert plan.seeded == [v for v in PAPER_VARIANTS if v in seeded_variants()]
    assert plan.seeded == ["pca_ica", "pca_rand"]
    assert plan.seed_features("pca") == ["results/features/pca.h5ad"]
    assert plan.seed_features("pca_ica") == ["results/features/pca_ica.h5ad", "results/features/seeds/pca_ica-4.h5ad",
                                             "results/features/seeds/pca_ica-9.h5ad"]


def test_ground_truth_is_the_simulated_screens_tables_or_the_users_table(tmp_path):
    sim = RunPlan({})
    assert sim.evaluate_inputs("pca")["truth"] == "results/truth" == sim.batch_metrics_inputs()["truth"]
    truth = tmp_path / "truth.parquet"
    truth.write_bytes(b"")
    assert RunPlan(_features_config(tmp_path, truth=str(truth))).evaluate_inputs("base")["truth"] == str(truth)
    plain = RunPlan(_features_config(tmp_path))
    assert "truth" not in plain.evaluate_inputs("base") and "truth" not in plain.batch_metrics_inputs()
    assert "tiles" not in plain.report_inputs()
    assert plain.final_outputs() == ["out/eval/summary.parquet", "reports/index.html", "reports/gene_index",
                                     "out/maps/recall.parquet", "out/maps/efaar"]


def test_maps_add_their_tables_to_the_summary_and_quote_them():
    plan = RunPlan({"results_dir": "my results", "transform": {"variants": ["base", "pca"]}})
    inputs = plan.summarize_inputs()
    assert inputs["consistency"] == ["my results/maps/base_consistency.parquet",
                                     "my results/maps/pca_consistency.parquet"]
    words = shlex.split(plan.summarize_map_args(inputs))
    assert words[:4] == ["--recall", "my results/maps/recall.parquet", "--recall-differences",
                         "my results/maps/recall_differences.parquet"]
    off = RunPlan({"maps": {"enabled": False}})
    assert "recall" not in off.summarize_inputs() and off.summarize_map_args(off.summarize_inputs()) == ""
    assert "maps" not in off.report_inputs()


def test_a_variant_gets_only_the_transform_options_it_uses():
    plan = RunPlan({"transform": {"n_components": 8, "harmony_max_iter": 3}})
    assert "--n-components 8" in plan.transform_args("pca")
    assert "--harmony-max-iter" not in plan.transform_args("pca")
    assert "--harmony-max-iter 3" in plan.transform_args("harmony")
    assert "--n-components" not in plan.transform_args("base")


def test_wells_level_reads_well_means_of_image_sources_only(tmp_path):
    assert RunPlan({"transform": {"level": "wells"}}).transform_input() == "results/embeddings/seed0/wells.h5ad"
    assert RunPlan({}).transform_input() == "results/embeddings/seed0/embeddings.h5ad"


@pytest.mark.parametrize("column, word", [("Metadata_moa", "MoA"), ("Metadata_Compound", "compound"),
                                          ("perturbation", "perturbation"), ("", "perturbation")])
def test_the_perturbation_is_called_what_its_column_says(column, word):
    assert entity_label("features", {"perturbation": column}) == word
    assert entity_label("simulate") == "gene" and entity_label("ingest", {"perturbation": column}) == "perturbation"


def test_report_entity_overrides_the_column_name(tmp_path):
    cfg = _features_config(tmp_path, column_map={"perturbation": "Metadata_moa"})
    assert RunPlan(copy.deepcopy(cfg)).entity == "MoA"
    assert RunPlan({**cfg, "report": {"entity": "compound"}}).entity == "compound"


def test_config_hash_depends_on_values_not_on_their_order():
    a = RunPlan({"evaluate": {"chunks": 2, "n_trees": 10}})
    b = RunPlan({"evaluate": {"n_trees": 10, "chunks": 2}})
    c = RunPlan({"evaluate": {"chunks": 3, "n_trees": 10}})
    assert a.hash == b.hash != c.hash and len(a.hash) == 12
    assert a.hash == config_hash(json.loads(json.dumps(a.config)))


def test_the_progress_hint_names_a_log_this_run_writes(tmp_path):
    assert "logs/train_mae/seed0.log" in RunPlan({}).progress_hint()
    assert "logs/profile_tiles/0-of-1.log" in RunPlan({"profiles": {"enabled": True}}).progress_hint()
    hint = RunPlan({**_features_config(tmp_path), "evaluate": {"chunks": 4}}).progress_hint()
    assert "out/logs/evaluate/" in hint and "-0-of-4.log" in hint and "train_mae" not in hint


def test_slurm_settings_left_unset_name_each_key_and_rule():
    from cellica.slurm import missing_slurm_settings

    jobs = [("transform", {"slurm_account": "SET_ME", "slurm_partition": "cpu"}, False),
            ("evaluate_chunk", {"slurm_account": "", "slurm_partition": "cpu"}, False),
            ("all", {}, True)]
    msg = missing_slurm_settings(jobs)
    assert "slurm_account (now SET_ME)" in msg and "slurm_account (now unset)" in msg
    assert "slurm_partition" not in msg and "evaluate_chunk, transform" in msg and "all" not in msg
    assert missing_slurm_settings([("transform", {"slurm_account": "lab", "slurm_partition": "cpu"}, False)]) is None


def test_one_launcher_runs_this_checkouts_snakefile():
    cmd = snakemake_command("--dry-run", directory="w", configfile="c.yaml")
    assert cmd[1:] == ["--snakefile", str(REPO / "Snakefile"), "--directory", "w", "--configfile", "c.yaml",
                       "--cores", "2", "--dry-run"]
    assert "--cores" not in snakemake_command(profile="p", cores=None)
    assert snakemake_command("--cores", "1").count("--cores") == 1


def test_the_rules_only_ask_the_plan():
    """The rules decide nothing: no rule file reads or branches on a config value (the plan says
    which rules exist, their inputs, threads and optional options), no rule writes its own
    optional-option lambda, no alias common.smk defines goes unused, and common.smk imports
    nothing from a stage's internals."""
    rules = {smk.name: smk.read_text() for smk in sorted((REPO / "workflow" / "rules").glob("*.smk"))}
    for name, text in {**rules, "Snakefile": (REPO / "Snakefile").read_text()}.items():
        assert "config[" not in text and "if config" not in text, name
        assert "in input.keys()" not in text, name  # an optional input's option: PLAN.optional
    text = rules["common.smk"]
    aliases = re.findall(r"^([A-Z_][A-Z_, ]*) = ", text, re.MULTILINE)
    every = "\n".join(rules.values()) + (REPO / "Snakefile").read_text()
    unused = [n for names in aliases for n in (x.strip() for x in names.split(","))
              if len(re.findall(rf"\b{n}\b", every)) < 2]
    assert not unused, unused
    imports = [line for line in text.splitlines() if line.startswith("from cellica")]
    assert all(line.split()[1] in ("cellica.plan", "cellica.slurm", "cellica.config", "cellica.core.errors",
                                   "cellica.core.jobtimes")
               or line.split()[1].endswith(".params") for line in imports), imports
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        assert "cellica.report" not in smk.read_text().replace("cellica.report.params", ""), smk.name


def test_the_profile_s_unset_account_is_found_in_its_default_resources():
    from cellica.slurm import unset_profile_settings

    both = unset_profile_settings(["mem_mb=4000", "slurm_account=SET_ME", "slurm_partition='SET_ME'"])
    assert both.startswith("slurm_account and slurm_partition still SET_ME under default-resources")
    assert unset_profile_settings(["slurm_account=lab", "slurm_partition=SET_ME"]).startswith(
        "slurm_partition still SET_ME")
    assert unset_profile_settings(["slurm_account=lab", "slurm_partition=cpu"]) is None
    assert unset_profile_settings(None) is None
