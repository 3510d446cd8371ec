"""The shared core every stage builds on: errors, contracts (column names, the held-back
controls), parameters, atomic writes, AnnData I/O, logging and thread settings. Imports no stage."""
