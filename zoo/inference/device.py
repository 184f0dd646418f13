"""The ``device=`` of an inference command, checked before a checkpoint is read onto it."""

from __future__ import annotations

import torch

KINDS = ("cpu", "cuda", "mps")  # the devices the commands run on


def check_device(name: str) -> torch.device:
    """The device ``device=name`` names, or a refusal naming it: a name torch does not know (torch
    itself would fail later, as a checkpoint that "could not be read"), or a device this machine has not."""
    try:
        device = torch.device(str(name))
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in KINDS:
        raise ValueError(f"device={name!r} is not a device the zoo runs on: use cpu, cuda, cuda:N or mps")
    present = {"cpu": 1, "cuda": torch.cuda.device_count() if torch.cuda.is_available() else 0,
               "mps": int(torch.backends.mps.is_available())}[device.type]
    if present == 0:
        raise ValueError(f"device={name}: this machine has no {device.type} device (use device=cpu)")
    if (device.index or 0) >= present:
        raise ValueError(f"device={name}: this machine has {present} {device.type} device(s), numbered from 0")
    return device
