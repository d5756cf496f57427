"""The NVMe offload folder: which folder, its free space, and whether it holds what offload needs.

The one owner of these rules: plan, inspect --model, deepspeed-config and doctor all ask here, so one path
gets one folder, one free space and one refusal line everywhere."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from .errors import BadInput
from .units import gib

DISAGREE = 0.10  # --nvme-free "disagrees" with the folder measured here beyond 10 %


@dataclass(frozen=True)
class Folder:
    path: str                 # as the user gave it, or the folder picked for them
    free_bytes: int           # measured here
    picked: str | None = None  # why it was picked when --nvme-path was not given (None: the user's own)


def problem(path: str) -> str | None:
    """What makes `path` unusable as an offload folder here, in words; None when it is usable."""
    if os.path.isfile(path):
        return "is a file, not a directory"
    if not os.path.isdir(path):
        return "not an existing directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return "not writable"
    from .system import PSEUDO_FS, fstype_of
    fstype = fstype_of(path)
    if fstype in PSEUDO_FS or fstype == "devtmpfs":
        return f"is on {fstype}, a view of the kernel, not a disk"
    return None


def given(path: str) -> Folder:
    """--nvme-path as given: refused in one line when it is not a writable directory here."""
    why = problem(path)
    if why:
        raise BadInput(f"--nvme-path {path}: {why}")
    return Folder(path, shutil.disk_usage(path).free)


def default() -> Folder | None:
    """Where offload goes without --nvme-path (see gputopo.system.pick_offload_dir); None when nowhere local."""
    from . import system
    picked = system.default_offload_dir()
    if picked is None:
        return None
    folder, d, why = picked
    where = f"{d.mountpoint}: {d.fstype} on {d.block or d.device}, {gib(d.free_bytes)} free"
    slower = "" if d.kind == "nvme" else f"; it is NOT NVMe ({d.kind}): offload will be slower, pass --nvme-path"
    return Folder(folder, shutil.disk_usage(folder).free,
                  f"--nvme-path not given: using {folder} ({where}), {why}{slower}")


NOWHERE = "no writable local disk here (tmpfs is RAM, not NVMe): give --nvme-path DIR"


def folder(path: str | None) -> Folder:
    """--nvme-path, or the default folder; refused when neither can be used."""
    if path:
        return given(path)
    found = default()
    if found is None:
        raise BadInput(f"--offload nvme: {NOWHERE}")
    return found


def free_space(path: str | None, nvme_free: int | None) -> tuple[int, dict]:
    """The NVMe free space to plan with, and notes keyed by what they explain.

    --nvme-free wins (it may describe the machine you train on); else the free space of --nvme-path or of the
    default folder; 0 when there is no local disk at all."""
    notes: dict = {}
    chosen = given(path) if path else None
    if nvme_free is not None:
        if chosen and abs(chosen.free_bytes - nvme_free) > DISAGREE * nvme_free:
            notes["nvme_disagrees"] = (f"--nvme-free {gib(nvme_free)} is used; {path} has {gib(chosen.free_bytes)}"
                                       " free on this machine (plan for the machine you train on)")
        return nvme_free, notes
    chosen = chosen or default()
    if chosen is None:
        notes["nvme_free"] = f"NVMe free: 0, {NOWHERE} or --nvme-free SIZE"
        return 0, notes
    notes["nvme_free"] = (f"NVMe free: {gib(chosen.free_bytes)} measured at {chosen.path}"
                          + ("" if path else " (--nvme-path/--nvme-free to change)"))
    return chosen.free_bytes, notes


def room(chosen: Folder, need: int, nvme_free: int | None) -> str | None:
    """Refuse a folder that cannot hold `need` bytes; a note when --nvme-free vouches for another machine."""
    free = chosen.free_bytes if nvme_free is None else nvme_free
    if need > free:
        which = f"--nvme-path {chosen.path}: {gib(free)} free" if nvme_free is None else f"--nvme-free {gib(free)}"
        raise BadInput(f"{which}, offload needs {gib(need)} ({gib(need - free)} missing)")
    if need > chosen.free_bytes:
        return (f"{chosen.path} has {gib(chosen.free_bytes)} free here and offload needs {gib(need)}: fine if"
                f" --nvme-free {gib(free)} describes the machine you train on, else pass --nvme-path")
    return None
