"""S3 on loopback (moto's server app) that records every request, plus an EKS Pod Identity endpoint.

EKS Pod Identity hands a pod credentials through the container-credentials
protocol: the webhook sets ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` (the agent on
169.254.170.23) and ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` (a projected
token the agent checks). :class:`PodIdentityS3` serves the same protocol on
127.0.0.1 and refuses a wrong token, so a process given only ``env`` reaches
S3 exactly as a Ray pod would: no access keys, no instance role.

:func:`iam_requests` turns the recorded HTTP requests into the IAM
(action, resource, context) triples S3 authorizes them as, so a test can check
the pods' role policy against what Ray's storage layer really does.
"""

from __future__ import annotations

import io
import json
import threading
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from werkzeug.serving import make_server


ARROW_BACKEND_PROBE = "$extremelyunlikelytoexist$"
"""Arrow's S3 filesystem HEADs this bucket once to tell AWS from MinIO etc. by the error it gets."""


@dataclass
class S3Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes


class PodIdentityS3:
    """Context manager: recording S3 emulator + Pod Identity credential endpoint on loopback."""

    TOKEN = "eks-pod-identity-token-for-tests"

    def __init__(self, workdir: Path, region: str = "us-east-1", policy: tuple[str, str] | None = None):
        """``policy``: (bucket, identity policy JSON): the pods' requests (Pod Identity credentials) to that bucket
        are authorized against it as S3 would (:func:`iam_requests` + tests/helpers/iam_eval.py), and a denied
        one is answered 403 AccessDenied; moto itself authorizes nothing. Requests to other buckets go to moto as
        they are (only a missing bucket's 404 is tested that way)."""
        self.workdir = Path(workdir)
        self.region = region
        self.policy = policy
        self.requests: list[S3Request] = []
        self.credential_fetches: list[str | None] = []

    def __enter__(self) -> "PodIdentityS3":
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

        moto_app = DomainDispatcherApplication(create_backend_app)

        def recording_app(environ, start_response):
            query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
            body = b""
            if environ["REQUEST_METHOD"] == "POST" and "delete" in query:
                # DeleteObjects names its keys in the body; keep a copy. Other bodies (uploads, often
                # aws-chunked without Content-Length) pass through untouched.
                body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
                environ["wsgi.input"] = io.BytesIO(body)
            request = S3Request(environ["REQUEST_METHOD"], urllib.parse.unquote(environ["PATH_INFO"]), query, body)
            self.requests.append(request)
            if (
                self.policy
                and "ASIAPODIDENTITYTEST" in environ.get("HTTP_AUTHORIZATION", "")
                and not self._authorized(request)
            ):
                start_response("403 Forbidden", [("Content-Type", "application/xml")])
                return [
                    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
                    b"<Message>Access Denied</Message></Error>"
                ]
            return moto_app(environ, start_response)

        self._s3 = make_server("127.0.0.1", 0, recording_app, threaded=True, request_handler=MotoRequestHandler)
        threading.Thread(target=self._s3.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self._s3.server_port}"

        outer = self

        class Credentials(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                auth = self.headers.get("Authorization")
                outer.credential_fetches.append(auth)
                if auth != outer.TOKEN:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps(
                    {
                        "AccessKeyId": "ASIAPODIDENTITYTEST",
                        "SecretAccessKey": "secret",
                        "Token": "session",
                        "Expiration": "2099-01-01T00:00:00Z",
                        "AccountId": "123456789012",
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._creds = ThreadingHTTPServer(("127.0.0.1", 0), Credentials)
        threading.Thread(target=self._creds.serve_forever, daemon=True).start()
        self.token_file = self.workdir / "eks-pod-identity-token"
        self.token_file.write_text(self.TOKEN)
        return self

    def __exit__(self, *exc) -> None:
        self._s3.shutdown()
        self._creds.shutdown()

    def _authorized(self, request: S3Request) -> bool:
        from tests.helpers.iam_eval import allowed

        bucket, policy = self.policy
        if request.path.lstrip("/").split("/", 1)[0] != bucket:
            return True  # left to moto: S3 answers 404 for a bucket that does not exist, whatever the caller's rights
        try:
            triples = iam_requests([request], bucket)
        except AssertionError:  # a call iam_requests cannot classify: not allowed
            return False
        return all(allowed(policy, *t) for t in triples)

    def admin_client(self):
        """boto3 S3 client with static test keys, for setup (creating the bucket) only."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id="admin",
            aws_secret_access_key="admin",
        )

    def pod_env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` without any AWS_* credentials, plus what the Pod Identity webhook injects."""
        env = {k: v for k, v in base.items() if not k.startswith("AWS_")}
        env.update(
            AWS_CONTAINER_CREDENTIALS_FULL_URI=f"http://127.0.0.1:{self._creds.server_port}/v1/credentials",
            AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(self.token_file),
            AWS_EC2_METADATA_DISABLED="true",
            AWS_CONFIG_FILE="/dev/null",
            AWS_SHARED_CREDENTIALS_FILE="/dev/null",
            AWS_ENDPOINT_URL_S3=self.endpoint,  # the emulator instead of s3.<region>.amazonaws.com
            AWS_REGION=self.region,
        )
        return env


def iam_requests(requests: list[S3Request], bucket: str) -> list[tuple[str, str, dict]]:
    """(action, resource ARN, condition context) for each path-style request to ``bucket``.

    Raises on a request it cannot classify, so a new kind of S3 call by Ray or
    pyarrow surfaces in the test instead of slipping past the policy check.
    """
    out: list[tuple[str, str, dict]] = []
    bucket_arn = f"arn:aws:s3:::{bucket}"
    for r in requests:
        parts = r.path.lstrip("/").split("/", 1)
        if r.method == "HEAD" and parts == [ARROW_BACKEND_PROBE]:
            continue  # Arrow's backend detection: expected to fail, on AWS too, whatever the policy
        if parts[0] != bucket:
            raise AssertionError(f"request outside the bucket: {r.method} {r.path}")
        key = parts[1] if len(parts) > 1 else ""
        q = r.query
        if not key:
            if r.method == "HEAD" or (r.method == "GET" and ("list-type" in q or not q)):
                prefix = (q.get("prefix") or [""])[0]
                out.append(("s3:ListBucket", bucket_arn, {"s3:prefix": prefix} if prefix else {}))
            elif r.method == "POST" and "delete" in q:
                for k in ET.fromstring(r.body).iter():
                    if k.tag.endswith("Key"):
                        out.append(("s3:DeleteObject", f"{bucket_arn}/{k.text}", {}))
            else:
                raise AssertionError(f"unclassified bucket request: {r.method} {r.path}?{q}")
            continue
        obj = f"{bucket_arn}/{key}"
        if r.method in ("GET", "HEAD") and "uploadId" in q:
            out.append(("s3:ListMultipartUploadParts", obj, {}))
        elif r.method in ("GET", "HEAD"):
            out.append(("s3:GetObject", obj, {}))
        elif r.method == "PUT" and "x-amz-copy-source" in q:
            raise AssertionError("server-side copy needs GetObject on the source too; not classified")
        elif r.method in ("PUT", "POST"):
            out.append(("s3:PutObject", obj, {}))  # PutObject, Create/UploadPart/CompleteMultipartUpload
        elif r.method == "DELETE" and "uploadId" in q:
            out.append(("s3:AbortMultipartUpload", obj, {}))
        elif r.method == "DELETE":
            out.append(("s3:DeleteObject", obj, {}))
        else:
            raise AssertionError(f"unclassified object request: {r.method} {r.path}?{q}")
    return out
