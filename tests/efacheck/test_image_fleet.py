"""efacheck/image_fleet.py: the digests the Ray pods really run (status.containerStatuses[].imageID), judged.

PodLists are shaped as the Kubernetes API returns them (core/v1 PodList; ``imageID`` as containerd reports it,
``registry/repo@sha256:<hex>``, or as docker did, ``docker-pullable://...``, or a bare image id).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from ray_efa_eks.efacheck import image_fleet

REPO = "public.ecr.aws/deep-learning-containers/ray"
A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def pod(name: str, image_id: str | None, container: str = "ray-worker", phase: str = "Running", **meta) -> dict:
    return {
        "metadata": {"name": name, "labels": {"ray.io/cluster": "ray"}, **meta},
        "spec": {"nodeName": f"node-{name}"},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": container, "image": f"{REPO}:train-ml-cuda-v1.1", "imageID": image_id or ""},
                {"name": "sidecar", "image": "busybox", "imageID": "docker.io/library/busybox@" + B},
            ],
        },
    }


def pods(*items) -> dict:
    return {"kind": "PodList", "apiVersion": "v1", "items": list(items)}


def test_digest_of_every_shape():
    assert image_fleet.digest_of(f"{REPO}@{A}") == A
    assert image_fleet.digest_of(f"docker-pullable://{REPO}@{A}") == A
    assert image_fleet.digest_of(A) == A
    assert image_fleet.digest_of(f"{REPO}:train-ml-cuda-v1.1@{A}") == A
    assert image_fleet.digest_of(f"{REPO}:train-ml-cuda-v1.1") is None
    assert image_fleet.digest_of("") is None and image_fleet.digest_of(None) is None


def test_one_digest_passes_and_is_recorded():
    recs = image_fleet.pod_records(
        pods(
            pod("ray-head-x", f"{REPO}@{A}", "ray-head"),
            pod("w1", f"{REPO}@{A}"),
            pod("w2", f"docker-pullable://{REPO}@{A}"),
        )
    )
    assert [r["pod"] for r in recs] == ["ray-head-x", "w1", "w2"]  # the sidecar is not a Ray container
    v = image_fleet.fleet(recs, expect_pods=3)
    assert v["verdict"] == "ok" and v["digest"] == A


def test_mixed_fleet_fails_naming_pods_and_digests():
    recs = image_fleet.pod_records(
        pods(pod("head", f"{REPO}@{A}", "ray-head"), pod("w1", f"{REPO}@{A}"), pod("w2", f"{REPO}@{B}"))
    )
    v = image_fleet.fleet(recs, expect_pods=3)
    assert v["verdict"] == "mixed" and v["failure"]["stage"] == "image-fleet"
    reason = v["failure"]["reason"]
    assert f"head, w1 run {A}" in reason and f"w2 run {B}" in reason and "Pin dlcImage by digest" in reason


def test_missing_pods_or_digests_are_undetermined_and_terminating_pods_ignored():
    recs = image_fleet.pod_records(
        pods(
            pod("head", f"{REPO}@{A}", "ray-head"),
            pod("w1", None),
            pod("old", f"{REPO}@{B}", deletionTimestamp="2026-12-04T23:00:00Z"),
        )
    )
    assert [r["pod"] for r in recs] == ["head", "w1"]
    v = image_fleet.fleet(recs, expect_pods=3)
    assert v["verdict"] == "undetermined" and "w1" in v["failure"]["reason"]
    v = image_fleet.fleet(recs[:1], expect_pods=3)
    assert v["verdict"] == "undetermined" and "1 Ray pod(s) running, 3 expected" in v["failure"]["reason"]


def test_main_waits_for_the_fleet_then_exits_with_its_verdict(capsys):
    lists = iter(
        [
            pods(pod("head", f"{REPO}@{A}", "ray-head")),
            pods(pod("head", f"{REPO}@{A}", "ray-head"), pod("w1", f"{REPO}@{B}", phase="Pending")),
            pods(pod("head", f"{REPO}@{A}", "ray-head"), pod("w1", f"{REPO}@{B}")),
        ]
    )
    code = image_fleet.main(
        ["--namespace", "ray", "--cluster", "ray", "--expect-pods", "2", "--poll-s", "0"],
        list_fn=lambda ns, c: next(lists),
        sleep=lambda s: None,
    )
    out = json.loads(capsys.readouterr().out)["image_fleet"]
    assert code == 1 and out["verdict"] == "mixed" and set(out["digests"]) == {A, B}


def test_main_reports_an_api_it_cannot_read(capsys):
    def refused(ns, c):
        raise OSError("HTTP Error 403: Forbidden")

    code = image_fleet.main(
        ["--namespace", "ray", "--cluster", "ray", "--expect-pods", "2", "--wait-s", "0"],
        list_fn=refused,
        sleep=lambda s: None,
    )
    out = json.loads(capsys.readouterr().out)["image_fleet"]
    assert code == 2 and "403" in out["failure"]["reason"]


def test_list_pods_asks_the_api_for_the_clusters_pods_with_the_pods_token(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("projected-token\n")
    (tmp_path / "ca.crt").write_text("")
    monkeypatch.setattr(image_fleet.ssl, "create_default_context", lambda cafile: ("ctx", cafile))
    seen = {}

    class Resp:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def read(self):
            return json.dumps(pods()).encode()

    def opener(req, timeout, context):
        seen.update(url=req.full_url, auth=req.get_header("Authorization"), context=context)
        return Resp()

    assert image_fleet.list_pods("ray", "ray", sa_dir=str(tmp_path), opener=opener)["kind"] == "PodList"
    assert (
        seen["url"] == "https://kubernetes.default.svc/api/v1/namespaces/ray/pods?labelSelector=ray.io%2Fcluster%3Dray"
    )
    assert seen["auth"] == "Bearer projected-token" and seen["context"] == ("ctx", str(tmp_path / "ca.crt"))


BASE = ["--namespace", "ray", "--cluster", "ray", "--expect-pods", "3", "--wait-s", "0"]


@pytest.mark.parametrize(
    "bad", [["--bogus"], ["--expect-pods", "three"], ["--expect-pods", "0"], ["--poll-s", "nan"], ["--wait-s", "-1"]]
)
def test_a_bad_option_is_a_usage_error_64_without_a_traceback(bad):
    """Before: plain argparse exited 2, the code of an undetermined fleet, and a negative or nan wait or poll reached
    time.sleep or a deadline that never passes; now the shared parser's 64 (efacheck/cli.py), before any API call."""
    proc = subprocess.run(
        [sys.executable, "-m", "ray_efa_eks.efacheck.image_fleet", *BASE, *bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 64, (proc.returncode, proc.stderr)
    assert proc.stdout == "" and "error:" in proc.stderr and bad[0] in proc.stderr, proc.stderr
    assert not re.search(r"Traceback \(most recent call last\)", proc.stderr), proc.stderr


def test_outside_a_pod_answers_at_once_instead_of_polling(capsys):
    """No ServiceAccount token (run outside the audit pod): waiting cannot bring one, so the answer is immediate."""

    def no_token(ns, c):
        raise FileNotFoundError(2, "No such file or directory", f"{image_fleet.SA_DIR}/token")

    def sleep(s):
        raise AssertionError("polled for a token that cannot appear")

    code = image_fleet.main(
        ["--namespace", "ray", "--cluster", "ray", "--expect-pods", "2"], list_fn=no_token, sleep=sleep
    )
    out = json.loads(capsys.readouterr().out)["image_fleet"]
    assert code == 2 and out["verdict"] == "undetermined"
    assert (
        out["failure"]["reason"].startswith("not inside a pod with a ServiceAccount token")
        and "token" in out["failure"]["reason"]
    )


def _stop_after(n: int):
    """A ``sleep`` that stops the watch (SIGTERM, as the kubelet stops a sidecar) after ``n`` passes."""
    import os
    import signal

    calls: list[float] = []

    def sleep(s: float) -> None:
        calls.append(s)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGTERM)

    return sleep


@pytest.mark.parametrize(
    "later, verdict, says",
    [
        # scale from zero: the head alone, a worker pending, both workers running, then the workers gone (idle)
        ([pod("w1", f"{REPO}@{A}"), pod("w2", f"{REPO}@{A}")], "ok", None),
        # a worker on another build carried the check and went: the verdict keeps it
        ([pod("w1", f"{REPO}@{A}"), pod("w2", f"{REPO}@{B}")], "mixed", f"w2 run {B}"),
        # only one worker ever ran
        ([pod("w1", f"{REPO}@{A}")], "undetermined", "2 Ray pod(s) running, 3 expected"),
    ],
    ids=["one-digest", "mixed-then-gone", "short"],
)
def test_watch_judges_every_ray_pod_it_saw_until_stopped(tmp_path, capsys, later, verdict, says):
    head = pod("head", f"{REPO}@{A}", "ray-head")
    lists = iter([pods(head), pods(head, pod("w1", f"{REPO}@{A}", phase="Pending")), pods(head, *later), pods(head)])
    out = tmp_path / "image-fleet.json"
    code = image_fleet.main(
        ["--namespace", "ray", "--cluster", "ray", "--expect-pods", "3", "--poll-s", "0", "--watch", "--out", str(out)],
        list_fn=lambda ns, c: next(lists),
        sleep=_stop_after(4),
    )
    assert code == 0  # a sidecar's exit is no verdict: the gate's script reads the file
    v = json.loads(out.read_text())["image_fleet"]
    assert v["verdict"] == verdict and v["passes"] == 4 and v["at"] > 0, v
    assert [p["pod"] for p in v["pods"]] == ["head", *sorted(p["metadata"]["name"] for p in later)]
    if says:
        assert says in v["failure"]["reason"]
    first = json.loads(capsys.readouterr().out.splitlines()[0])["image_fleet"]
    assert first["verdict"] == "undetermined" and first["digest"] == A  # the head's digest, known from the start


def test_watch_needs_somewhere_to_write(capsys):
    with pytest.raises(SystemExit) as e:
        image_fleet.main(["--namespace", "ray", "--cluster", "ray", "--expect-pods", "3", "--watch"])
    assert e.value.code == 64 and "--watch needs --out" in capsys.readouterr().err
