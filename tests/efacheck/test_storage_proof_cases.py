"""Every condition of the storage proof reached through its public functions (``credential_source``, ``prove``,
``likely_causes``, ``summary``) and its outcome asserted, in process and fast: the credential sources, the agent
asked over a real loopback HTTP server, each likely cause, the filesystem Ray Train resolves (and pyarrow's own when
Ray has no Train v2), and each step of ``prove`` failing on a filesystem that lies in exactly one way (handed in
where Ray and pyarrow resolve one: ``pyarrow.fs.FileSystem.from_uri``). test_storage_proof.py rehearses the whole proof against an S3 emulator in a
subprocess (not measured by coverage)."""

from __future__ import annotations

import http.server
import os
import sys
import threading
from pathlib import Path

import pyarrow.fs
import pytest

from ray_efa_eks.efacheck import storage_proof as sp

CREDS = '{"AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": "s", "Token": "t", "Expiration": "2026-12-05T05:00:00Z"}'


# --- credential_source --------------------------------------------------------------------------------------------


def _pod_identity_env(tmp_path: Path, token: str | None = "tok\n") -> dict[str, str]:
    env = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.23/v1/credentials"}
    if token is not None:
        (tmp_path / "token").write_text(token)
        env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = str(tmp_path / "token")
    return env


def test_pod_identity_credentials_handed_out_ask_with_the_stripped_token(tmp_path):
    asked = []

    def fetch(uri, token, timeout):
        asked.append((uri, token, timeout))
        return 200, CREDS

    r = sp.credential_source(_pod_identity_env(tmp_path), timeout_s=2.5, fetch=fetch)
    assert r == {"source": "pod_identity", "ok": True, "status": 200}  # no credentials kept, no error key
    assert asked == [("http://169.254.170.23/v1/credentials", "tok", 2.5)]


@pytest.mark.parametrize(
    "status, body",
    [
        (200, '{"Message": "no credentials here"}'),  # a 200 without AccessKeyId is not credentials
        (403, CREDS),  # credentials text with a refusal status is still a refusal
        (400, "AccessDeniedException: " + "x" * 600),
    ],
)
def test_pod_identity_refused_keeps_status_and_the_agents_words(tmp_path, status, body):
    r = sp.credential_source(_pod_identity_env(tmp_path), fetch=lambda u, t, s: (status, body))
    assert r["source"] == "pod_identity" and r["ok"] is False and r["status"] == status
    assert r["error"] == body[:500] and len(r["error"]) <= 500


def test_pod_identity_with_an_unreadable_token_file_never_asks_the_agent(tmp_path):
    def fetch(*a):
        raise AssertionError("the agent must not be asked without a token")

    r = sp.credential_source(_pod_identity_env(tmp_path, token=None), fetch=fetch)
    assert r["source"] == "pod_identity" and r["ok"] is False and r["status"] is None
    assert r["error"].startswith("token file ''")
    env = _pod_identity_env(tmp_path)
    env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = str(tmp_path / "gone")
    r = sp.credential_source(env, fetch=fetch)
    assert r["ok"] is False and "No such file" in r["error"] and str(tmp_path / "gone") in r["error"]


@pytest.mark.parametrize(
    "env, source",
    [
        ({"AWS_WEB_IDENTITY_TOKEN_FILE": "/t", "AWS_ROLE_ARN": "arn:aws:iam::1:role/r"}, "web_identity"),
        ({"AWS_WEB_IDENTITY_TOKEN_FILE": "/t"}, "none"),  # IRSA needs both
        ({"AWS_ROLE_ARN": "arn:aws:iam::1:role/r"}, "none"),
        ({"AWS_WEB_IDENTITY_TOKEN_FILE": "/t", "AWS_ACCESS_KEY_ID": "AKIA"}, "static"),
        ({"AWS_ACCESS_KEY_ID": "AKIA"}, "static"),
        ({"AWS_ACCESS_KEY_ID": ""}, "none"),
        ({"AWS_CONTAINER_CREDENTIALS_FULL_URI": ""}, "none"),  # an empty URI is no Pod Identity
        ({}, "none"),
    ],
)
def test_other_credential_sources_are_named_not_checked(env, source):
    assert sp.credential_source(env, fetch=lambda *a: (500, "")) == {"source": source, "ok": None}


