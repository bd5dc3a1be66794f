"""Checkpoint storage is asked before Ray starts: can this run write there? (worst-ten item 2, second half)

Before: only the form of a storage path was checked, so a bucket that does not exist, a prefix the role may not write
or an S3 endpoint that never answers were met by Ray Train at the first checkpoint, after the cluster had started
and the model had trained. Now ``train`` asks S3 (HeadBucket, PutObject, DeleteObject under the prefix) with the
process's own credentials, in bounded time, and exits 73 (the storage said no) or 2 (no answer) before Ray starts.

S3 is moto on loopback (tests/helpers/s3_emulator.py) reached with EKS Pod Identity credentials only, as a Ray pod
reaches it; for the denied prefix the emulator authorizes each request against the pods' own role policy
(components/cluster/pod_identity.py). Ray is replaced by a stand-in that fails to start (exit 4): reaching it means the
storage check passed.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from ray_efa_eks.components.cluster.pod_identity import bucket_prefix_policy
from ray_efa_eks.tools import command
from ray_efa_eks.training import storage_check
from tests.helpers.iam_eval import allowed
from tests.helpers.s3_emulator import PodIdentityS3, iam_requests

BUCKET = "ray-efa-dev-checkpoints"
POLICY = bucket_prefix_policy(f"arn:aws:s3:::{BUCKET}", "ray-train")


@pytest.fixture
def ray_never_starts(monkeypatch):
    """Ray's local cluster and ray.init fail at once: exit 4 means every check before Ray passed."""
    import ray

    from ray_efa_eks.efacheck import local_cluster

    from ray_efa_eks.training import lifecycle

    def refuse(*a, **k):
        raise RuntimeError("stand-in: Ray was asked to start")

    def run_refused(*a, **k):  # the run's own process (training/lifecycle.py) would start Ray
        print("error: stand-in: Ray was asked to start", file=sys.stderr)
        return 4

    monkeypatch.setattr(local_cluster, "local_cluster", refuse)
    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(lifecycle, "supervise", run_refused)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with PodIdentityS3(tmp_path_factory.mktemp("pod"), policy=(BUCKET, POLICY)) as emu:
        emu.admin_client().create_bucket(Bucket=BUCKET)
        yield emu


@pytest.fixture
def as_pod(s3, monkeypatch):
    """This process's environment as a Ray pod's: Pod Identity credentials only, the emulator as S3's endpoint."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in s3.pod_env({}).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("RAY_EFA_EKS_STORAGE_PATH", raising=False)
    return s3


def train(*argv: str) -> tuple[int, str, float]:
    t0 = time.monotonic()
    code = command.main(["train", "--steps", "1", *argv])
    return code, "", time.monotonic() - t0


def test_writable_prefix_passes_with_only_the_calls_the_pods_role_grants(as_pod, ray_never_starts, capsys):
    start = len(as_pod.requests)
    code, _, _ = train("--storage-path", f"s3://{BUCKET}/ray-train")
    err = capsys.readouterr().err
    assert code == 4 and "stand-in: Ray was asked to start" in err, (code, err)
    made = iam_requests(as_pod.requests[start:], BUCKET)
    assert [a for a, _, _ in made][:3] == ["s3:ListBucket", "s3:PutObject", "s3:DeleteObject"], made  # the check
    assert all(allowed(POLICY, *t) for t in made), made  # and the run's owner record, and its checkpoint listing
    keys = [o["Key"] for o in as_pod.admin_client().list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert not [k for k in keys if storage_check.PROBE_NAME in k], keys  # the write check cleaned up


def test_the_job_on_the_cluster_checks_its_pods_storage_path(as_pod, ray_never_starts, monkeypatch, capsys):
    """`submit` runs `train --address auto` on the head pod, whose $RAY_EFA_EKS_STORAGE_PATH check_train_args does
    not read: the check takes it before ray.init."""
    monkeypatch.setenv("RAY_EFA_EKS_STORAGE_PATH", "s3://no-such-bucket-here/ray-train")
    code, _, _ = train("--address", "auto")
    err = capsys.readouterr().err
    assert code == storage_check.EXIT_STORAGE and "RAY_EFA_EKS_STORAGE_PATH" in err and "does not exist" in err, err


def test_missing_bucket_exits_73_before_ray(as_pod, ray_never_starts, capsys):
    code, _, _ = train("--storage-path", "s3://no-such-bucket-here/ray-train", "--json")
    out, err = capsys.readouterr()
    assert code == 73, (code, err)
    assert "bucket 'no-such-bucket-here' does not exist" in err and "stand-in" not in err, err
    assert '"exit_code": 73' in out.strip().splitlines()[-1]


def test_prefix_the_role_may_not_write_exits_73(as_pod, ray_never_starts, capsys):
    """HeadBucket is allowed (s3:ListBucket without s3:prefix), the write under another prefix is not."""
    code, _, _ = train("--storage-path", f"s3://{BUCKET}/someone-else")
    err = capsys.readouterr().err
    assert code == 73, (code, err)
    assert "access denied" in err and "PutObject" in err and "container-role" in err, err


def test_unreachable_endpoint_answers_in_bounded_time(as_pod, ray_never_starts, monkeypatch, capsys):
    """An endpoint that accepts the connection and never answers (a black hole): exit 2 within the bound."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)  # never accepted: the kernel completes the handshake, nothing ever answers
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{hole.getsockname()[1]}")
    monkeypatch.setattr(storage_check, "TIMEOUT_S", 2.0)
    try:
        code, _, took = train("--storage-path", f"s3://{BUCKET}/ray-train")
    finally:
        hole.close()
    err = capsys.readouterr().err
    assert code == 2 and "did not answer within 2 s" in err and took < 10, (code, took, err)


