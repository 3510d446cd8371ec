#!/usr/bin/env bash
# Installs cellica and exactly the software of its lock: the one build step of the container
# (workflow/envs/Dockerfile and workflow/envs/cellica.def both run it). Usage: install.sh ROOT,
# where ROOT holds pyproject.toml, README.md, src/ and requirements.lock.
set -euo pipefail
root="${1:?usage: install.sh ROOT (the folder with pyproject.toml and requirements.lock)}"
lock="$root/requirements.lock"
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Every dependency at the lock's version (a constraints file pins what is installed, adds nothing).
python -m pip install --constraint "$lock" "$root"
# The known gene-gene relationship lists only, at the lock's version (README "Set-up").
python -m pip install --constraint "$lock" --no-deps efaar-benchmarking
# The build fails unless every installed package is at the lock's version.
CELLICA_LOCK="$lock" cellica environment --check
