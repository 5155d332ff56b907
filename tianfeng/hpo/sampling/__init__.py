"""How recipes are sampled: the registry of samplers and pruners by name, and the sampler that
shares each metric's best across workers."""
