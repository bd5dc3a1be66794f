"""Run in a fresh process (the AWS SDK for C++ under pyarrow initialises once per process): with a recording fake
IMDS on loopback (``AWS_EC2_METADATA_SERVICE_ENDPOINT``, honoured by botocore and the AWS SDK for C++), build
pyarrow's S3 filesystem and a botocore session from the environment given as JSON in argv[1], touch S3 once, and
print what they resolved and how many requests IMDS got."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    hits: list[str] = []

    class Imds(BaseHTTPRequestHandler):
        def do_PUT(self):  # noqa: N802  (IMDSv2 token request)
            hits.append("PUT " + self.path)
            self.send_response(404)
            self.end_headers()

        do_GET = do_PUT  # noqa: N815

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Imds)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = json.loads(sys.argv[1])
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[k]
    os.environ.update(
        env,
        AWS_EC2_METADATA_SERVICE_ENDPOINT=f"http://127.0.0.1:{srv.server_port}",
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
    )
    out: dict = {}
    t0 = time.monotonic()
    import pyarrow.fs

    s3 = (
        pyarrow.fs.S3FileSystem(endpoint_override=env.get("AWS_ENDPOINT_URL_S3"), scheme="http")
        if env.get("AWS_ENDPOINT_URL_S3")
        else pyarrow.fs.S3FileSystem()
    )
    out["pyarrow_region"] = s3.region
    if len(sys.argv) > 2:
        out["pyarrow_listing"] = [i.path for i in s3.get_file_info(pyarrow.fs.FileSelector(sys.argv[2]))]
    out["pyarrow_s"] = round(time.monotonic() - t0, 2)
    import botocore.session

    session = botocore.session.get_session()
    creds = session.get_credentials()
    out["botocore_region"] = session.get_config_variable("region")
    out["botocore_credentials"] = creds.method if creds else None
    out["imds_requests"] = len(hits)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
