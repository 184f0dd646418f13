"""zoo: a Transformer architecture zoo built from one Block."""

from omegaconf import OmegaConf

# Config arithmetic, e.g. `d_ff: ${multiply:4,${.d_model}}`.
OmegaConf.register_new_resolver("multiply", lambda a, b: a * b, replace=True)
# e.g. `vocab_size: ${add:${dims.vocab_size},102}` (T5: the data's vocabulary + sentinels).
OmegaConf.register_new_resolver("add", lambda a, b: a + b, replace=True)
# ${rsqrt:x} = x ** -0.5, e.g. T5 v1.0's d_model^-0.5 on the tied head's input.
OmegaConf.register_new_resolver("rsqrt", lambda x: float(x) ** -0.5, replace=True)
# ${div:a,b} = a // b, e.g. BEiT's patch grid, the image size over the patch size.
OmegaConf.register_new_resolver("div", lambda a, b: a // b, replace=True)