# --- the agent asked over a real HTTP server ----------------------------------------------------------------------------


class _Agent(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        if self.headers.get("Authorization") == "good":
            code, body = 200, CREDS.encode()
        elif self.headers.get("Authorization") == "silent":
            code, body = 403, b""
        else:
            code, body = 400, b'{"code":"AccessDeniedException","message":"trust policy"}'
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture(scope="module")
def agent():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Agent)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1/credentials"
    srv.shutdown()
    srv.server_close()


def _asking(tmp_path: Path, uri: str, token: str) -> dict[str, str]:
    """A Pod Identity environment whose agent is ``uri`` and whose token is ``token``."""
    env = _pod_identity_env(tmp_path, token=token)
    env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = uri
    return env


def _closed_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


@pytest.mark.parametrize(
    "token, ok, status, error",
    [
        ("good", True, 200, None),
        ("bad", False, 400, '{"code":"AccessDeniedException","message":"trust policy"}'),
        ("silent", False, 403, "HTTP Error 403: Forbidden"),  # no body: the HTTPError's own words
    ],
)
def test_the_agent_is_asked_with_the_token_and_its_status_and_words_are_kept(agent, tmp_path, token, ok, status, error):
    r = sp.credential_source(_asking(tmp_path, agent, token))
    assert r == {"source": "pod_identity", "ok": ok, "status": status, **({"error": error} if error else {})}


def test_an_unreachable_or_malformed_agent_uri_is_status_zero_with_the_reason(tmp_path):
    r = sp.credential_source(_asking(tmp_path, f"http://127.0.0.1:{_closed_port()}/", "t"), timeout_s=2)
    assert (r["ok"], r["status"], r["error"]) == (False, 0, "URLError: [Errno 111] Connection refused")
    r = sp.credential_source(_asking(tmp_path, "not a url", "t"), timeout_s=2)
    assert r["status"] == 0 and r["error"].startswith("ValueError: ") and "not a url" in r["error"]
    r = sp.prove(str(tmp_path), env=_asking(tmp_path, "not a url", "t"))
    assert r["step"] == "credentials" and r["error"].startswith("EKS Pod Identity agent unreachable: ValueError: ")


def test_credential_source_uses_the_real_fetch_by_default(agent, tmp_path):
    env = _pod_identity_env(tmp_path, token="good")
    env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = agent
    assert sp.credential_source(env) == {"source": "pod_identity", "ok": True, "status": 200}


# --- likely_causes ------------------------------------------------------------------------------------------------

REFUSED = {"source": "pod_identity", "ok": False, "status": 400}


