"""Ray pods know their region and never wait on IMDS, while Pod Identity credentials still work.

The AWS env the stack renders on a Ray container (``AWS_REGION``, ``AWS_DEFAULT_REGION``,
``AWS_EC2_METADATA_DISABLED``), plus only what the Pod Identity webhook injects, is handed to pyarrow's S3 filesystem
(Ray Train's storage layer) and to botocore in a fresh process, next to a recording fake IMDS: both resolve the
stack's region, pyarrow lists the bucket with the Pod Identity credentials (botocore's ContainerProvider: method
``container-role``), and IMDS gets no request. Without that env, as the pods were rendered before, pyarrow asks IMDS
(9 requests, ~8 s here with a fake that answers at once; hop limit 1 makes the real one time out instead) and
guesses us-east-1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.tools.mockrun import run_program
from tests.helpers.s3_emulator import PodIdentityS3

ROOT = Path(__file__).resolve().parents[2]
REGION = "ap-northeast-1"


def probe(env: dict[str, str], bucket: str | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.imds_probe", json.dumps(env), *([bucket] if bucket else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    """The AWS_* env of a GPU worker container, as the stack renders it for REGION."""
    rc = run_program(region=REGION).one("kubernetes:ray.io/v1:RayCluster")["spec"]
    env = rc["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e["value"] for e in env if e["name"].startswith("AWS_")}


def test_rendered_env_gives_region_and_pod_identity_without_imds(rendered, tmp_path):
    assert set(rendered) == {"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED"}
    with PodIdentityS3(tmp_path, region=REGION) as s3:
        s3.admin_client().create_bucket(Bucket="ckpt", CreateBucketConfiguration={"LocationConstraint": REGION})
        webhook = {
            k: v
            for k, v in s3.pod_env({}).items()
            if k
            in ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_ENDPOINT_URL_S3")
        }
        out = probe({**rendered, **webhook}, "ckpt")
        assert s3.credential_fetches and set(s3.credential_fetches) == {PodIdentityS3.TOKEN}
    assert out["imds_requests"] == 0, out
    assert out["pyarrow_region"] == out["botocore_region"] == REGION
    assert out["pyarrow_listing"] == [] and out["botocore_credentials"] == "container-role"


def test_without_it_pyarrow_probes_imds_and_guesses_the_region():
    out = probe({})
    assert out["imds_requests"] > 0 and out["pyarrow_region"] != REGION, out
