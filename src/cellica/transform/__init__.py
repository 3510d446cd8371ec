"""Stage 3, transforms: PCA whitening on controls, ICA, a random rotation and comparators
(:data:`cellica.registry.VARIANTS`), each an estimator on AnnData."""
