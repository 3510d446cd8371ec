"""Stage 2, embeddings: train a masked autoencoder on the tiles, embed them into AnnData, or
import a features table instead. The only package that imports timm."""
