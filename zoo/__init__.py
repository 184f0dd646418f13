"""zoo: a Transformer architecture zoo built from one Block."""

from omegaconf import OmegaConf

# Config arithmetic, e.g. `d_ff: ${multiply:4,${.d_model}}`.
OmegaConf.register_new_resolver("multiply", lambda a, b: a * b, replace=True)
# e.g. `vocab_size: ${add:${dims.vocab_size},102}` (T5: the data's vocabulary + sentinels).
OmegaConf.register_new_resolver("add", lambda a, b: a + b, replace=True)
