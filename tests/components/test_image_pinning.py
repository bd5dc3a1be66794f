"""dlcImage pinned by digest: accepted by the OCI grammar, carried to every pod, refused when malformed.

A tag can move: a node added later pulls whatever the tag names then. A digest (``repo@sha256:<64 hex>``) is the
content itself, so every node that starts a Ray pod runs the bits the gate checked. The grammar is
components/config/values.py's (OCI distribution reference + go-digest's encoding rule); these tests hold the stack to it.
"""

from __future__ import annotations

import json

import pytest

from ray_efa_eks.components.config.config import ConfigError, StackConfig
from ray_efa_eks.tools.mockrun import run_program

REPO = "public.ecr.aws/deep-learning-containers/ray"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def cfg(image: str) -> StackConfig:
    return StackConfig.from_mapping({"dlcImage": image}, region="us-east-1")


@pytest.mark.parametrize(
    "image", [f"{REPO}@{DIGEST}", f"{REPO}:train-ml-cuda-v1.1@{DIGEST}", f"{REPO}@sha512:" + "ab" * 64]
)
def test_digest_pins_are_accepted(image):
    assert cfg(image).dlcImage == image


@pytest.mark.parametrize(
    "image,says",
    [
        (f"{REPO}@sha256:" + "0123456789ABCDEF" * 4, "with uppercase"),
        (f"{REPO}@sha256:" + "a" * 63, "63 characters"),
        (f"{REPO}@sha256:" + "a" * 65, "65 characters"),
        (f"{REPO}@sha512:" + "a" * 64, "exactly 128 lowercase hex"),
        (f"{REPO}@md5:" + "a" * 32, "'md5' is not one registries use"),
    ],
)
def test_malformed_digests_are_refused_naming_the_key(image, says):
    with pytest.raises(ConfigError, match="dlcImage") as e:
        cfg(image)
    assert says in str(e.value)


