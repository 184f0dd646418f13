"""``zoo generate`` / ``python generate.py``: sample text from a trained language model (GPT,
Llama), decoding with the KV cache.

    python -m zoo generate ckpt=outputs/train/<run>/checkpoints/last.ckpt prompt="ROMEO:" temperature=0.8 top_k=200
    python -m zoo generate ckpt=...  prompt="What is 12 + 30?" chat=true   # a task=sft run: a user turn, answered

``compile=true``: a static cache of the final length and one compiled graph per step (faster per
token once compiled; prompt + max_new_tokens within the model's context).
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from zoo.data.checks import positive_int
from zoo.data.instructions import chat_prompt_ids
from zoo.data.tokenizers import tokenizer_from_state
from zoo.inference.device import check_device
from zoo.models.sampling import check_sampling, generate
from zoo.train.callbacks import non_finite
from zoo.objectives.loading import load

# The objectives whose networks continue a token sequence (next-token language models).
GENERATORS = ("lm", "vlm")
# Past its context a model reads the last `context` tokens only (a sliding window), and each token
# costs a forward over the whole window: one call generates at most this many contexts' worth.
MAX_CONTEXTS = 100


def check_length(max_new_tokens: int, context: int) -> None:
    """Refuse a ``max_new_tokens`` over :data:`MAX_CONTEXTS` times the model's ``context``, naming both."""
    if max_new_tokens > MAX_CONTEXTS * context:
        raise ValueError(f"max_new_tokens={max_new_tokens} is more than {MAX_CONTEXTS} times the model's context "
                         f"of {context} tokens (past it, each token is read from the last {context} only): "
                         f"generate at most {MAX_CONTEXTS * context}, and continue from the end of that as the prompt")


def main(cfg: DictConfig) -> None:
    """Print ``num_samples`` continuations of ``prompt`` (conf/generate.yaml), each followed by ``---``."""
    # before the checkpoint is read
    check_sampling(cfg.temperature, cfg.top_k, cfg.top_p)
    positive_int(cfg.max_new_tokens, "max_new_tokens")
    positive_int(cfg.num_samples, "num_samples")
    device = check_device(cfg.device)
    objective = load(cfg.ckpt, device, accepts=GENERATORS, command="zoo generate")
    check_length(cfg.max_new_tokens, objective.net.context)
    if bad := non_finite(dict(objective.named_parameters())):
        raise ValueError(f"{cfg.ckpt} holds weights that are not finite: NaN or inf in {len(bad)} tensor(s), e.g. "
                         f"{bad[0]}, so nothing can be sampled from it; use a checkpoint of a run that did not diverge")
    if objective.hparams.tokenizer is None:
        raise ValueError(f"{cfg.ckpt} stores no tokenizer: it was not trained on text")
    tokenizer = tokenizer_from_state(objective.hparams.tokenizer)
    if cfg.chat and not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"chat=true: {cfg.ckpt}'s tokenizer has no chat template (it was not trained with task=sft): "
                         f"give chat=false to continue the prompt as it is")
    ids = chat_prompt_ids(tokenizer, cfg.prompt) if cfg.chat else tokenizer.encode(cfg.prompt)
    if not ids:
        raise ValueError(f"prompt={cfg.prompt!r} holds no token: zoo generate continues a prompt of at least "
                         f"one token (the default is a newline)")
    prompt = torch.tensor([ids] * cfg.num_samples, device=device)
    out = generate(objective.net, prompt, cfg.max_new_tokens, temperature=cfg.temperature, top_k=cfg.top_k,
                   top_p=cfg.top_p, use_cache=cfg.use_cache, show_progress=True, compile=cfg.compile,
                   eos_id=tokenizer.eos_id if cfg.chat else None,
                   generator=torch.Generator(device=device).manual_seed(cfg.seed))
    for row in out.tolist():
        print(tokenizer.decode(row))
        print("---")