@pytest.mark.parametrize(
    "error, creds, want",
    [
        ("the role cannot be assumed", REFUSED, ["trust_policy"]),
        ("AccessDeniedException", REFUSED, ["trust_policy", "bucket_policy", "credential_chain"]),
        ("x", {"source": "pod_identity", "ok": True}, ["unknown"]),
        ("x", {"source": "web_identity", "ok": False}, ["unknown"]),  # only Pod Identity's agent has a trust answer
        ("x", None, ["unknown"]),
        (
            "AWS Error ACCESS_DENIED: not authorized to perform: KMS:Decrypt",
            None,
            ["kms", "bucket_policy", "credential_chain"],
        ),
        ("AWS Error NoSuchBucket", None, ["no_bucket"]),
        ("AWS Error NO_SUCH_BUCKET during PutObject", None, ["no_bucket"]),
        ("The specified bucket does not exist", None, ["no_bucket"]),
        ("AWS Error PermanentRedirect", None, ["no_bucket"]),
        ("Unknown error (HTTP status 301)", None, ["no_bucket"]),
        ("curlCode: 28", None, ["network"]),
        ("Couldn't resolve host name", None, ["network"]),
        ("could not resolve endpoint", None, ["network"]),
        ("Connection refused", None, ["network"]),
        ("operation timed out", None, ["network"]),
        ("AWS Error NETWORK_CONNECTION", None, ["network"]),
        ("Unable to connect to endpoint", None, ["network"]),
        ("connect timeout", None, ["network"]),
        ("AWS Error InvalidAccessKeyId", None, ["credential_chain"]),
        ("ExpiredToken", None, ["credential_chain"]),
        ("InvalidToken", None, ["credential_chain"]),
        ("SignatureDoesNotMatch", None, ["credential_chain"]),
        ("No credentials provider", None, ["credential_chain"]),
        ("No response body.", None, ["credential_chain"]),
        ("AWS Error INVALID_ACCESS_KEY_ID", None, ["credential_chain"]),
        ("x", {"source": "none", "ok": None}, ["credential_chain"]),
        ("AWS Error ACCESS_DENIED", None, ["bucket_policy", "credential_chain"]),
        ("AccessDenied", None, ["bucket_policy", "credential_chain"]),
        ("Access Denied", None, ["bucket_policy", "credential_chain"]),
        ("Unknown error (HTTP status 403)", None, ["bucket_policy", "credential_chain"]),
        ("Forbidden", None, ["bucket_policy", "credential_chain"]),
        # credential_chain named once, at its first (most likely) place
        ("ExpiredToken: Access Denied", None, ["credential_chain", "bucket_policy"]),
        (
            "AccessDeniedException: kms and a Connection refused and NoSuchBucket",
            REFUSED,
            ["trust_policy", "kms", "no_bucket", "network", "bucket_policy", "credential_chain"],
        ),
    ],
)
def test_likely_causes_each_rule_in_its_order(error, creds, want):
    assert sp.likely_causes(error, creds) == want
    assert all(c in sp.CAUSES for c in want)


@pytest.mark.parametrize(
    "creds, want",
    [
        # the agent was never asked (no token file): not its trust policy
        (
            {
                "source": "pod_identity",
                "ok": False,
                "status": None,
                "error": "token file '': No such file or directory",
            },
            ["credential_chain"],
        ),
        # the agent did not answer: not its trust policy either
        (
            {"source": "pod_identity", "ok": False, "status": 0, "error": "URLError: [Errno 111] Connection refused"},
            ["credential_chain", "network"],
        ),
    ],
)
def test_a_pod_identity_agent_that_never_answered_is_not_a_trust_policy_refusal(creds, want):
    assert sp.likely_causes(creds["error"], creds) == want


# --- the filesystem Ray Train resolves ------------------------------------------------------------------------


def test_prove_uses_ray_trains_filesystem_and_pyarrows_when_ray_has_no_train_v2(monkeypatch, tmp_path):
    from ray.train.v2._internal.execution import storage

    seen = []
    real = storage.get_fs_and_path
    monkeypatch.setattr(storage, "get_fs_and_path", lambda p: seen.append(p) or real(p))
    assert sp.prove(str(tmp_path), env={})["ok"] is True and seen == [str(tmp_path)]
    monkeypatch.setitem(sys.modules, "ray.train.v2._internal.execution.storage", None)  # import fails
    r = sp.prove(str(tmp_path), env={})
    assert r["ok"] is True and r["filesystem"] == "local" and len(seen) == 1


class _Resolving:
    """``pyarrow.fs.FileSystem`` as Ray Train and pyarrow call it: ``from_uri`` hands out ``fs`` (or raises)."""

    def __init__(self, fs=None, raises: Exception | None = None):
        self.fs, self.raises = fs, raises

    def from_uri(self, uri):
        if self.raises:
            raise self.raises
        return self.fs, uri


def _resolves(monkeypatch, fs=None, raises: Exception | None = None) -> None:
    monkeypatch.setattr(pyarrow.fs, "FileSystem", _Resolving(fs, raises))


# --- prove --------------------------------------------------------------------------------------------------------