def test_every_pod_runs_the_digest():
    image = f"{REPO}@{DIGEST}"
    run = run_program({"dlcImage": image})
    rc = run.one("kubernetes:ray.io/v1:RayCluster")["spec"]
    pods = [rc["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in rc["workerGroupSpecs"]]
    pods.append(run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"])
    cached = image.replace("public.ecr.aws/", "123456789012.dkr.ecr.us-east-1.amazonaws.com/ray-efa-dev-ecr-public/")
    for spec in pods:  # through the account's pull-through cache, the digest unchanged
        for c in spec["containers"]:
            assert c["image"] == cached


FAKE_RAY = """#!/bin/bash
echo "ray $*" >> "$CALLS"
case "$1 $2" in
  "job list"|"job stop"|"job logs") exit 0;;
  "job submit") exit 0;;
  "job status") echo "Job succeeded"; exit 0;;
esac
exit 1
"""


OTHER = "sha256:" + "e" * 64
LATER = 4102444800.0
"""An audit pass taken after the check ended (2100-01-01)."""


@pytest.mark.parametrize(
    "audit, rc, says",
    [
        ({"image_fleet": {"verdict": "ok", "digest": DIGEST}}, 0, None),  # a one-shot verdict (no "at")
        ({"image_fleet": {"verdict": "ok", "digest": DIGEST, "at": LATER}}, 0, None),
        (
            {
                "image_fleet": {
                    "verdict": "mixed",
                    "digests": {DIGEST: ["head"], OTHER: ["w1"]},
                    "at": LATER,
                    "failure": {"stage": "image-fleet", "reason": "the Ray pods run 2 different images"},
                }
            },
            1,
            "the Ray pods run 2 different images",
        ),
        (
            {
                "image_fleet": {
                    "verdict": "undetermined",
                    "digest": DIGEST,
                    "at": LATER,
                    "failure": {"stage": "image-fleet", "reason": "1 Ray pod(s) running, 3 expected"},
                }
            },
            2,
            "1 Ray pod(s) running, 3 expected",
        ),
        ({"image_fleet": {"verdict": "ok", "digest": DIGEST, "at": 1.0}}, 2, "took no pass after the check ended"),
        (None, 2, "the image audit left no verdict"),
    ],
    ids=["one-shot", "after-the-check", "mixed", "short", "stale-pass", "no-audit-file"],
)
def test_gate_passes_the_audited_digest_to_the_check_and_combines_the_audit(tmp_path, audit, rc, says):
    """The rendered gate script, run by bash with a stand-in ``ray`` whose check succeeds: the digest the image
    audit wrote reaches the check (its Ray job's runtime env, the default of ``--image-digest``), and the gate's exit
    is the audit's when the check passed: a mixed fleet fails (1), no verdict, too few pods or a pass older than the
    check's end is undetermined (2)."""
    import json
    import os
    import subprocess

    from ray_efa_eks.components.addons.efa_check import Deadlines, check_args, check_files, check_script

    fleet = tmp_path / "image-fleet.json"
    if audit:
        fleet.write_text(json.dumps(audit))
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "ray").write_text(FAKE_RAY)
    (bin_ / "ray").chmod(0o755)
    script = check_script(
        "http://head:8265", check_args(None, 2, Deadlines()), Deadlines(head_wait_s=5), image_fleet_file=str(fleet)
    )
    script = script.replace("end=$((done_at + 60))", "end=$((done_at + 2))")  # the stale pass: no 60 s wait here
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "CALLS": str(tmp_path / "calls")}
    mount = tmp_path / "mount"  # the Job's working directory: its steps run from the payload, as in the pod
    for path, text in check_files().items():
        (mount / path).parent.mkdir(parents=True, exist_ok=True)
        (mount / path).write_text(text)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(["bash", "-c", script], cwd=mount, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    if says:
        assert says in proc.stdout and "the image audit did not" in proc.stdout, proc.stdout
    (submit,) = [c for c in (tmp_path / "calls").read_text().splitlines() if c.startswith("ray job submit")]
    renv = '--runtime-env-json {"env_vars": {"RAY_EFA_EKS_IMAGE_DIGEST": "%s"}}' % DIGEST
    assert (renv in submit) == bool(audit and audit["image_fleet"].get("digest")), submit


def test_the_check_and_the_run_record_the_digest(monkeypatch):
    from types import SimpleNamespace

    from ray_efa_eks.efacheck.efa_check import image_of
    from ray_efa_eks.efacheck.report import render_markdown
    from ray_efa_eks.training import fabric

    tag = f"{REPO}:train-ml-cuda-v1.1"
    from ray_efa_eks.efacheck.check_args import parser

    monkeypatch.setenv("RAY_EFA_EKS_IMAGE_DIGEST", DIGEST)
    assert parser().parse_args(["--json"]).image_digest == DIGEST
    assert image_of(SimpleNamespace(image=tag, image_digest=DIGEST)) == {"reference": tag, "digest": DIGEST}
    assert image_of(SimpleNamespace(image=f"{REPO}@{DIGEST}", image_digest=None))["digest"] == DIGEST
    text = render_markdown({"verdict": "efa", "image": {"reference": tag, "digest": DIGEST}})
    assert f"Image: {tag} (digest {DIGEST})" in text
    rec = fabric.image_record({"a": f"{REPO}@{DIGEST}", "b": f"{REPO}@{DIGEST}"})
    assert rec == {"references": [f"{REPO}@{DIGEST}"], "digest": DIGEST}
    assert "cannot see the digest" in fabric.image_record({"a": tag})["note"]
    assert "different image references" in fabric.image_record({"a": tag, "b": f"{REPO}@{DIGEST}"})["note"]
    fab = fabric.summarize("gloo", {}, images={"a": f"{REPO}@{DIGEST}"})
    assert json.loads(fabric.checkpoint_record(fab, 3))["image_digest"] == DIGEST
