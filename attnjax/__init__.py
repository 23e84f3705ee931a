"""attnjax: attention through linear algebra, in JAX and Flax NNX."""
