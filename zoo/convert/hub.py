"""Where a pretrained source names its files: a local path as is, or ``hf:<repo id>[@revision]``,
a Hugging Face Hub repository fetched into the standard Hub cache (``HF_HUB_CACHE``, by default
``~/.cache/huggingface/hub``) with ``huggingface_hub.snapshot_download``. With
``HF_HUB_OFFLINE=1`` only the cache is read; a repository that is not there is an error naming
it and the command that fetches it.

``timm:<model name>[@<weights file>]`` (ViT): the model timm's own pretrained loading gives
(``timm.create_model(name, pretrained=True)``, which downloads as timm does, or reads the local
``weights file`` as its ``pretrained_cfg_overlay``), written in timm's folder format under the
zoo cache (``ZOO_CACHE_DIR``, by default ``.cache/zoo``): see :func:`zoo.convert.vit.timm_folder`."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

PREFIX = "hf:"
TIMM_PREFIX = "timm:"
REPO_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
REVISION = re.compile(r"^[\w.-]+(/[\w.-]+)*$")  # a branch, tag or commit: no '..' part, no leading '/'
TIMM_NAME = re.compile(r"^[\w.-]+$")
TIMM_WEIGHTS = (".safetensors", ".bin", ".pth", ".pt", ".npz")  # what timm's pretrained_cfg_overlay file reads


def resolve(source: str) -> str:
    """``source`` as a local path: a path is returned unchanged, ``hf:<repo>[@rev]`` becomes the
    folder of that revision's snapshot in the Hub cache (downloaded unless offline),
    ``timm:<name>[@file]`` the folder timm's pretrained model is written to."""
    if isinstance(source, str) and source.startswith(TIMM_PREFIX):
        return _timm(source)
    if not isinstance(source, str) or not source.startswith(PREFIX):
        return source
    repo, _, revision = source.removeprefix(PREFIX).partition("@")
    if not REPO_ID.match(repo) or ".." in repo.split("/"):
        raise ValueError(f"{source}: expected hf:<repo id>[@revision], e.g. hf:openai-community/gpt2@main")
    if revision and (not REVISION.match(revision) or ".." in revision.split("/")):
        raise ValueError(f"{source}: revision {revision!r} is not a branch, tag or commit (no '..' parts, "
                         f"no absolute path), e.g. hf:openai-community/gpt2@main")
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


def _timm(source: str) -> str:
    from zoo.convert.vit import timm_folder

    from huggingface_hub.errors import LocalEntryNotFoundError
    from safetensors import SafetensorError

    name, _, file = source.removeprefix(TIMM_PREFIX).partition("@")
    if not TIMM_NAME.match(name):
        raise ValueError(f"{source}: expected timm:<model name>[@<weights file>], e.g. timm:vit_small_patch16_224")
    if file and not Path(file).is_file():
        raise FileNotFoundError(f"{source}: the weights file {file} does not exist")
    if file and Path(file).suffix not in TIMM_WEIGHTS:
        raise ValueError(f"{source}: {file} is not a weights file (a {', '.join(TIMM_WEIGHTS)} file)")
    cache = Path(os.environ.get("ZOO_CACHE_DIR", ".cache/zoo"))
    try:
        return str(timm_folder(name, file or None, cache))
    except (LocalEntryNotFoundError, ConnectionError) as err:  # offline: timm could not download the weights
        raise FileNotFoundError(f"{source}: timm's pretrained weights of {name} are not in the Hub cache and could "
                                f"not be downloaded ({type(err).__name__}); fetch them where there is internet "
                                f"(`python -c \"import timm; timm.create_model('{name}', pretrained=True)\"` fills "
                                f"the cache; copy it here) or give the file: timm:{name}@<weights file>") from None
    except (RuntimeError, IndexError, EOFError, pickle.UnpicklingError, SafetensorError) as err:
        if not file:
            raise
        raise ValueError(f"{source}: timm could not read {file} as weights ({type(err).__name__}: {err})") from None
