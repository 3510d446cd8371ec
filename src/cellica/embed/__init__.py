"""Stage 2, embeddings: train a masked autoencoder on the tiles, embed them into AnnData, or
import a features table instead. The only package that imports timm."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "train_mae": "cellica.embed.train",
    "embed_store": "cellica.embed.extract",
    "gather_embeddings": "cellica.embed.extract",
    "import_features": "cellica.embed.features",
    "profile_store": "cellica.embed.profiles",
    "count_nuclei": "cellica.embed.cell_count",
    "TrainParams": "cellica.embed.params",
    "EmbedParams": "cellica.embed.params",
    "FeatureTableParams": "cellica.embed.params",
    "ProfileParams": "cellica.embed.params",
})