def test_prove_on_a_local_filesystem_goes_through_every_step(tmp_path):
    r = sp.prove(str(tmp_path / "ckpt"), env={"AWS_ACCESS_KEY_ID": "AKIA"})
    assert r["ok"] is True and r["error"] is None and r["step"] is None and r["causes"] == []
    assert [s["step"] for s in r["steps"]] == ["credentials", "resolve", "write", "list", "read", "delete"]
    assert all(s["ok"] is True and s["ms"] >= 0 for s in r["steps"])
    assert r["steps"][0]["source"] == "static" and r["credentials"] == {"source": "static", "ok": None}
    assert r["steps"][2]["bytes"] > sp.PAYLOAD_BYTES
    assert r["filesystem"] == "local" and r["storage_path"] == str(tmp_path / "ckpt")
    assert r["object"].startswith(f"{tmp_path}/ckpt/{sp.PROOF_DIR}/") and r["object"].endswith(".bin")
    assert not os.path.exists(r["object"]) and os.path.isdir(tmp_path / "ckpt" / sp.PROOF_DIR)
    assert "hints" not in r
    s = sp.summary(r)
    assert s.startswith(f"storage proof: wrote, listed, read back and deleted {r['object']} on local from ")
    assert s.endswith("(credentials: static)")


def test_prove_reads_the_path_from_the_env_and_a_trailing_slash_changes_nothing(tmp_path):
    r = sp.prove(env={sp.STORAGE_PATH_ENV: f"{tmp_path}/"})
    assert r["ok"] is True and r["storage_path"] == f"{tmp_path}/"
    assert r["object"].startswith(f"{tmp_path}/{sp.PROOF_DIR}/")
    assert r["credentials"] == {"source": "none", "ok": None}


