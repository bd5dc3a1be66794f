"""Ray Train's own storage code, on S3 with EKS Pod Identity credentials, under the pods' role policy.

A subprocess with no AWS keys, only what the Pod Identity webhook injects,
runs Ray Train V2's ``StorageContext`` against an S3 emulator on loopback:
create the run directory, persist two sharded checkpoints, read one back,
delete the older one (``num_to_keep``), write the checkpoint-manager
snapshot. Every S3 request it made is then authorized against the policy
``PodStorageAccess`` attaches to the pods' role. This proves three things a
mock could not: pyarrow's AWS SDK takes Pod Identity credentials, Ray's
storage layer works through ``s3://<bucket>/<prefix>``, and the least-privilege
policy admits every call it makes (HeadBucket included) and nothing outside
the prefix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.components.cluster.pod_identity import bucket_prefix_policy
from tests.helpers.iam_eval import allowed
from tests.helpers.s3_emulator import PodIdentityS3, iam_requests

BUCKET = "ray-efa-dev-checkpoints"
ARN = f"arn:aws:s3:::{BUCKET}"
ROOT = Path(__file__).resolve().parents[2]

RAY_STORAGE_SCRIPT = r"""
import json, os, tempfile
from ray.train import Checkpoint
from ray.train.v2._internal.execution.storage import StorageContext, delete_fs_path

ctx = StorageContext(storage_path=os.environ["RAY_EFA_EKS_STORAGE_PATH"], experiment_dir_name="run-1")
persisted = []
for step in (1, 2):
    d = tempfile.mkdtemp()
    for rank in (0, 1):
        with open(os.path.join(d, f"__{rank}_0.distcp"), "wb") as f:
            f.write(os.urandom(256 * 1024))
    with open(os.path.join(d, ".metadata"), "wb") as f:
        f.write(b"dcp-metadata")
    persisted.append(ctx.persist_current_checkpoint(Checkpoint.from_directory(d), f"checkpoint_{step:06d}"))
restored = persisted[1].to_directory(tempfile.mkdtemp())
same = all(open(os.path.join(d, n), "rb").read() == open(os.path.join(restored, n), "rb").read()
           for n in os.listdir(d))
delete_fs_path(ctx.storage_filesystem, persisted[0].path)
with ctx.storage_filesystem.open_output_stream(ctx.checkpoint_manager_snapshot_path) as f:
    f.write(b'{"snapshot": 1}')
with ctx.storage_filesystem.open_input_stream(ctx.checkpoint_manager_snapshot_path) as f:
    snapshot = f.read().decode()
print(json.dumps({"fs": ctx.storage_filesystem.type_name, "restored": sorted(os.listdir(restored)),
                  "bytes_identical": same, "snapshot": snapshot, "paths": [c.path for c in persisted]}))
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """Run the storage script once as a Ray pod would; yield (emulator, its JSON summary)."""
    with PodIdentityS3(tmp_path_factory.mktemp("pod")) as s3:
        s3.admin_client().create_bucket(Bucket=BUCKET)
        setup_requests = len(s3.requests)
        env = s3.pod_env(dict(os.environ))
        env["RAY_EFA_EKS_STORAGE_PATH"] = f"s3://{BUCKET}/ray-train"
        proc = subprocess.run(
            [sys.executable, "-c", RAY_STORAGE_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        del s3.requests[:setup_requests]
        keys = [o["Key"] for o in s3.admin_client().list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        yield s3, json.loads(proc.stdout.strip().splitlines()[-1]), keys


def test_ray_storage_uses_pod_identity_credentials(session):
    s3, summary, keys = session
    assert summary["fs"] == "s3"
    assert s3.credential_fetches and set(s3.credential_fetches) == {PodIdentityS3.TOKEN}
    assert summary["restored"] == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert summary["bytes_identical"] is True and summary["snapshot"] == '{"snapshot": 1}'

    assert "ray-train/run-1/checkpoint_000002/__1_0.distcp" in keys
    assert not [k for k in keys if k.startswith("ray-train/run-1/checkpoint_000001/") and not k.endswith("/")]
    assert all(k.startswith("ray-train/") for k in keys)


def test_role_policy_admits_every_request_ray_made(session):
    s3, _, _ = session
    policy = bucket_prefix_policy(ARN, "ray-train")
    calls = iam_requests(s3.requests, BUCKET)
    assert {a for a, _, _ in calls} >= {"s3:ListBucket", "s3:PutObject", "s3:GetObject", "s3:DeleteObject"}
    denied = [c for c in calls if not allowed(policy, *c)]
    assert not denied, f"the pods' role would be refused: {denied[:5]}"


def test_the_check_can_fail(session):
    s3, _, _ = session
    calls = iam_requests(s3.requests, BUCKET)
    # Another prefix: every object call is refused.
    other = bucket_prefix_policy(ARN, "other-team")
    assert [c for c in calls if c[0] == "s3:PutObject" and not allowed(other, *c)]
    # A plain StringLike on s3:prefix would refuse pyarrow's HeadBucket (ListBucket without a prefix).
    strict = json.loads(bucket_prefix_policy(ARN, "ray-train"))
    cond = strict["Statement"][0]["Condition"]
    cond["StringLike"] = cond.pop("StringLikeIfExists")
    refused = [c for c in calls if not allowed(json.dumps(strict), *c)]
    assert refused and all(a == "s3:ListBucket" and "s3:prefix" not in ctx for a, _, ctx in refused)


def test_training_on_s3_resumes_in_a_new_cluster(tmp_path):
    """The cluster path end to end: ``python -m ray_efa_eks.training`` with only the pods' env.

    No --storage-path: the run goes to $RAY_EFA_EKS_STORAGE_PATH (s3://<bucket>/ray-train) with Pod
    Identity credentials. Its local Ray cluster is then gone, as deleted pods are; a second
    invocation with the same --name, on a fresh cluster, must resume from the checkpoint in S3.
    """
    with PodIdentityS3(tmp_path) as s3:
        s3.admin_client().create_bucket(Bucket=BUCKET)
        setup = len(s3.requests)
        env = s3.pod_env({**os.environ, "PYTHONPATH": str(ROOT)})
        env["RAY_EFA_EKS_STORAGE_PATH"] = f"s3://{BUCKET}/ray-train"

        def train(steps: int) -> dict:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ray_efa_eks.training",
                    "--json",
                    "--name",
                    "s3-run",
                    "--steps",
                    str(steps),
                    "--checkpoint-every",
                    "3",
                    "--report-every",
                    "3",
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            return json.loads(proc.stdout.strip().splitlines()[-1])

        first = train(6)
        assert first["storage_path"] == f"s3://{BUCKET}/ray-train" and first["resumed_from_step"] == 0
        second = train(9)
        calls = iam_requests(s3.requests[setup:], BUCKET)
        assert second["resumed_from_step"] == 6 and second["steps"] == 9
        assert second["loss_first"] == pytest.approx(first["loss_first"])
        keys = [o["Key"] for o in s3.admin_client().list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        assert any(k.startswith("ray-train/s3-run/step_000009/") for k in keys)
        assert set(s3.credential_fetches) == {PodIdentityS3.TOKEN}
        denied = [c for c in calls if not allowed(bucket_prefix_policy(ARN, "ray-train"), *c)]
        assert not denied, f"the pods' role would be refused: {denied[:5]}"
