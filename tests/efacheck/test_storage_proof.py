"""The gate's storage proof, rehearsed as a GPU worker pod runs it: a process with only what the EKS Pod Identity
webhook injects (no AWS keys) writes, lists, reads back and deletes an object under the checkpoint prefix on an S3
emulator, through Ray Train's filesystem layer; every request it made is authorized against the pods' role policy.
Failures name the step, the AWS error and the likely cause."""

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
PROVE = "import json; from ray_efa_eks.efacheck.storage_proof import prove; print(json.dumps(prove()))"


def _prove(env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROVE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with PodIdentityS3(tmp_path_factory.mktemp("pod")) as emu:
        emu.admin_client().create_bucket(Bucket=BUCKET)
        yield emu


@pytest.fixture(scope="module")
def passed(s3):
    """The proof once, as a worker pod of the default stack runs it."""
    start, fetches = len(s3.requests), len(s3.credential_fetches)
    env = s3.pod_env(dict(os.environ))
    env["RAY_EFA_EKS_STORAGE_PATH"] = f"s3://{BUCKET}/ray-train"
    r = _prove(env)
    return r, s3.requests[start:], s3.credential_fetches[fetches:]


def test_storage_proof_writes_lists_reads_and_deletes_with_pod_identity(s3, passed) -> None:
    r, requests, fetches = passed
    assert r["ok"] is True and r["filesystem"] == "s3", r
    assert [x["step"] for x in r["steps"]] == ["credentials", "resolve", "write", "list", "read", "delete"]
    assert r["credentials"] == {"source": "pod_identity", "ok": True, "status": 200}
    assert r["object"].startswith(f"{BUCKET}/ray-train/.efa-check/")
    assert fetches and set(fetches) == {PodIdentityS3.TOKEN}  # pyarrow's SDK took the Pod Identity credentials too
    keys = [o["Key"] for o in s3.admin_client().list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert not [k for k in keys if ".efa-check/" in k and not k.endswith("/")]  # deleted
    methods = {q.method for q in requests}
    assert {"PUT", "GET", "DELETE"} <= methods


def test_the_pods_role_policy_admits_every_request_of_the_proof(passed) -> None:
    _, requests, _ = passed
    calls = iam_requests(requests, BUCKET)
    assert {a for a, _, _ in calls} >= {"s3:PutObject", "s3:GetObject", "s3:ListBucket", "s3:DeleteObject"}
    assert not [c for c in calls if not allowed(bucket_prefix_policy(ARN, "ray-train"), *c)]
    # the proof stays under the prefix: another team's prefix refuses its object calls
    assert [c for c in calls if c[0] == "s3:PutObject" and not allowed(bucket_prefix_policy(ARN, "other"), *c)]


def test_agent_refusing_credentials_is_a_trust_policy_failure(s3, tmp_path) -> None:
    env = s3.pod_env(dict(os.environ))
    bad = tmp_path / "token"
    bad.write_text("a token the agent does not accept")
    env.update(AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(bad), RAY_EFA_EKS_STORAGE_PATH=f"s3://{BUCKET}/ray-train")
    r = _prove(env)
    assert r["ok"] is False and r["step"] == "credentials" and r["causes"][0] == "trust_policy"
    assert "HTTP 401" in r["error"]


def test_no_pod_identity_env_and_a_missing_bucket(s3) -> None:
    env = s3.pod_env(dict(os.environ))
    env["RAY_EFA_EKS_STORAGE_PATH"] = "s3://no-such-bucket-anywhere/ray-train"
    r = _prove(env)
    assert r["ok"] is False and r["step"] in ("write", "list") and "no_bucket" in r["causes"], r
    assert "NoSuchBucket" in r["error"] or "NO_SUCH_BUCKET" in r["error"]
    missing = {k: v for k, v in env.items() if not k.startswith("AWS_CONTAINER")}
    missing.pop("RAY_EFA_EKS_STORAGE_PATH")
    r = _prove(missing)
    assert r["ok"] is False and r["causes"] == ["no_storage_path"]


@pytest.mark.parametrize(
    "error, first",
    [
        (
            "OSError: When initiating multiple part upload for key 'x' in bucket 'b': AWS Error ACCESS_DENIED during "
            "CreateMultipartUpload operation: User: arn:aws:sts::1:assumed-role/r/s is not authorized to perform: "
            "kms:GenerateDataKey on resource: arn:aws:kms:us-east-1:1:key/k",
            "kms",
        ),
        (
            "OSError: When reading information for key 'x' in bucket 'b': AWS Error ACCESS_DENIED during HeadObject "
            "operation: No response body.",
            "credential_chain",
        ),
        (
            "OSError: When writing to key 'x': AWS Error ACCESS_DENIED during PutObject operation: Access Denied",
            "bucket_policy",
        ),
        (
            "OSError: AWS Error NETWORK_CONNECTION during CreateMultipartUpload operation: curlCode: 6, Couldn't resolve "
            "host name",
            "network",
        ),
    ],
)
def test_likely_cause_from_the_aws_error(error: str, first: str) -> None:
    from ray_efa_eks.efacheck.storage_proof import CAUSES, likely_causes

    causes = likely_causes(error, {"source": "pod_identity", "ok": True})
    assert causes[0] == first and all(c in CAUSES for c in causes)


def test_a_failed_proof_fails_the_check_with_stage_storage() -> None:
    from ray_efa_eks.efacheck import efa_check

    logs = {"a": (ROOT / "tests/fixtures/nccl-logs/real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()}
    res = [{"bytes": 1 << 20, "time_s": 1e-3}]
    data = {
        "world": 2,
        "nodes": 2,
        "outs": [{"results": res, "logs": logs, "probe": {}}, {"results": res, "logs": {}, "probe": {}}],
    }
    data["storage"] = {
        "ok": False,
        "host": "gpu-0",
        "step": "write",
        "storage_path": "s3://b/ray-train",
        "error": "OSError: AWS Error ACCESS_DENIED during PutObject operation: Access Denied",
        "causes": ["bucket_policy", "credential_chain"],
    }
    r = efa_check.judge(data, "nccl", None)
    assert r["code"] == 1 and r["verdict"] == "failed" and r["failure"]["stage"] == "storage"
    assert (
        "ACCESS_DENIED during PutObject" in r["failure"]["reason"] and "likely cause: bucket_policy" in r["reasons"][0]
    )
    data["storage"] = {
        "ok": True,
        "host": "gpu-0",
        "object": "b/ray-train/.efa-check/x",
        "filesystem": "s3",
        "credentials": {"source": "pod_identity"},
    }
    ok = efa_check.judge(data, "nccl", None)
    assert ok["code"] == 0 and any(
        x.startswith("storage proof: wrote, listed, read back and deleted") for x in ok["reasons"]
    )
    assert efa_check.parser().parse_args(["--storage-proof"]).storage_proof is True
