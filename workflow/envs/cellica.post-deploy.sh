#!/usr/bin/env bash
# Snakemake runs this in the new conda env after creating it: the known-relationship lists of
# the gene-map stage come from efaar-benchmarking's data only; its own dependencies are heavy.
set -euo pipefail
pip install --no-deps "efaar-benchmarking==1.0"