def test_refused_endpoint_is_no_answer(as_pod, ray_never_starts, monkeypatch, capsys):
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now: connection refused
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")
    code, _, took = train("--storage-path", f"s3://{BUCKET}/ray-train")
    err = capsys.readouterr().err
    assert code == 2 and "S3 did not answer" in err and took < storage_check.TIMEOUT_S + 5, (code, took, err)


def test_local_directory_is_created_and_written(tmp_path, ray_never_starts, monkeypatch, capsys):
    monkeypatch.delenv("RAY_EFA_EKS_STORAGE_PATH", raising=False)
    target = tmp_path / "new" / "runs"
    code, _, _ = train("--storage-path", str(target))
    err = capsys.readouterr().err
    assert code == 4 and "stand-in" in err, err
    assert target.is_dir() and list(target.iterdir()) == []


def test_directory_that_cannot_be_created_exits_73(ray_never_starts, monkeypatch, capsys):
    """/proc takes no new directory, even from root: only a real mkdir says so."""
    monkeypatch.delenv("RAY_EFA_EKS_STORAGE_PATH", raising=False)
    code, _, _ = train("--storage-path", "/proc/self/checkpoints")
    err = capsys.readouterr().err
    assert code == 73 and "cannot create the directory" in err and "stand-in" not in err, (code, err)


def test_a_name_too_long_is_a_usage_error_not_a_crash(tmp_path, ray_never_starts, monkeypatch, capsys):
    """Before: Path.exists() raised ENAMETOOLONG inside the usage check: exit 70, 'internal error'."""
    monkeypatch.delenv("RAY_EFA_EKS_STORAGE_PATH", raising=False)
    code, _, _ = train("--storage-path", f"{tmp_path}/{'x' * 300}")
    err = capsys.readouterr().err
    assert code == 64 and "File name too long" in err and "internal error" not in err, (code, err)


def test_query_options_of_a_pyarrow_uri_are_honoured():
    assert storage_check.split_s3("s3://b/p/q/?endpoint_override=127.0.0.1:9&scheme=http") == (
        "b",
        "p/q",
        {"endpoint_override": "127.0.0.1:9", "scheme": "http"},
    )


@pytest.mark.parametrize(
    "value, says",
    [
        ("gs://b/x", "gs:// storage is not supported"),
        ("s3://Bad_Bucket/x", "not an S3 bucket name"),
        ("s3://bucket/a/../b", "'..'"),
    ],
)
def test_the_gates_storage_path_has_the_same_grammar(value, says, capsys, monkeypatch):
    """efa-check --storage-path (the gate's storage proof) took any text: a gs:// path made the proof's rank wait for
    Google credentials until the gate's deadline. Same grammar as train's, refused before Ray starts."""
    import ray

    monkeypatch.setattr(ray, "init", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("Ray started")))
    code = command.main(["efa-check", "--storage-proof", "--storage-path", value])
    err = capsys.readouterr().err
    assert code == 64 and says in err and "Ray started" not in err, (code, err)


