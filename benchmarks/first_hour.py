"""The times a new user meets, measured as they meet them: a clean clone of this checkout, the
README's install line, then each step of the first hour timed on its own (the demo, each test
tier, the Python example of docs/python.md), with the machine it ran on.

    python benchmarks/first_hour.py                       # every step (about an hour on 2 cores)
    python benchmarks/first_hour.py --steps demo python   # some of them
    python benchmarks/first_hour.py --write               # also the README's and docs' times

The figures go to ``benchmarks/first_hour.json`` (merged with earlier steps) and, with
``--write``, into the README's ``first-hour`` block, so the README states what was measured,
never a guess. The machine is shared: the load average before and after each step is printed
and recorded beside its time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "benchmarks" / "first_hour.json"


def readme_line(prefix: str) -> str:
    """The README's fenced command starting with ``prefix``."""
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith(prefix):
            return line.split("  #")[0].strip()
    raise SystemExit(f"README.md has no line starting {prefix!r}")


def python_example() -> str:
    """The Python block of docs/python.md, as the test runs it."""
    text = (REPO / "docs" / "python.md").read_text()
    return re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)


def steps(clone: Path) -> dict[str, str]:
    """Each step's shell command, in the clone, as the README and docs give it."""
    install = readme_line("python3 -m venv .venv")
    install = install[: install.index(" && snakemake")] if " && snakemake" in install else install
    (clone / "example.py").write_text(python_example())
    return {
        "install": install,
        "demo": ". .venv/bin/activate && snakemake --cores 2",
        "unit": '. .venv/bin/activate && pytest -m "not e2e" -n 2 --dist loadfile -q',
        "e2e": '. .venv/bin/activate && pytest -m "e2e and not hpc" -n 2 --dist loadfile -q',
        "hpc": ". .venv/bin/activate && pytest -m hpc -q",
        "python": ". .venv/bin/activate && python example.py",
    }


def machine() -> dict[str, object]:
    """What the times were measured on."""
    cpu = platform.processor() or ""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        names = [
            line.split(":", 1)[1].strip() for line in info.read_text().splitlines() if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    memory = 0.0
    if Path("/proc/meminfo").is_file():
        total = Path("/proc/meminfo").read_text().split("\n")[0].split()[1]
        memory = round(int(total) / 2**20, 1)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cores": cores, "memory_gib": memory, "python": platform.python_version(),
            "system": platform.platform(terse=True)}


def run_step(name: str, command: str, clone: Path) -> dict[str, object]:
    load = os.getloadavg()[0]
    print(f"[{name}] {command}", flush=True)
    start = time.perf_counter()
    with open(clone / f"{name}.log", "w") as log:
        done = subprocess.run(["bash", "-c", command], cwd=clone, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    print(f"[{name}] exit {done.returncode} after {seconds:,.0f} s (load {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after)", flush=True)
    return {"seconds": round(seconds, 1), "exit": done.returncode, "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2), "command": command}


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def readme_text(record: dict) -> str:
    """The README's sentence of measured times (only the steps measured)."""
    s, m = record["steps"], record["machine"]
    parts = [f"{label} {minutes(s[k]['seconds'])}" for k, label in
             (("install", "install"), ("demo", "demo"), ("unit", "unit tests"), ("e2e", "end-to-end tests"),
              ("hpc", "SLURM tests"), ("python", "Python example")) if k in s and s[k]["exit"] == 0]
    return (f"Measured by `python benchmarks/first_hour.py` from a clean clone on {m['cores']} cores of "
            f"{m['cpu']} ({m['memory_gib']:g} GiB, a shared machine; {record['date']}): " + ", ".join(parts) + ".")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", nargs="+", default=["install", "demo", "unit", "e2e", "hpc", "python"],
                    choices=["install", "demo", "unit", "e2e", "hpc", "python"])
    ap.add_argument("--write", action="store_true", help="write the README's first-hour block")
    ap.add_argument("--keep", action="store_true", help="keep the clone (its logs) in the temporary folder")
    args = ap.parse_args()
    record = json.loads(RECORD.read_text()) if RECORD.is_file() else {"steps": {}}
    work = Path(tempfile.mkdtemp(prefix="first-hour-"))
    clone = work / "cellica"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    shared = REPO.parent / "shared"
    if shared.is_dir():  # the real-data tests read ../shared/data, as from the checkout
        (work / "shared").symlink_to(shared)
    commands = steps(clone)
    wanted = list(dict.fromkeys(["install", *args.steps])) if not (clone / ".venv").exists() else args.steps
    for name in wanted:
        result = run_step(name, commands[name], clone)
        if name in args.steps:
            record["steps"][name] = result
        if result["exit"] != 0:
            print(f"[{name}] failed: see {clone / (name + '.log')}", file=sys.stderr)
            break
    record.update(machine=machine(), date=time.strftime("%Y-%m-%d"),
                  commit=subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                        text=True).stdout.strip())
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print(readme_text(record))
    if args.write:
        sys.path.insert(0, str(REPO / "src"))
        from cellica.core.docs import write_block

        write_block(REPO / "README.md", "first-hour", readme_text(record))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
