"""dlcImage pinned by digest (issue 37): accepted by the OCI grammar, carried to every pod, refused when malformed.

A tag can move: a node added later pulls whatever the tag names then. A digest (``repo@sha256:<64 hex>``) is the
content itself, so every node that starts a Ray pod runs the bits the gate checked. The grammar is issue 39's
components/values.py (OCI distribution reference + go-digest's encoding rule); these tests hold the stack to it.
"""

from __future__ import annotations

import pytest

from ray_efa_eks.components.config import ConfigError, StackConfig
from ray_efa_eks.tools.mockrun import run_program

REPO = "public.ecr.aws/deep-learning-containers/ray"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def cfg(image: str) -> StackConfig:
    return StackConfig.from_mapping({"dlcImage": image}, region="us-east-1")


@pytest.mark.parametrize("image", [f"{REPO}@{DIGEST}", f"{REPO}:train-ml-cuda-v1.1@{DIGEST}",
                                   f"{REPO}@sha512:" + "ab" * 64])
def test_digest_pins_are_accepted(image):
    assert cfg(image).dlcImage == image


@pytest.mark.parametrize("image,says", [
    (f"{REPO}@sha256:" + "0123456789ABCDEF" * 4, "with uppercase"),
    (f"{REPO}@sha256:" + "a" * 63, "63 characters"),
    (f"{REPO}@sha256:" + "a" * 65, "65 characters"),
    (f"{REPO}@sha512:" + "a" * 64, "exactly 128 lowercase hex"),
    (f"{REPO}@md5:" + "a" * 32, "'md5' is not one registries use"),
])
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
    for spec in pods:
        for c in spec["containers"]:
            assert c["image"] == image
