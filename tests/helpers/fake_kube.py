"""A small fake Kubernetes API on 127.0.0.1 for ``ray-efa-eks rayjob``: it takes the ConfigMap and the RayJob, and the
RayJob's status walks through a script of statuses, one GET at a time (the last one stays)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeKube:
    """Answers the calls ``rayjob`` makes; the RayJob's status walks through ``statuses`` one GET at a time."""

    def __init__(self, statuses, create_status=201, log=""):
        self.statuses, self.create_status, self.log, self.calls = list(statuses), create_status, log, []
        self.job: dict = {"metadata": {"name": "run1", "labels": {"kueue.x-k8s.io/queue-name": "team-vision"}}}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code, body):
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.calls.append(("POST", self.path, body, self.headers.get("Authorization")))
                if self.path.endswith("/rayjobs"):
                    fake.job = body
                    return self._send(
                        fake.create_status,
                        {"message": "forbidden: User cannot create rayjobs"} if fake.create_status == 403 else body,
                    )
                self._send(201, body)

            def do_GET(self):
                fake.calls.append(("GET", self.path, None, self.headers.get("Authorization")))
                if "/rayjobs/" in self.path:
                    st = dict(fake.statuses.pop(0) if len(fake.statuses) > 1 else fake.statuses[0])
                    suspend = st.pop("_suspend", False) if isinstance(st, dict) else False
                    return self._send(
                        200, {"metadata": fake.job["metadata"], "spec": {"suspend": suspend}, "status": st}
                    )
                if "/pods?" in self.path:
                    return self._send(200, {"items": [{"metadata": {"name": "run1-abcde"}}]})
                if "/log" in self.path:
                    return self._send(200, fake.log)
                self._send(404, {"message": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
