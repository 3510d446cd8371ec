"""Progress bars reach a job's log file as lines with rate and ETA (tqdm would switch itself off)."""

from cellica.core.logs import progress


def test_progress_in_a_log_file_writes_lines_with_rate_and_eta(monkeypatch, capsys):
    monkeypatch.setenv("CELLICA_PROGRESS_SECONDS", "0")
    monkeypatch.delenv("TQDM_DISABLE", raising=False)  # conftest quiets bars elsewhere
    assert sum(progress(range(5), desc="work", unit="item")) == 10  # iterates as the iterable does
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("work")]
    assert len(lines) >= 2 and "\r" not in err
    assert "5/5" in lines[-1] and "item/s" in lines[-1] and "<" in lines[-1]  # count, rate, elapsed<remaining


def test_progress_without_a_total_or_iterable_counts_updates(monkeypatch, capsys):
    monkeypatch.setenv("CELLICA_PROGRESS_SECONDS", "0")
    monkeypatch.delenv("TQDM_DISABLE", raising=False)  # conftest quiets bars elsewhere
    bar = progress(total=4, desc="tiles", unit="tile")
    bar.update(2)
    bar.update(2)
    bar.close()
    assert "4/4" in capsys.readouterr().err.splitlines()[-1]
