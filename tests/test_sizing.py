"""Sizing the embedding jobs from a measured rate (docs/hpc.md): hand-checked cases."""

import math

import pytest

from cellica.core.errors import CellicaError
from cellica.embed.sizing import STARTUP_MINUTES, size_embed
from tests.test_integrity import cli, one_line


def test_jobs_of_whole_shard_files_each_under_the_hours():
    # 1,000 tiles in files of 100 at 1 tile/s, jobs of at most 100 s: 10 jobs of 100 tiles.
    s = size_embed(1000, 100, 1.0, job_hours=100 / 3600)
    assert (s.shards, s.largest_job_tiles) == (10, 100)
    assert s.runtime_minutes == math.ceil(1.5 * 100 / 60) + STARTUP_MINUTES == 8
    assert s.gpu_hours == pytest.approx(1000 / 3600)
    assert size_embed(1000, 100, 1000.0).hours_per_million == pytest.approx(1e6 / 1000 / 3600)


def test_an_uneven_split_adds_a_job_until_the_largest_fits():
    # Files of 300, 300, 300, 100 tiles; 400 s a job at 1 tile/s. Three jobs would split the
    # files 1, 2, 1 (np.linspace rounding, as embed --shard does): the middle job, 600 tiles,
    # is over; four jobs of one file each fit (the largest 300 tiles).
    s = size_embed(1000, 300, 1.0, job_hours=400 / 3600)
    assert (s.shards, s.largest_job_tiles) == (4, 300)
    # Never more jobs than files: a rate too slow for any split runs one job per file.
    assert size_embed(1000, 300, 0.001, job_hours=0.01).shards == 4
    # A fast rate: one job.
    assert (size_embed(1000, 300, 1e6).shards, size_embed(1000, 300, 1e6).largest_job_tiles) == (1, 1000)


@pytest.mark.parametrize("args", [(0, 10, 1.0), (10, 10, 0.0), (10, 10, float("nan")), (10, 10, -1.0)])
def test_bad_sizing_inputs_are_refused(args):
    with pytest.raises(CellicaError):
        size_embed(*args)


def test_bad_job_hours_and_margins_are_refused():
    with pytest.raises(CellicaError, match="hours"):
        size_embed(10, 10, 1.0, job_hours=0)
    with pytest.raises(CellicaError, match="margin"):
        size_embed(10, 10, 1.0, margin=0.5)


def test_inspect_sizes_the_jobs_of_a_store(tiny_store, capsys):
    # 72 tiles in files of 16 at 0.01 tiles/s and 0.5 h a job: 7,200 s of work, 4 jobs are
    # needed (1,800 s each); the 5 files split 1, 1, 2, 1 (16, 16, 32, 8 tiles): the largest,
    # 32 tiles, takes 3,200 s, so 5 jobs of one file each (16 tiles, 1,600 s).
    from cellica.cli import main

    assert main(["inspect", str(tiny_store.path), "--embed-rate", "0.01", "--job-hours", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "72 tiles at 0.01 tiles/s per GPU: 2.00 GPU-hours (27,777.778 per million tiles)" in out
    assert "embed.shards: 5 (the largest job embeds 16 tiles)" in out
    assert f"runtime: {math.ceil(1.5 * 16 / 0.01 / 60) + STARTUP_MINUTES}" in out
    code, err = cli(capsys, "inspect", str(tiny_store.path), "--embed-rate", "0")
    assert (
        code == 2
        and one_line(err) == "cellica inspect: error: the embedding rate must be a positive number of tiles/s, got 0.0"
    )
