"""A run owns its checkpoints: which one a run resumes from, verified before it is used.

Ray Train 2.58 resumes from the latest checkpoint listed in ``<storage>/<name>/checkpoint_manager_snapshot.json``
(ray/train/v2/_internal/execution/checkpoint/checkpoint_manager.py ``_maybe_load_state_from_storage``); without that
file it starts from step 0 ("training will start from scratch"), and its retention (``CheckpointConfig
num_to_keep``) deletes only the checkpoints its snapshot lists. A run that started from 0 over existing ``step_*``
directories rewrote them under the same names and then deleted them as its own. So before Ray starts:

- every ``step_*`` directory of the run is looked at, newest first, and the first one that verifies is the one to
  resume from (:func:`choose`), whether or not the snapshot exists and whatever it names; each one skipped is named
  with its damaged file and why, on stderr;
- a run whose ``step_*`` directories exist and none verifies stops (:data:`EXIT_DAMAGED`) instead of starting over;
- the directories that exist are passed to the run, which never writes a checkpoint under one of those names
  (``train_func``: ``step_NNNNNN-<run>`` instead), so nothing it did not write is overwritten or, by Ray's
  retention, deleted.

Verifying a checkpoint (:func:`verify`): ``meta.pt`` loads and names its step; DCP's ``.metadata`` loads and every
byte range it lists lies inside its file (a truncated or deleted shard); and each rank's manifest
(``.ray-efa-eks-manifest-<rank>.json``, written by ``train_func`` beside its files) is there for every rank of the
checkpoint's world size, no other rank's shard is, and every file has the size (and, on a local path, the SHA-256)
its rank wrote (a zeroed or swapped shard). Checkpoints written before manifests existed are verified without them.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from ..efacheck.exit_codes import EXIT_DAMAGED

STEP_DIR = re.compile(r"step_(\d{6,})(-[A-Za-z0-9]+)?")
"""A checkpoint directory: ``step_NNNNNN``, or ``step_NNNNNN-<run>`` when that name was taken."""
MANIFEST = ".ray-efa-eks-manifest-{rank}.json"
MANIFEST_RE = re.compile(r"\.ray-efa-eks-manifest-(\d+)\.json")
SHARD_RE = re.compile(r"__(\d+)_\d+\.distcp")
HASH_LIMIT_BYTES = 1 << 30
"""On S3, files are hashed only while the checkpoint is smaller than this (sizes are always compared)."""
SNAPSHOT = "checkpoint_manager_snapshot.json"


class DamagedCheckpoints(Exception):
    """Checkpoints exist under the run's name and none verifies; ``code`` is :data:`EXIT_DAMAGED`."""

    code = EXIT_DAMAGED


