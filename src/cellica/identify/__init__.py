"""Identifiability: how well two embeddings align per class of map, and recovery of known
ground truth (MCC, probe R^2, InfoM/InfoE/InfoC)."""
