"""A run owns its name: an owner record (a lease) at ``<storage>/<name>/.ray-efa-eks-owner.json`` while it runs.

Two runs under one ``--name`` would write the same ``step_NNNNNN`` directories and resume from each other's steps.
The first run writes the record before Ray starts and renews it every :data:`RENEW_S`; a second run finds it and is
refused (:data:`EXIT_NAME_IN_USE`) with who holds it. A record whose owner is gone is taken over, and the run says so
on stderr: on the same host, a pid that no longer runs; anywhere, a record not renewed for :data:`TTL_S` (a host
that died, a pod deleted without its grace).

Atomic on both kinds of storage: a local file is created with ``O_CREAT | O_EXCL`` and replaced by ``rename``; on S3
the record is written with ``PutObject`` ``If-None-Match: *`` (create only) and renewed or taken over with
``If-Match: <ETag>`` (replace only what was read): S3 answers 412 Precondition Failed to the loser
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html). The pods' role may put and delete
objects under the checkpoint prefix (components/cluster/pod_identity.py ``bucket_prefix_policy``), which is all this needs.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Mapping, Optional

from ..efacheck.exit_codes import EXIT_IN_USE as EXIT_NAME_IN_USE

RECORD = ".ray-efa-eks-owner.json"
"""The owner record's name inside the run's directory."""
TTL_S = 90.0
"""A record not renewed for this long belongs to nobody: its run stopped without releasing it."""
RENEW_S = 10.0
"""How often a running run renews its record."""


class NameInUse(Exception):
    """Another run owns the name; ``code`` is :data:`EXIT_NAME_IN_USE`."""

    code = EXIT_NAME_IN_USE


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lease:
    """The owner record of ``<storage>/<name>``: :meth:`acquire`, :meth:`renew` while the run lives, :meth:`release`."""

    def __init__(self, storage: str, name: str, environ: Optional[Mapping[str, str]] = None):
        self.storage, self.name = storage, name
        self.environ = os.environ if environ is None else environ
        self.me = {"owner": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid()}
        self._etag: Optional[str] = None
        self.s3 = storage.startswith("s3://")
        if self.s3:
            from .storage_check import s3_session_and_client, split_s3

            bucket, prefix, _ = split_s3(storage)
            self.bucket, self.key = bucket, "/".join(p for p in (prefix, name, RECORD) if p)
            self.client = s3_session_and_client(storage, self.environ)[1]
        else:
            self.path = Path(storage) / name / RECORD

    # -- the record -------------------------------------------------------------------------------------------

    def _body(self) -> bytes:
        now = time.time()
        return json.dumps({**self.me, "renewed": now, "expires": now + TTL_S}).encode()

    def _read(self) -> tuple[Optional[dict], Optional[str]]:
        """(the record, its version: S3 ETag or the local file's text), (None, None) when there is none."""
        if self.s3:
            from botocore.exceptions import ClientError

            try:
                r = self.client.get_object(Bucket=self.bucket, Key=self.key)
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    return None, None
                raise
            body = r["Body"].read()
            return _parse(body), r["ETag"]
        try:
            body = self.path.read_bytes()
        except FileNotFoundError:
            return None, None
        return _parse(body), body.decode(errors="replace")

    def _create(self) -> bool:
        if self.s3:
            return self._put(IfNoneMatch="*")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(self._body())
        return True

    def _replace(self, version: Optional[str]) -> bool:
        """Replace the record whose version is ``version`` with ours; False when someone else changed it first."""
        if self.s3:
            return self._put(IfMatch=version)
        tmp = self.path.with_name(f"{RECORD}.{self.me['owner']}")
        tmp.write_bytes(self._body())
        _, now = self._read()
        if now != version:
            tmp.unlink(missing_ok=True)
            return False
        os.replace(tmp, self.path)
        time.sleep(0.05)  # a taker that raced us between the read and the rename: the last rename wins
        record, _ = self._read()
        return bool(record) and record.get("owner") == self.me["owner"]

    def _put(self, **condition: Any) -> bool:
        from botocore.exceptions import ClientError

        try:
            r = self.client.put_object(
                Bucket=self.bucket, Key=self.key, Body=self._body(), ContentType="application/json", **condition
            )
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in (
                "PreconditionFailed",
                "ConditionalRequestConflict",
                "412",
                "409",
            ):
                return False
            raise
        self._etag = r.get("ETag")
        return True

    # -- the run's side ---------------------------------------------------------------------------------------

    def where(self) -> str:
        return f"s3://{self.bucket}/{self.key}" if self.s3 else str(self.path)

    def stale_because(self, record: Optional[dict]) -> Optional[str]:
        """Why ``record``'s owner is gone (None while it may still run)."""
        if not record:
            return "the record is unreadable"
        if (
            record.get("host") == socket.gethostname()
            and isinstance(record.get("pid"), int)
            and not _pid_alive(record["pid"])
        ):
            return f"its process {record['pid']} on this host is gone"
        expires = record.get("expires")
        if not isinstance(expires, (int, float)) or expires < time.time():
            return f"it was not renewed for {TTL_S:g} s"
        return None

    def acquire(self) -> None:
        """Own the name, or raise :class:`NameInUse` naming the run that does."""
        for _ in range(3):
            if self._create():
                return
            record, version = self._read()
            if version is None:
                continue  # released meanwhile: try again
            why = self.stale_because(record)
            if why is None:
                r = record or {}
                age = time.time() - float(r.get("renewed", 0) or 0)
                raise NameInUse(
                    f"run name {self.name!r} is in use: another run (host {r.get('host')}, pid {r.get('pid')}) owns "
                    f"{self.where()} and renewed it {age:.0f} s ago; two runs under one name would write the same "
                    f"checkpoints. Wait for it to end, or pick another --name; a record not renewed for {TTL_S:g} s "
                    "is taken over"
                )
            if self._replace(version):
                r = record or {}
                print(
                    f"[train] warning: taking over run name {self.name!r} from host {r.get('host')} pid "
                    f"{r.get('pid')}: {why} ({self.where()})",
                    file=sys.stderr,
                    flush=True,
                )
                return
        raise NameInUse(
            f"run name {self.name!r}: another run took {self.where()} at the same moment; pick another --name or retry"
        )

    def renew(self) -> bool:
        """Extend the lease; False (and a warning) when another run took it meanwhile."""
        record, version = self._read()
        if not record or record.get("owner") != self.me["owner"]:
            print(
                f"[train] warning: run name {self.name!r} is no longer ours ({self.where()} names host "
                f"{(record or {}).get('host')} pid {(record or {}).get('pid')})",
                file=sys.stderr,
                flush=True,
            )
            return False
        return self._replace(version)

    def release(self) -> None:
        """Remove the record if it is still ours."""
        try:
            record, _ = self._read()
            if not record or record.get("owner") != self.me["owner"]:
                return
            if self.s3:
                self.client.delete_object(Bucket=self.bucket, Key=self.key)
            else:
                self.path.unlink(missing_ok=True)
                try:
                    self.path.parent.rmdir()  # only when empty: a run that stopped before writing anything
                except OSError:
                    pass
        except Exception as e:  # noqa: BLE001 - the run is over; an unreleased record expires after TTL_S
            print(
                f"[train] warning: could not release {self.where()} ({type(e).__name__}: {e}); it expires in "
                f"{TTL_S:g} s",
                file=sys.stderr,
                flush=True,
            )


def _parse(body: bytes) -> Optional[dict]:
    try:
        record = json.loads(body)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
