"""Reading NCCL logs safely: which files a path names, bounded reads, and whether the bytes are NCCL text at all.

A rank's log is read in bounded chunks from regular files (or stdin), so a core dump, a FIFO or a multi-GB file
given by mistake is refused early instead of read forever; the verdict never sees what was not text.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from typing import Any, Iterable

_LOG_LINE = re.compile(rb"NCCL (?:INFO|WARN|version)")
_CONTROL = bytes(c for c in range(32) if c < 9 or c > 13)  # control bytes that text logs do not contain


class UnreadableInput(Exception):
    """Input is missing, binary, empty or holds no complete NCCL line."""


def _is_binary(head: bytes) -> bool:
    """A NUL, or more than 1 in 20 control characters: no log."""
    return b"\x00" in head or len(head) - len(head.translate(None, _CONTROL)) > len(head) // 20


def check_text(buf: bytes, source: str) -> str | None:
    """Why ``buf`` is no NCCL text (empty / binary / no NCCL line), or None if it is."""
    if re.search(rb"\S", buf) is None:
        return f"{source}: empty input"
    if _is_binary(buf[:65536]):
        return f"{source}: binary data, not a text NCCL log"
    if not _LOG_LINE.search(buf):
        return f"{source}: no complete NCCL log line (truncated, or not NCCL_DEBUG=INFO output)"
    return None


NOT_LOGS = (".md", ".json", ".png", ".yaml", ".yml", ".html", ".py")
"""Files a directory of logs holds beside them (its README, a saved verdict, a report): never read as a rank's log."""


MAX_FILES = 10_000
"""Files a directory walk may hold: a job's logs are one per rank (a 512-rank job: 512); more means a wrong path."""
MAX_LOG_BYTES = 1 << 30
"""Largest single input read (1 GiB; a 512-rank NCCL_DEBUG=INFO log is ~60 MB)."""
HEAD_BYTES = 1 << 16
"""What :func:`read_input` reads before deciding an input is binary (``check_text`` judges the same 64 KiB)."""
CHUNK_BYTES = 1 << 20
"""The rest is read in chunks of this size, so a limit is enforced as it is crossed (stdin has no size)."""


def iter_files(paths: Iterable[str]) -> list[str]:
    """The files to read: a directory's files walked in name order (hidden and known non-log files left out), any
    other path as given."""
    out: list[str] = []
    for p in paths:
        if p != "-" and os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                out.extend(
                    os.path.join(root, f)
                    for f in sorted(files)
                    if not f.startswith(".") and not f.lower().endswith(NOT_LOGS)
                )
                if len(out) > MAX_FILES:
                    raise UnreadableInput(
                        f"{p}: more than {MAX_FILES} files under it; name the directory that holds "
                        "the job's logs (one file per rank)"
                    )
        else:
            out.append(p)  # a missing file is reported by analyze_paths, not fatal among many
    return out


def read_input(path: str) -> bytes:
    """A log's bytes: ``-`` is stdin; only regular files (a FIFO or a device would block or never end).

    Read in bounded chunks: the first 64 KiB decide "binary" before anything more is read (a multi-GB core dump or
    image is refused after its first chunk, its head returned for ``check_text`` to name), and reading stops with
    EFBIG as soon as :data:`MAX_LOG_BYTES` is crossed, for stdin too.
    """
    if path == "-":
        return _read_bounded(sys.stdin.buffer)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a pipe, socket or device); pass a log file, or - for stdin")
    if st.st_size > MAX_LOG_BYTES:
        raise OSError(errno.EFBIG, f"{st.st_size} bytes, more than {MAX_LOG_BYTES >> 30} GiB: not one rank's log")
    with open(path, "rb") as fh:
        return _read_bounded(fh, st.st_size)


def _read_bounded(fh: Any, size_hint: int = 0) -> bytes:
    """``size_hint``: a regular file's size; past its head such a file is read again from the start in one call,
    so a 60 MB log is one buffer, not 60 chunks joined (a fifth of its reading time); one still growing is read on
    in chunks, the limit checked as it is crossed."""
    head = fh.read(HEAD_BYTES)
    if _is_binary(head):
        return head  # judged binary on its head (check_text says so); the rest is never read
    if size_hint > len(head):
        fh.seek(0)
        parts, size, want = [], 0, size_hint + CHUNK_BYTES
    else:
        parts, size, want = [head], len(head), CHUNK_BYTES
    while True:
        chunk = fh.read(want)
        want = CHUNK_BYTES
        if not chunk:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        size += len(chunk)
        if size > MAX_LOG_BYTES:
            raise OSError(errno.EFBIG, f"more than {MAX_LOG_BYTES >> 30} GiB: not one rank's log")
        parts.append(chunk)