@dataclass
class Choice:
    """What the run resumes from (``resume_from``: the checkpoint's path, None for a new run), the checkpoint
    directory names that existed before it (never written or deleted by it) and what it says about them."""

    resume_from: Optional[str] = None
    step: int = 0
    existing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def file_record(data: bytes) -> dict:
    """One file's entry in a rank's manifest."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_manifest(directory: str, rank: int, world_size: int) -> None:
    """Record every file this rank wrote in ``directory`` (its checkpoint before upload), for :func:`verify`."""
    import os

    files = {}
    for name in sorted(os.listdir(directory)):
        if MANIFEST_RE.fullmatch(name):
            continue
        with open(os.path.join(directory, name), "rb") as f:
            files[name] = file_record(f.read())
    with open(os.path.join(directory, MANIFEST.format(rank=rank)), "w") as f:
        json.dump({"rank": rank, "world_size": world_size, "files": files}, f)


def _fs_and_path(storage_path: str) -> tuple[Any, str]:
    import pyarrow.fs

    if "://" in storage_path:
        return pyarrow.fs.FileSystem.from_uri(storage_path)
    return pyarrow.fs.LocalFileSystem(), storage_path


def _step_of(name: str) -> tuple[int, str]:
    m = STEP_DIR.fullmatch(name)
    return (int(m.group(1)), m.group(2) or "") if m else (-1, "")


def verify(fs: Any, path: str, local: bool) -> tuple[int, Optional[str]]:
    """(the checkpoint's step, None) when the checkpoint at ``path`` verifies, else (-1, "<file>: why")."""
    import pyarrow.fs

    infos = fs.get_file_info(pyarrow.fs.FileSelector(path, recursive=False))
    sizes = {i.base_name: i.size for i in infos if i.type == pyarrow.fs.FileType.File}
    for required in ("meta.pt", ".metadata"):
        if required not in sizes:
            return -1, f"{required}: missing"

    def read(name: str) -> bytes:
        with fs.open_input_file(f"{path}/{name}") as f:
            return f.read()

    manifests = {int(m.group(1)): name for name in sizes if (m := MANIFEST_RE.fullmatch(name))}
    if manifests:
        records = {}
        for rank, name in manifests.items():
            try:
                records[rank] = json.loads(read(name))
            except ValueError:
                return -1, f"{name}: not a manifest (unreadable JSON)"
        worlds = {int(r.get("world_size", -1)) for r in records.values()}
        if len(worlds) != 1:
            return -1, f"manifests disagree on the world size ({sorted(worlds)}): ranks of different runs"
        world = worlds.pop()
        if sorted(records) != list(range(world)):
            return -1, (
                f"{MANIFEST.format(rank='*')}: ranks {sorted(records)} of a {world}-rank checkpoint (wrong rank count)"
            )
        for name in sizes:
            shard = SHARD_RE.fullmatch(name)
            if shard and int(shard.group(1)) >= world:
                return -1, f"{name}: a shard of rank {shard.group(1)}, but the checkpoint has {world} ranks"
        total = sum(e.get("size", 0) for r in records.values() for e in r.get("files", {}).values())
        hash_all = local or total <= HASH_LIMIT_BYTES
        for rank, r in sorted(records.items()):
            for name, entry in sorted(r.get("files", {}).items()):
                if name not in sizes:
                    return -1, f"{name}: missing (rank {rank} wrote {entry.get('size')} bytes)"
                if sizes[name] != entry.get("size"):
                    return -1, f"{name}: {sizes[name]} bytes, rank {rank} wrote {entry.get('size')}"
                if hash_all and hashlib.sha256(read(name)).hexdigest() != entry.get("sha256"):
                    return -1, f"{name}: its content is not what rank {rank} wrote (SHA-256 differs)"
    from .restore import ArrowReader

    try:
        metadata = ArrowReader(fs, path).read_metadata()
    except Exception as e:  # noqa: BLE001 - any failure to read it is the finding
        return -1, f".metadata: unreadable ({type(e).__name__}: {_first_line(e)})"
    for index, info in (getattr(metadata, "storage_data", None) or {}).items():
        rel = getattr(info, "relative_path", None)
        if rel is None:
            continue
        if rel not in sizes:
            return -1, f"{rel}: missing (.metadata lists {getattr(index, 'fqn', index)} in it)"
        end = int(getattr(info, "offset", 0)) + int(getattr(info, "length", 0))
        if sizes[rel] < end:
            return -1, f"{rel}: {sizes[rel]} bytes, .metadata needs {end} (truncated)"
    try:
        import torch

        meta = torch.load(io.BytesIO(read("meta.pt")))
        step = int(meta["step"])
    except Exception as e:  # noqa: BLE001 - any failure to read it is the finding
        return -1, f"meta.pt: unreadable ({type(e).__name__}: {_first_line(e)})"
    return step, None


def choose(storage_path: str, name: str) -> Choice:
    """The checkpoint run ``name`` resumes from (see the module docstring); raises :class:`DamagedCheckpoints`."""
    import pyarrow.fs

    fs, base = _fs_and_path(storage_path)
    run = f"{base.rstrip('/')}/{name}"
    info = fs.get_file_info(run)
    if info.type != pyarrow.fs.FileType.Directory:
        return Choice()
    entries = fs.get_file_info(pyarrow.fs.FileSelector(run, recursive=False))
    dirs = sorted(
        (e.base_name for e in entries if e.type == pyarrow.fs.FileType.Directory and STEP_DIR.fullmatch(e.base_name)),
        key=_step_of,
        reverse=True,
    )
    choice = Choice(existing=dirs)
    if not dirs:
        return choice
    local = "://" not in storage_path
    root, _, query = storage_path.partition("?")  # pyarrow's options (endpoint_override=...) stay at the end

    def uri(d: str) -> str:
        return f"{root.rstrip('/')}/{name}/{d}" + (f"?{query}" if query else "")

    where = f"{root.rstrip('/')}/{name}"
    has_snapshot = any(e.base_name == SNAPSHOT for e in entries)
    skipped = []
    for d in dirs:
        step, why = verify(fs, f"{run}/{d}", local)
        if why is None:
            choice.resume_from = uri(d)
            choice.step = step
            break
        skipped.append(f"{d}/{why}")
        choice.notes.append(f"[checkpoint] {where}/{d} is damaged: {why}; skipped")
    if choice.resume_from is None:
        raise DamagedCheckpoints(
            f"training run {name!r}: none of its {len(dirs)} checkpoint(s) under {where} verifies ("
            f"{'; '.join(skipped[:4])}); nothing was started or overwritten. Move the damaged step_* directories "
            "out of the run's directory to start over from the ones left (or from step 0), or train under a new "
            "--name"
        )
    if not has_snapshot:
        choice.notes.append(
            f"[checkpoint] {where}/{SNAPSHOT} is missing but {len(dirs)} checkpoint(s) exist: "
            f"resuming from {d} (step {choice.step}), not from 0"
        )
    elif skipped:
        choice.notes.append(f"[checkpoint] resuming from {d} (step {choice.step}), the newest checkpoint that verifies")
    return choice


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
