"""Storage URIs answered before Ray starts (worst-ten item 2).

Before: ``train --storage-path gs://b/x`` started Ray and hung in pyarrow waiting for Google credentials, and
``RAY_EFA_EKS_STORAGE_PATH=/etc/hostname`` failed after the run with advice to resume from it. Ray is replaced by a
guard that fails the test if it would start.
"""

from __future__ import annotations


import pytest

from ray_efa_eks.tools import command
from ray_efa_eks.training.request import storage_problem


class Started(BaseException):
    pass


@pytest.fixture
def no_ray(monkeypatch):
    import ray

    from ray_efa_eks.efacheck import local_cluster

    def boom(*a, **k):
        raise Started("Ray started before the storage path was checked")

    monkeypatch.setattr(ray, "init", boom)
    monkeypatch.setattr(local_cluster, "local_cluster", boom)


@pytest.mark.parametrize(
    "argv, env, says",
    [
        (["--storage-path", "gs://b/x"], {}, "gs:// storage is not supported"),
        (["--storage-path", "hdfs://nn/x"], {}, "hdfs:// storage"),
        (["--storage-path", "s3://Bad_Bucket/x"], {}, "not an S3 bucket name"),
        (["--storage-path", "s3://ab/x"], {}, "not an S3 bucket name"),
        (["--storage-path", "s3://bucket/a/../b"], {}, "'..'"),
        (
            [],
            {"RAY_EFA_EKS_STORAGE_PATH": "/etc/hostname"},
            "RAY_EFA_EKS_STORAGE_PATH /etc/hostname: exists and is not",
        ),
        ([], {"RAY_EFA_EKS_STORAGE_PATH": "gs://b"}, "RAY_EFA_EKS_STORAGE_PATH 'gs://b'"),
        (["--storage-path", "{tmp}/f/sub"], {}, "is not a directory"),
    ],
)
def test_storage_is_checked_before_ray(argv, env, says, tmp_path, capsys, monkeypatch, no_ray):
    (tmp_path / "f").write_text("a file")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code = command.main(["train", "--steps", "1", *[a.replace("{tmp}", str(tmp_path)) for a in argv]])
    err = capsys.readouterr().err
    assert code == 64 and says in err and "Traceback" not in err, (code, err)


def test_valid_storage_passes():
    assert storage_problem("s3://my-bucket/ray-train", "--storage-path") is None
    assert storage_problem("/tmp/new/dir/ok", "--storage-path") is None
    assert storage_problem("/etc/hostname", "--storage-path", on_this_host=False) is None  # submit: the cluster's
    assert storage_problem("gs://b", "--storage-path", on_this_host=False) is not None


@pytest.mark.parametrize(
    "argv, says",
    [
        (["submit", "--address", "http://127.0.0.1:99999", "--", "--steps", "1"], "Port out of range"),
        (["submit", "--address", "http://[::1", "--", "--steps", "1"], "Invalid IPv6 URL"),
        (["submit", "--address", "http://127.0.0.1:0"], "port 0"),
        (["preflight", "--region", "us-east-1", "--endpoint-url", "http://[::1"], "Invalid IPv6 URL"),
        (["preflight", "--region", "us-east-1", "--endpoint-url", "http://localhost:70000"], "Port out of range"),
        (["train", "--address", "[::1"], "--address"),
        (["train", "--address", "127.0.0.1:99999"], "--address"),
    ],
)
def test_urls_are_usage_errors(argv, says, capsys, monkeypatch, no_ray):
    """Before: exit 1 or a traceback (urllib raises ValueError lazily, on .port or on a bad IPv6 bracket)."""
    import boto3.session

    monkeypatch.setattr(boto3.session, "Session", lambda *a, **k: (_ for _ in ()).throw(Started("AWS")))
    code = command.main(argv)
    err = capsys.readouterr().err
    assert code == 64 and says in err and "Traceback" not in err and "internal error" not in err, (code, err)