def test_prove_defaults_to_the_process_environment(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv(sp.STORAGE_PATH_ENV, str(tmp_path))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA")
    r = sp.prove()
    assert r["ok"] is True and r["storage_path"] == str(tmp_path) and r["credentials"]["source"] == "static"


def test_prove_without_a_storage_path_fails_at_resolve_before_any_credential(tmp_path):
    def fetch(*a):
        raise AssertionError("no storage path: nothing is asked")

    env = {**_pod_identity_env(tmp_path), sp.STORAGE_PATH_ENV: ""}
    for r in (sp.prove(env=env, fetch=fetch), sp.prove("", env={}, fetch=fetch)):
        assert r["ok"] is False and r["step"] == "resolve" and r["causes"] == ["no_storage_path"]
        assert r["error"] == f"${sp.STORAGE_PATH_ENV} is not set" and r["hints"] == [sp.CAUSES["no_storage_path"]]
        assert r["steps"] == [{"step": "resolve", "ok": False}] and "credentials" not in r


def test_prove_stops_at_refused_credentials(tmp_path):
    r = sp.prove(str(tmp_path), env=_pod_identity_env(tmp_path), fetch=lambda *a: (400, "cannot assume the role"))
    assert r["ok"] is False and r["step"] == "credentials" and r["causes"] == ["trust_policy"]
    assert r["error"] == "EKS Pod Identity agent: HTTP 400: cannot assume the role"
    assert r["steps"] == [{"step": "credentials", "ok": False}] and r["object"] is None
    assert not os.path.exists(tmp_path / sp.PROOF_DIR)  # nothing written
    assert r["hints"][0] == sp.CAUSES["trust_policy"]


def test_prove_names_a_missing_token_file_or_a_silent_agent_not_an_http_status(tmp_path):
    r = sp.prove(str(tmp_path), env=_pod_identity_env(tmp_path, token=None))
    assert r["ok"] is False and r["step"] == "credentials" and r["causes"] == ["credential_chain"]
    assert r["error"].startswith("EKS Pod Identity token file not readable: token file ''") and "HTTP" not in r["error"]
    r = sp.prove(str(tmp_path), env=_pod_identity_env(tmp_path), fetch=lambda *a: (0, "URLError: timed out"))
    assert r["step"] == "credentials" and r["causes"] == ["credential_chain", "network"]
    assert r["error"] == "EKS Pod Identity agent unreachable: URLError: timed out"


class _Lying:
    """A local filesystem that lies in one way: ``how`` in {"unlisted", "corrupt", "undeletable"}."""

    def __init__(self, how: str, type_name: str = "local"):
        self.fs, self.how, self.type_name, self.made = pyarrow.fs.LocalFileSystem(), how, type_name, []

    def create_dir(self, p, recursive):
        self.made.append((p, recursive))
        self.fs.create_dir(p, recursive=recursive)

    def open_output_stream(self, p):
        return self.fs.open_output_stream(p)

    def get_file_info(self, what):
        got = self.fs.get_file_info(what)
        if self.how == "unlisted" and isinstance(what, pyarrow.fs.FileSelector):
            return [i for i in got if not i.path.endswith(".bin")]
        if self.how == "undeletable" and isinstance(what, str):
            return pyarrow.fs.FileInfo(what, pyarrow.fs.FileType.File)
        return got

    def open_input_stream(self, p):
        if self.how == "corrupt":
            data = self.fs.open_input_stream(p).read()
            return pyarrow.BufferReader(data[:-1] + bytes([data[-1] ^ 1]))
        return self.fs.open_input_stream(p)

    def delete_file(self, p):
        self.fs.delete_file(p)


@pytest.mark.parametrize(
    "how, step, error, cause",
    [
        ("unlisted", "list", "is missing from the listing of", "unknown"),
        ("corrupt", "read", "read back 4", "wrong_data"),
        ("undeletable", "delete", "still exists after delete_file", "unknown"),
    ],
)
def test_prove_fails_at_the_step_that_lied(monkeypatch, tmp_path, how, step, error, cause):
    _resolves(monkeypatch, _Lying(how))
    r = sp.prove(str(tmp_path), env={})
    assert r["ok"] is False and r["step"] == step and error in r["error"] and r["causes"] == [cause]
    assert r["filesystem"] == "local" and r["steps"][-1] == {"step": step, "ok": False}
    steps = ["credentials", "resolve", "write", "list", "read", "delete"]
    assert [s["step"] for s in r["steps"] if s["ok"]] == steps[: steps.index(step)]  # every step before it passed
    assert sp.summary(r).startswith(f"storage proof failed at {step} from ")


def test_prove_listing_error_counts_entries(monkeypatch, tmp_path):
    (tmp_path / sp.PROOF_DIR).mkdir()
    (tmp_path / sp.PROOF_DIR / "other.txt").write_text("x")
    _resolves(monkeypatch, _Lying("unlisted"))
    r = sp.prove(str(tmp_path), env={})
    assert r["error"].endswith(f"{tmp_path}/{sp.PROOF_DIR} (1 entries)")


def test_prove_reports_the_aws_error_of_the_step_that_raised(monkeypatch, tmp_path):
    class Refusing(_Lying):
        def open_output_stream(self, p):
            raise OSError("When initiating multiple part upload: AWS Error ACCESS_DENIED during CreateMultipartUpload")

    _resolves(monkeypatch, Refusing("none"))
    r = sp.prove(str(tmp_path), env={"AWS_ACCESS_KEY_ID": "AKIA"})
    assert r["ok"] is False and r["step"] == "write" and r["causes"] == ["bucket_policy", "credential_chain"]
    assert r["error"] == (
        "OSError: When initiating multiple part upload: AWS Error ACCESS_DENIED during CreateMultipartUpload"
    )
    assert r["hints"] == [sp.CAUSES["bucket_policy"], sp.CAUSES["credential_chain"]]

    _resolves(monkeypatch, raises=ValueError("x" * 3000))
    r = sp.prove("s3://b/p", env={})  # no credentials at all: the chain is the likely cause
    assert r["step"] == "resolve" and r["causes"] == ["credential_chain"] and len(r["error"]) == 2000
    assert r["error"].startswith("ValueError: xxx") and "filesystem" not in r


def test_prove_without_pyarrow_names_the_image(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow.fs", None)
    r = sp.prove(str(tmp_path), env={})
    assert r["ok"] is False and r["step"] == "resolve" and r["causes"] == ["unknown"]
    assert r["error"].startswith("ImportError: ") and r["error"].endswith(
        "(pyarrow is Ray Train's storage layer; the image must have it)"
    )


# --- summary ------------------------------------------------------------------------------------------------------


def test_summary_of_a_failure_names_the_first_cause_and_the_others():
    r = {
        "ok": False,
        "step": "write",
        "host": "gpu-0",
        "storage_path": "s3://b/p",
        "error": "E",
        "causes": ["bucket_policy", "credential_chain", "kms"],
    }
    assert sp.summary(r) == (
        "storage proof failed at write from gpu-0 under s3://b/p: E; likely cause: "
        f"bucket_policy ({sp.CAUSES['bucket_policy']}); else: credential_chain, kms"
    )
    two = sp.summary({**r, "causes": ["kms", "bucket_policy"]})  # one other cause is still named
    assert two.endswith(f"likely cause: kms ({sp.CAUSES['kms']}); else: bucket_policy")
    one = sp.summary({**r, "causes": ["kms"]})
    assert one.endswith(f"likely cause: kms ({sp.CAUSES['kms']})") and "else" not in one
    assert sp.summary({**r, "causes": []}).endswith(f"likely cause: unknown ({sp.CAUSES['unknown']})")
    assert "likely cause: unknown" in sp.summary({"ok": False})


def test_summary_of_a_pass_without_credentials_says_none():
    s = sp.summary({"ok": True, "object": "b/p/.efa-check/x", "filesystem": "s3", "host": "h"})
    assert s == "storage proof: wrote, listed, read back and deleted b/p/.efa-check/x on s3 from h (credentials: None)"


def test_prove_makes_the_folder_on_a_shared_filesystem_only(monkeypatch, tmp_path):
    """A local (NFS/EFS-mounted) storage path needs its folder, as Ray Train's StorageContext makes it; before the
    fix every such proof failed at write (FileNotFoundError). S3 keys need no folder: nothing is created there."""
    local = _Lying("none")
    _resolves(monkeypatch, local)
    r = sp.prove(str(tmp_path / "new" / "deep"), env={})
    assert r["ok"] is True and local.made == [(f"{tmp_path}/new/deep/{sp.PROOF_DIR}", True)]
    s3 = _Lying("none", type_name="s3")
    _resolves(monkeypatch, s3)
    (tmp_path / sp.PROOF_DIR).mkdir()
    r = sp.prove(str(tmp_path), env={})
    assert r["ok"] is True and r["filesystem"] == "s3" and s3.made == []


@pytest.mark.parametrize("start, end, ms", [(1.0, 3.25, 2250.0), (1.0, 1.00012, 0.1)])
def test_step_times_are_milliseconds_to_a_tenth(monkeypatch, tmp_path, start, end, ms):
    clock = iter([start, end] * 10)  # each step reads the clock at its start and its end
    monkeypatch.setattr(sp.time, "perf_counter", lambda: next(clock))
    r = sp.prove(str(tmp_path), env={})
    assert r["ok"] is True and [s["ms"] for s in r["steps"]] == [ms] * 6


def test_the_agent_is_given_5_seconds_by_default(tmp_path):
    asked = []
    sp.credential_source(_pod_identity_env(tmp_path), fetch=lambda u, t, s: asked.append(s) or (200, CREDS))
    assert asked == [5.0]


def test_the_proof_object_is_a_named_4_kib_payload_with_a_12_hex_suffix(monkeypatch, tmp_path):
    import re
    import socket

    written = []
    real = pyarrow.fs.LocalFileSystem.open_output_stream

    class Recording(_Lying):
        def open_output_stream(self, p):
            written.append(p)
            return real(self.fs, p)

    _resolves(monkeypatch, Recording("none"))
    r = sp.prove(str(tmp_path), env={})
    host = socket.gethostname()
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/\.efa-check/{re.escape(host)}-[0-9a-f]{{12}}\.bin", r["object"])
    assert written == [r["object"]] and r["host"] == host
    assert (
        r["steps"][2]["bytes"]
        == len(f"ray-efa-eks storage proof from {host}\n") + 4096
        == len(f"ray-efa-eks storage proof from {host}\n") + sp.PAYLOAD_BYTES
    )


# --- what a weaker assertion let through (mutmut survivors) ------------------------------------------------------


class _OddAgent(http.server.BaseHTTPRequestHandler):
    """An agent whose answers are not plain JSON: bodies larger than the bounded reads, bytes that are not UTF-8."""

    BODIES = {
        "huge": (200, b"x" * 65536 + CREDS.encode()),
        "binary": (200, b"\xff\xfe" + CREDS.encode()),
        "binary-refusal": (400, b"\xffdenied"),
    }

    def do_GET(self):  # noqa: N802 - http.server's name
        code, body = self.BODIES[self.headers.get("Authorization")]
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture(scope="module")
def odd_agent():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OddAgent)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1/credentials"
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize(
    "token, ok, status, error",
    [
        ("huge", False, 200, "x" * 500),  # the credentials lie past the 64 KiB read: not handed out
        ("binary", True, 200, None),  # bytes that are not UTF-8 are replaced, not a decoding error
        ("binary-refusal", False, 400, "\ufffddenied"),
    ],
)
def test_the_agents_answer_is_read_bounded_and_bytes_that_are_not_utf8_are_replaced(
    odd_agent, tmp_path, token, ok, status, error
):
    r = sp.credential_source(_asking(tmp_path, odd_agent, token))
    assert r == {"source": "pod_identity", "ok": ok, "status": status, **({"error": error} if error else {})}


def test_an_agent_that_never_answers_times_out(tmp_path):
    import socket

    with socket.socket() as s:  # accepts the connection (backlog) and never answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        r = sp.credential_source(_asking(tmp_path, f"http://127.0.0.1:{s.getsockname()[1]}/", "t"), timeout_s=0.5)
    assert (r["status"], r["error"]) == (0, "TimeoutError: timed out")  # the gate's rank is not held by it


def test_an_unreadable_token_file_error_is_the_os_reason(tmp_path):
    env = _pod_identity_env(tmp_path, token=None)
    r = sp.credential_source(env, fetch=None)
    assert r["error"] == "token file '': No such file or directory"
    env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = str(tmp_path)  # a directory
    assert sp.credential_source(env)["error"] == f"token file {str(tmp_path)!r}: Is a directory"


def test_prove_of_a_path_ending_in_x_keeps_its_last_character(tmp_path):
    r = sp.prove(str(tmp_path / "boX"), env={})
    assert r["ok"] is True and r["object"].startswith(f"{tmp_path}/boX/{sp.PROOF_DIR}/")


def test_prove_of_a_path_ending_in_a_space_writes_under_that_path_not_a_trimmed_one(tmp_path):
    """Only the '/' is trimmed: a shared-filesystem prefix ending in a space (pyarrow keeps it) is the one the proof
    must write under, not its neighbour without the space."""
    r = sp.prove(str(tmp_path / "ckpt "), env={})
    assert r["ok"] is True and r["object"].startswith(f"{tmp_path}/ckpt /{sp.PROOF_DIR}/")
    assert os.path.isdir(tmp_path / "ckpt " / sp.PROOF_DIR) and not os.path.exists(tmp_path / "ckpt")


def test_prove_an_object_that_never_landed_is_missing_from_the_listing(monkeypatch, tmp_path):
    """On S3 nothing makes the folder: a write that never landed leaves no folder to list, which is the same answer
    as a listing without the object (not an error of its own)."""

    class Vanishing(_Lying):
        def open_output_stream(self, p):
            return pyarrow.BufferOutputStream()

    _resolves(monkeypatch, Vanishing("none", type_name="s3"))
    r = sp.prove(str(tmp_path / "bucket"), env={})
    assert r["ok"] is False and r["step"] == "list" and r["causes"] == ["unknown"]
    assert r["error"] == f"{r['object']} is missing from the listing of {tmp_path}/bucket/{sp.PROOF_DIR} (0 entries)"
