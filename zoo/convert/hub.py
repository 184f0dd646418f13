"""Where a pretrained source names its files: a local path as is, or ``hf:<repo id>[@revision]``,
a Hugging Face Hub repository fetched into the standard Hub cache (``HF_HUB_CACHE``, by default
``~/.cache/huggingface/hub``) with ``huggingface_hub.snapshot_download``. With
``HF_HUB_OFFLINE=1`` only the cache is read; a repository that is not there is an error naming
it and the command that fetches it."""

from __future__ import annotations

import re

PREFIX = "hf:"
REPO_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def resolve(source: str) -> str:
    """``source`` as a local path: a path is returned unchanged, ``hf:<repo>[@rev]`` becomes the
    folder of that revision's snapshot in the Hub cache (downloaded unless offline)."""
    if not isinstance(source, str) or not source.startswith(PREFIX):
        return source
    repo, _, revision = source.removeprefix(PREFIX).partition("@")
    if not REPO_ID.match(repo):
        raise ValueError(f"{source}: expected hf:<repo id>[@revision], e.g. hf:openai-community/gpt2@main")
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(repo, revision=revision or None, local_files_only=constants.HF_HUB_OFFLINE)
    except LocalEntryNotFoundError:
        where = f"the Hub cache {constants.HF_HUB_CACHE}"
        how = f"`hf download {repo}{f' --revision {revision}' if revision else ''}`"
        reason = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the Hub could not be reached"
        raise FileNotFoundError(f"{source}: not in {where} and {reason}; fetch it with {how} where there is "
                                f"internet (or copy that cache here)") from None
