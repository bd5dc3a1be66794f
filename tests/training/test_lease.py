"""A run owns its name: a second `train` under a --name another live run holds exits 75 before Ray starts, naming the
owner; a record whose owner is gone is taken over, loudly; racing runs never both win (a local path and S3/moto)."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import threading
import time

import boto3
import pytest
from moto import mock_aws

from ray_efa_eks.tools import command
from ray_efa_eks.training import lease as lease_mod
from ray_efa_eks.training import lifecycle

RECORD = ".ray-efa-eks-owner.json"


class Started(BaseException):
    """Ray was about to start: the name check came too late (or not at all)."""


@pytest.fixture
def runs(monkeypatch):
    """The run itself replaced: what each started run saw of its owner record, and Ray guarded."""
    import ray

    from ray_efa_eks.efacheck import local_cluster

    def boom(*a, **k):
        raise Started("Ray")

    monkeypatch.setattr(ray, "init", boom)
    monkeypatch.setattr(local_cluster, "local_cluster", boom)
    seen: list[dict] = []

    def supervise(cmd, *, name, resume, as_json, tick=None, **kw):
        seen.append({"name": name, "tick": tick() if tick else None})
        return 0

    monkeypatch.setattr(lifecycle, "supervise", supervise)
    return seen


def record(host: str, pid: int, age_s: float = 0.0) -> bytes:
    now = time.time() - age_s
    return json.dumps(
        {"owner": "other", "host": host, "pid": pid, "renewed": now, "expires": now + lease_mod.TTL_S}
    ).encode()


def train(storage: str, capsys) -> tuple[int, str]:
    code = command.main(["train", "--storage-path", storage, "--name", "mine", "--json"])
    out = capsys.readouterr()
    return code, out.out + out.err


LOCAL = [
    # (case, record in place, exit code, what the output says, a run started)
    (
        "live-owner",
        lambda: record(socket.gethostname(), os.getpid()),
        75,
        ("in use", "--name", str(os.getpid())),
        False,
    ),
    ("other-host-fresh", lambda: record("elsewhere", 1), 75, ("in use", "elsewhere"), False),
    ("dead-pid", lambda: record(socket.gethostname(), 2**22 + 7), 0, ("taking over", "is gone"), True),
    ("expired", lambda: record("elsewhere", 1, age_s=lease_mod.TTL_S + 5), 0, ("taking over", "not renewed"), True),
    ("garbage", lambda: b"\x00not json", 0, ("taking over", "unreadable"), True),
]


@pytest.mark.parametrize("case,make,code,says,started", LOCAL, ids=[c[0] for c in LOCAL])
def test_second_run_on_a_name(tmp_path, capsys, runs, case, make, code, says, started):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / RECORD).write_bytes(make())
    got, text = train(str(tmp_path), capsys)
    assert got == code, text
    assert all(s.lower() in text.lower() for s in says), text
    assert bool(runs) == started
    if started:
        assert runs[0]["tick"] is None  # the lease renewed while it ran
        assert not (tmp_path / "mine" / RECORD).exists(), "the record outlived the run"
    else:
        last = [ln for ln in text.splitlines() if ln.startswith("{")][-1]
        assert json.loads(last)["exit_code"] == 75


def test_first_run_holds_the_name_while_it_runs(tmp_path, capsys, runs, monkeypatch):
    """While run A is running (inside supervise), run B on the same name is refused."""
    inner: list[tuple[int, str]] = []

    def run_b_meanwhile(cmd, **kw):
        inner.append(train(str(tmp_path), capsys))
        return 0

    monkeypatch.setattr(lifecycle, "supervise", run_b_meanwhile)
    code, _ = train(str(tmp_path), capsys)
    assert code == 0
    assert inner and inner[0][0] == 75 and "in use" in inner[0][1], inner


def _race(path: str, q, start, tried) -> None:
    start.wait(30)  # every contender is up before any tries: the race is real
    try:
        lease_mod.Lease(path, "raced").acquire()
        q.put("won")
    except lease_mod.NameInUse:
        q.put("refused")
    tried.wait(30)  # the winner lives (holds the name) until every other has tried: none may take over a dead one


def test_racing_runs_on_a_local_path_never_both_win(tmp_path):
    ctx = multiprocessing.get_context("fork")
    q, start, tried = ctx.Queue(), ctx.Barrier(6), ctx.Barrier(6)
    procs = [ctx.Process(target=_race, args=(str(tmp_path), q, start, tried)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = sorted(q.get(timeout=5) for _ in procs)
    assert results.count("won") == 1, results


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="ckpt-bucket")
        yield client


def test_s3_live_owner_refused_stale_taken_over(s3, capsys, runs, monkeypatch):
    from ray_efa_eks.training import checkpoints

    # moto answers boto3 in this process, not pyarrow's own S3 client: the run has no checkpoints to list here
    monkeypatch.setattr(checkpoints, "choose", lambda storage, name: checkpoints.Choice())
    key = f"ray-train/mine/{RECORD}"
    s3.put_object(Bucket="ckpt-bucket", Key=key, Body=record("elsewhere", 1))
    code, text = train("s3://ckpt-bucket/ray-train", capsys)
    assert code == 75 and "in use" in text and "s3://ckpt-bucket/ray-train/mine/" in text, text
    assert not runs
    s3.put_object(Bucket="ckpt-bucket", Key=key, Body=record("elsewhere", 1, age_s=lease_mod.TTL_S + 5))
    code, text = train("s3://ckpt-bucket/ray-train", capsys)
    assert code == 0 and "taking over" in text, text
    assert runs and runs[0]["tick"] is None
    assert "Contents" not in s3.list_objects_v2(Bucket="ckpt-bucket", Prefix=key), "the record outlived the run"


def test_s3_racing_runs_never_both_win(s3):
    results: list[str] = []

    def race():
        try:
            lease_mod.Lease("s3://ckpt-bucket/ray-train", "raced").acquire()
            results.append("won")
        except lease_mod.NameInUse:
            results.append("refused")

    threads = [threading.Thread(target=race) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results.count("won") == 1, results