def test_a_pyarrow_endpoint_in_the_uri_is_the_one_asked(as_pod, ray_never_starts, monkeypatch, capsys):
    """Ray Train accepts pyarrow's ?endpoint_override=&scheme= in a storage path; the check asks that endpoint."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # wrong on purpose: the URI's endpoint wins
    start = len(as_pod.requests)
    endpoint = as_pod.endpoint.removeprefix("http://")
    code, _, _ = train("--storage-path", f"s3://{BUCKET}/ray-train?endpoint_override={endpoint}&scheme=http")
    err = capsys.readouterr().err
    assert code == 4 and "stand-in" in err, (code, err)
    assert [r.method for r in as_pod.requests[start:]][:3] == ["HEAD", "PUT", "DELETE"]  # then the owner record


def test_no_credentials_at_all_exits_73(ray_never_starts, monkeypatch, capsys):
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in {
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9",
    }.items():
        monkeypatch.setenv(k, v)
    code, _, _ = train("--storage-path", f"s3://{BUCKET}/ray-train")
    err = capsys.readouterr().err
    assert code == 73 and "no usable AWS credentials" in err, (code, err)


def test_without_boto3_the_check_says_what_it_did_not_check(monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "boto3", None)  # import boto3 raises ImportError
    storage_check.check(f"s3://{BUCKET}/ray-train", "--storage-path")
    assert "boto3 is not installed: --storage-path s3://" in capsys.readouterr().err


def test_a_directory_that_takes_no_file_exits_73():
    """/proc/self exists (mkdir -p is content) but takes no new file, even from root."""
    with pytest.raises(storage_check.StorageError) as e:
        storage_check.check("/proc/self", "--storage-path")
    assert e.value.code == 73 and "this user cannot write there" in str(e.value)


def _client_error(op: str, status: int, code: str = "", message: str = ""):
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, op
    )


@pytest.mark.parametrize(
    "error, code, says",
    [
        (lambda: _client_error("PutObject", 503, "SlowDown", "Please reduce your request rate."), 2, "retry later"),
        (lambda: _client_error("HeadBucket", 404), 73, "does not exist"),
        (lambda: _client_error("PutObject", 400, "KMS.DisabledException", "key is disabled"), 73, "KMS key refused"),
        (
            lambda: _client_error("PutObject", 403, "AccessDenied", "not authorized to perform kms:GenerateDataKey"),
            73,
            "KMS key refused",
        ),
        (lambda: _client_error("HeadBucket", 301), 73, "in another region"),
        (lambda: _client_error("PutObject", 400, "InvalidRequest", "odd"), 73, "S3 refused PutObject: InvalidRequest"),
        (
            lambda: __import__("botocore.exceptions").exceptions.ReadTimeoutError(endpoint_url="http://x"),
            2,
            "S3 did not answer",
        ),
        (
            lambda: __import__("botocore.exceptions").exceptions.ParamValidationError(report="bad key"),
            73,
            "ParamValidationError",
        ),
    ],
)
def test_each_answer_of_s3_has_its_code_and_its_fix(error, code, says, monkeypatch):
    monkeypatch.setattr(storage_check, "_s3_calls", lambda value, environ: (_ for _ in ()).throw(error()))
    with pytest.raises(storage_check.StorageError) as e:
        storage_check.check(f"s3://{BUCKET}/ray-train", "--storage-path", {"AWS_REGION": "us-east-1"})
    assert e.value.code == code and says in str(e.value), str(e.value)


def test_a_bug_in_the_check_is_not_dressed_as_an_answer(monkeypatch):
    monkeypatch.setattr(storage_check, "_s3_calls", lambda value, environ: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        storage_check.check(f"s3://{BUCKET}/ray-train", "--storage-path")


def test_storage_uri_grammar_edges():
    from ray_efa_eks.efacheck.storage_uri import uri_problem

    assert "NUL" in uri_problem("/tmp/a\x00b", "--storage-path")
    assert uri_problem("/any/path", "--storage-path") is None
    assert uri_problem("s3://my-bucket/ray-train?endpoint_override=h:1", "--storage-path") is None


@pytest.mark.parametrize("status, code", [(403, "AccessDenied"), (400, "InvalidRequest")])
def test_credentials_that_cannot_be_named_never_fail_the_message(monkeypatch, status, code):
    import boto3

    monkeypatch.setattr(
        storage_check,
        "_s3_calls",
        lambda value, environ: (_ for _ in ()).throw(_client_error("PutObject", status, code)),
    )
    monkeypatch.setattr(boto3.session.Session, "get_credentials", lambda self: 1 / 0)
    with pytest.raises(storage_check.StorageError) as e:
        storage_check.check(f"s3://{BUCKET}/x", "--storage-path", {"AWS_REGION": "us-east-1"})
    assert e.value.code == 73 and "credentials: unknown)" in str(e.value), str(e.value)
