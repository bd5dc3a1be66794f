"""The node agent's EFA exporter: every EFA port ``hw_counters`` file, in the Prometheus text format.

One reader of host counters (issue 36): the node agent DaemonSet (components/node_agent.py) runs this on every EFA
node with the host's ``/sys/class/infiniband`` and ``/sys/devices`` mounted read-only under ``--sysfs`` (the class
entries are symlinks into ``../../devices``; a pod's own ``/sys`` has no port counters, see efa_counters.py). Ray
pods and Prometheus read the counters over HTTP instead of mounting the host's sysfs.

Served at ``/metrics`` (``/healthz`` answers ``ok``), re-read from sysfs on every scrape (nothing cached, so a scrape
always sees the counters as they are), labelled ``node`` (``--node``, default ``$NODE_NAME``, else the host name),
``device`` and ``port``:

- ``efa_<file>_total`` (counter): one metric per port ``hw_counters`` file, e.g. ``efa_tx_bytes_total``,
  ``efa_rx_bytes_total``, ``efa_rdma_write_bytes_total``, ``efa_retrans_bytes_total``,
  ``efa_impaired_remote_conn_events_total``: whatever the driver exposes (22 files on current kernels and Nitro
  v4+; older ones lack the RDMA-write and network groups).
- ``efa_hw_counters_lifespan_seconds`` (gauge): the ``lifespan`` file is not a counter but how long (ms in sysfs) the
  kernel caches the hardware's reply (drivers/infiniband/core/sysfs.c).
- ``efa_info{node,driver_version}`` 1: the efa kernel module's version (``unknown`` when the module has none);
  ``efa_module_loaded{node}`` 1/0; ``efa_devices{node}``: EFA devices under ``class/infiniband``.
- ``efa_exporter_read_errors_total{node}`` (counter): files or directories that could not be read, over the
  exporter's life; ``efa_exporter_scrape_errors{node}`` (gauge): how many in the last scrape.

Values are written as exact integers (a 64-bit byte counter passes 2^53 after ~8 days at 100 Gbit/s; the witness
parses them back exactly). Stdlib only (``http.server``): it runs from the ConfigMap in the DLC image, like the gate.

Exit codes: 0 stopped by SIGTERM, 3 cannot serve (``--sysfs`` is not a directory, the port cannot be bound),
64 usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import efa_counters
from .cli import ArgumentParser

DEFAULT_PORT = 9810
"""The node agent's exporter port (container and Service)."""
METRICS_PATH = "/metrics"
HEALTH_PATH = "/healthz"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus text exposition format 0.0.4."""
NODE_ENV = "NODE_NAME"
"""Set from the downward API (``spec.nodeName``) in the DaemonSet: the ``node`` label."""
CLASS_PATH = "class/infiniband"
MODULE_VERSION_PATH = "module/efa/version"
EXIT_CANNOT_SERVE = 3
EXIT_INTERRUPTED = 130
LIFESPAN = "lifespan"
"""The one non-counter file of every ``hw_counters`` directory (RDMA core: ms the hardware stats are cached)."""
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def counter_metric(file: str) -> str:
    """``tx_bytes`` -> ``efa_tx_bytes_total`` (characters a metric name cannot have become ``_``)."""
    return f"efa_{_INVALID.sub('_', file)}_total"


def counter_file(metric: str) -> str | None:
    """``efa_tx_bytes_total`` -> ``tx_bytes``; None for a metric that is not a per-file counter."""
    if metric.startswith("efa_") and metric.endswith("_total") and metric != "efa_exporter_read_errors_total":
        return metric[len("efa_"):-len("_total")]
    return None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _read_version(path: str) -> tuple[bool, str | None, str | None]:
    """(module loaded, version or None, error or None) from ``<...>/module/efa/version``."""
    loaded = os.path.isdir(os.path.dirname(path))
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return True, f.read().strip() or None, None
    except FileNotFoundError:
        return loaded, None, None  # not loaded, or an in-tree driver without MODULE_VERSION: not a read error
    except OSError as e:
        return loaded, None, f"{path}: {getattr(e, 'strerror', None) or e}"


class Exporter:
    """Reads a sysfs tree per scrape and renders it; counts read errors over its life (thread-safe)."""

    def __init__(self, sysfs: str, node: str, module_version_file: str | None = None) -> None:
        self.sysfs = sysfs
        self.class_root = os.path.join(sysfs, CLASS_PATH)
        self.version_file = module_version_file or os.path.join(sysfs, MODULE_VERSION_PATH)
        self.node = node
        self.read_errors = 0
        self._lock = threading.Lock()

    def collect(self) -> dict[str, Any]:
        """One read of the tree: {"ports": efa_counters.read_ports(...), "loaded", "version", "errors": [...]}."""
        ports = efa_counters.read_ports(self.class_root)
        errors = [f"{path}: {why}" for entry in ports.values() for path, why in entry["errors"].items()]
        loaded, version, err = _read_version(self.version_file)
        if err:
            errors.append(err)
        return {"ports": ports, "loaded": loaded, "version": version, "errors": errors}

    def scrape(self) -> str:
        """The text exposition of the tree as it is now."""
        t0 = time.monotonic()
        c = self.collect()
        with self._lock:
            self.read_errors += len(c["errors"])
            total_errors = self.read_errors
        node = {"node": self.node}
        families: dict[str, tuple[str, str, list[tuple[dict[str, str], str]]]] = {}

        def add(name: str, kind: str, help_: str, labels: dict[str, str], value: Any) -> None:
            families.setdefault(name, (kind, help_, []))[2].append((labels, str(value)))

        for dev, entry in c["ports"].items():
            for port, values in entry["ports"].items():
                labels = {**node, "device": dev, "port": port}
                for file, value in values.items():
                    if file == LIFESPAN:
                        add("efa_hw_counters_lifespan_seconds", "gauge", "How long the kernel caches the EFA "
                            "port's hardware counters (hw_counters/lifespan, ms in sysfs).", labels,
                            repr(value / 1000))
                    else:
                        add(counter_metric(file), "counter", f"EFA port hw_counters/{file}, read from sysfs at "
                            "each scrape.", labels, value)
        add("efa_devices", "gauge", "EFA devices under /sys/class/infiniband.", node, len(c["ports"]))
        add("efa_info", "gauge", "The efa kernel module's version (unknown: the module states none).",
            {**node, "driver_version": c["version"] or "unknown"}, 1)
        add("efa_module_loaded", "gauge", "1 when the efa kernel module is loaded (/sys/module/efa).", node,
            int(c["loaded"]))
        add("efa_exporter_read_errors_total", "counter", "Counter files or directories the exporter could not "
            "read, since it started.", node, total_errors)
        add("efa_exporter_scrape_errors", "gauge", "Files or directories the last scrape could not read.", node,
            len(c["errors"]))
        add("efa_exporter_scrape_duration_seconds", "gauge", "Time the last sysfs read took.", node,
            f"{time.monotonic() - t0:.6f}")
        lines: list[str] = []
        for name in sorted(families):
            kind, help_, samples = families[name]
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
            lines += [f"{name}{_labels(labels)} {value}" for labels, value in samples]
        return "\n".join(lines) + "\n"


def make_handler(exporter: Exporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "ray-efa-eks-efa-exporter"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if path == METRICS_PATH:
                body, ctype, code = exporter.scrape().encode(), CONTENT_TYPE, 200
            elif path == HEALTH_PATH:
                body, ctype, code = b"ok\n", "text/plain; charset=utf-8", 200
            elif path == "/":
                body, ctype, code = f"EFA exporter: {METRICS_PATH}\n".encode(), "text/plain; charset=utf-8", 200
            else:
                body, ctype, code = b"not found\n", "text/plain; charset=utf-8", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - scrapes are not worth a log line
            return

    return Handler


def serve(exporter: Exporter, host: str = "0.0.0.0", port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """A bound server (not yet serving); ``port`` 0 picks a free one (``server.server_address[1]``)."""
    server = ThreadingHTTPServer((host, port), make_handler(exporter))
    server.daemon_threads = True
    return server


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0-65535)")
    return value


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                       exit_codes="efa-exporter")
    p.add_argument("--sysfs", default="/sys", metavar="ROOT",
                   help="sysfs root holding class/infiniband and the devices its entries point to (default /sys; "
                        "the node agent mounts the host's at /host/sys)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: any)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--node", default=None, help=f"the node label (default ${NODE_ENV}, else the host name)")
    p.add_argument("--module-version-file", default=None, metavar="PATH",
                   help=f"the efa module's version file (default ROOT/{MODULE_VERSION_PATH}; /sys/module is not "
                        "namespaced, so the node agent reads its own /sys/module/efa/version)")
    a = p.parse_args(argv)
    if not os.path.isdir(a.sysfs):
        print(f"{p.prog}: error: --sysfs {a.sysfs}: not a directory", file=sys.stderr)
        return EXIT_CANNOT_SERVE
    node = a.node or os.environ.get(NODE_ENV) or socket.gethostname()
    exporter = Exporter(a.sysfs, node, a.module_version_file)
    try:
        server = serve(exporter, a.host, a.port)
    except OSError as e:
        print(f"{p.prog}: error: cannot listen on {a.host}:{a.port}: {e.strerror or e}", file=sys.stderr)
        return EXIT_CANNOT_SERVE
    stopped = threading.Event()

    def on_term(signum: int, frame: Any) -> None:
        stopped.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    host, port = server.server_address[:2]
    print(f"efa-exporter: node {node}, sysfs {a.sysfs}, serving http://{host}:{port}{METRICS_PATH}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print(f"{p.prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
