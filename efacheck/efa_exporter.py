"""The node agent's EFA exporter: every EFA port ``hw_counters`` file, in the Prometheus text format.

One reader of host counters: the node agent DaemonSet (components/addons/node_agent.py) runs this on every EFA
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
  exporter's life; ``efa_exporter_scrape_errors{node}`` (gauge): how many in the last scrape;
  ``efa_exporter_scrape_truncated{node}`` 1 when the last read stopped at its time budget.

A node's files are not trusted (efa_counters.read_counter, read_ports): only regular files are opened, a bounded
number of bytes, files and directory entries is read, a value must be an unsigned 64-bit integer, and an odd file
is one read error while the rest is served; a read stops at :data:`SCRAPE_BUDGET_S`. The server has a listen
backlog of :data:`LISTEN_BACKLOG`, closes a connection silent for :data:`IDLE_TIMEOUT_S`, and answers ``/metrics``
even when reading raised (docs/observability.md, "What it reads, and its limits").

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
from .efa_counters import MAX_FILES_PER_PORT  # noqa: F401 - the exporter's limits, documented with it
from .cli import ArgumentParser
from .exit_codes import EXIT_INTERRUPTED, EXIT_UNREADABLE as EXIT_CANNOT_SERVE

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
SCRAPE_BUDGET_S = 5.0
"""How long one sysfs read may take: half Prometheus' default ``scrape_timeout`` (10 s), so a slow tree is served in
part, and says so, before Prometheus gives up on the whole scrape."""
IDLE_TIMEOUT_S = 10.0
"""A connection silent this long is closed (the kubelet's probes wait 3 s, Prometheus its scrape_timeout)."""
LISTEN_BACKLOG = 1024
"""The listen queue: Prometheus' scrapes and the kubelet's probes arrive together; 5 (socketserver's default)
dropped 59 of 200 concurrent scrapes."""
VERSION_MAX_BYTES = 256
"""The efa module's version file is read for at most this many bytes."""
LIFESPAN = "lifespan"
"""The one non-counter file of every ``hw_counters`` directory (RDMA core: ms the hardware stats are cached)."""
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def counter_metric(file: str) -> str:
    """``tx_bytes`` -> ``efa_tx_bytes_total`` (characters a metric name cannot have become ``_``)."""
    return f"efa_{_INVALID.sub('_', file)}_total"


def counter_file(metric: str) -> str | None:
    """``efa_tx_bytes_total`` -> ``tx_bytes``; None for a metric that is not a per-file counter."""
    if metric.startswith("efa_") and metric.endswith("_total") and metric != "efa_exporter_read_errors_total":
        return metric[len("efa_") : -len("_total")]
    return None


def _escape(value: str) -> str:
    """A label value as the text format wants it (bytes that are not UTF-8 shown as ``\\udcff``)."""
    value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _read_version(path: str) -> tuple[bool, str | None, str | None]:
    """(module loaded, version or None, error or None) from ``<...>/module/efa/version`` (read as a counter file is:
    a regular file, at most :data:`VERSION_MAX_BYTES`; printable ASCII kept)."""
    loaded = os.path.isdir(os.path.dirname(path))
    try:
        raw = efa_counters.read_small(path, VERSION_MAX_BYTES)
    except FileNotFoundError:
        return loaded, None, None  # not loaded, or an in-tree driver without MODULE_VERSION: not a read error
    except (OSError, ValueError) as e:
        return loaded, None, f"{path}: {getattr(e, 'strerror', None) or e}"
    text = "".join(c if c.isprintable() else "?" for c in raw.decode("ascii", "replace").strip())
    return True, text or None, None


OWN_METRICS = ("efa_exporter_read_errors_total",)
"""Per-node series of the exporter whose names a counter file could also map to: such a file is not served."""


class Exporter:
    """Reads a sysfs tree per scrape and renders it; counts read errors over its life (thread-safe).

    Scrapes that arrive while a read is in flight share that read (200 at once cost one tree walk), and a read stops
    at ``budget_s`` (what it read so far is served, ``efa_exporter_scrape_truncated`` 1)."""

    def __init__(
        self, sysfs: str, node: str, module_version_file: str | None = None, budget_s: float = SCRAPE_BUDGET_S
    ) -> None:
        self.sysfs = sysfs
        self.class_root = os.path.join(sysfs, CLASS_PATH)
        self.version_file = module_version_file or os.path.join(sysfs, MODULE_VERSION_PATH)
        self.node = node
        self.budget_s = budget_s
        self.read_errors = 0
        self._lock = threading.Lock()
        self._turn = threading.Condition()
        self._reading = False
        self._generation = 0
        self._last: dict[str, Any] | None = None

    def collect(self) -> dict[str, Any]:
        """One read of the tree: {"series": [(metric, kind, help, labels, value)], "loaded", "version", "errors",
        "truncated", "seconds"}; adds its errors to the life count."""
        t0 = time.monotonic()
        problems: dict[str, str] = {}
        ports = efa_counters.read_ports(self.class_root, t0 + self.budget_s, problems)
        errors = [f"{path}: {why}" for entry in ports.values() for path, why in entry["errors"].items()]
        errors += [f"{path}: {why}" for path, why in problems.items()]
        loaded, version, err = _read_version(self.version_file)
        if err:
            errors.append(err)
        series: list[tuple[str, str, str, dict[str, str], str]] = []
        seen: set[tuple[str, str, str]] = set()
        for dev, entry in ports.items():
            for port, values in entry["ports"].items():
                labels = {"node": self.node, "device": dev, "port": port}
                for file, value in values.items():
                    if file == LIFESPAN:
                        series.append(
                            (
                                "efa_hw_counters_lifespan_seconds",
                                "gauge",
                                "How long the kernel caches the "
                                "EFA port's hardware counters (hw_counters/lifespan, ms in sysfs).",
                                labels,
                                repr(value / 1000),
                            )
                        )
                        continue
                    metric = counter_metric(file)
                    if metric in OWN_METRICS or (metric, dev, port) in seen:
                        errors.append(
                            f"{os.path.join(self.class_root, dev, 'ports', port, 'hw_counters', file)}: "
                            f"its metric {metric} is already served for this port: not served"
                        )
                        continue
                    seen.add((metric, dev, port))
                    series.append(
                        (
                            metric,
                            "counter",
                            f"EFA port hw_counters/{file}, read from sysfs at each scrape.",
                            labels,
                            str(value),
                        )
                    )
        with self._lock:
            self.read_errors += len(errors)
        return {
            "series": series,
            "devices": len(ports),
            "loaded": loaded,
            "version": version,
            "errors": errors,
            "truncated": efa_counters.BUDGET in problems,
            "seconds": time.monotonic() - t0,
        }

    def _shared(self) -> dict[str, Any]:
        """The read in flight when one is (waiting at most its budget and a second for it), else a new one."""
        with self._turn:
            if self._reading:
                generation = self._generation
                if self._turn.wait_for(lambda: self._generation != generation, self.budget_s + 1.0) and self._last:
                    return self._last
                mine = False  # the read in flight did not end in time (a kernel read that blocks): read alone
            else:
                self._reading = mine = True
        if not mine:
            return self.collect()
        c = None
        try:
            c = self.collect()
        finally:
            with self._turn:
                self._reading, self._last = False, c
                self._generation += 1
                self._turn.notify_all()
        return c

    def scrape(self) -> str:
        """The text exposition of the tree as it is now."""
        c = self._shared()
        with self._lock:
            total_errors = self.read_errors
        node = {"node": self.node}
        families: dict[str, tuple[str, str, list[tuple[dict[str, str], str]]]] = {}

        def add(name: str, kind: str, help_: str, labels: dict[str, str], value: Any) -> None:
            families.setdefault(name, (kind, help_, []))[2].append((labels, str(value)))

        for name, kind, help_, labels, value in c["series"]:
            add(name, kind, help_, labels, value)
        add("efa_devices", "gauge", "EFA devices under /sys/class/infiniband.", node, c["devices"])
        add(
            "efa_info",
            "gauge",
            "The efa kernel module's version (unknown: the module states none).",
            {**node, "driver_version": c["version"] or "unknown"},
            1,
        )
        add(
            "efa_module_loaded",
            "gauge",
            "1 when the efa kernel module is loaded (/sys/module/efa).",
            node,
            int(c["loaded"]),
        )
        add(
            "efa_exporter_read_errors_total",
            "counter",
            "Counter files or directories the exporter could not read, since it started.",
            node,
            total_errors,
        )
        add(
            "efa_exporter_scrape_errors",
            "gauge",
            "Files or directories the last scrape could not read.",
            node,
            len(c["errors"]),
        )
        add(
            "efa_exporter_scrape_truncated",
            "gauge",
            f"1 when the last sysfs read stopped at its time budget ({self.budget_s:g} s) before reading every file.",
            node,
            int(c["truncated"]),
        )
        add(
            "efa_exporter_scrape_duration_seconds",
            "gauge",
            "Time the last sysfs read took.",
            node,
            f"{c['seconds']:.6f}",
        )
        return _render(families)

    def failed(self, error: BaseException) -> str:
        """What a scrape serves when reading or rendering raised (a bug): the exporter's own series, one error."""
        with self._lock:
            self.read_errors += 1
            total = self.read_errors
        node = {"node": self.node}
        return _render(
            {
                "efa_exporter_read_errors_total": (
                    "counter",
                    "Counter files or directories the exporter could not read, since it started.",
                    [(node, str(total))],
                ),
                "efa_exporter_scrape_errors": (
                    "gauge",
                    "Files or directories the last scrape could not read.",
                    [(node, "1")],
                ),
            }
        )


def _render(families: dict[str, tuple[str, str, list[tuple[dict[str, str], str]]]]) -> str:
    lines: list[str] = []
    for name in sorted(families):
        kind, help_, samples = families[name]
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{_labels(labels)} {value}" for labels, value in samples]
    return "\n".join(lines) + "\n"


def make_handler(exporter: Exporter, idle_timeout_s: float = IDLE_TIMEOUT_S) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "ray-efa-eks-efa-exporter"
        timeout = idle_timeout_s
        """The socket's timeout (StreamRequestHandler.setup): a connection silent this long is closed."""

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if path == METRICS_PATH:
                try:
                    text = exporter.scrape()
                except Exception as e:  # noqa: BLE001 - a scrape always gets a well-formed answer
                    print(f"efa-exporter: scrape failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                    text = exporter.failed(e)
                body, ctype, code = text.encode("utf-8"), CONTENT_TYPE, 200
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    """A connection's thread never holds the process up at exit."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (or timed out) is not worth a traceback on the node agent's log."""
        error = sys.exc_info()[1]
        if not isinstance(error, (ConnectionError, TimeoutError)):
            print(
                f"efa-exporter: request from {client_address[0]}: {type(error).__name__}: {error}",
                file=sys.stderr,
                flush=True,
            )


def serve(
    exporter: Exporter,
    host: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    *,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
    backlog: int = LISTEN_BACKLOG,
) -> ThreadingHTTPServer:
    """A bound server (not yet serving); ``port`` 0 picks a free one (``server.server_address[1]``).

    ``backlog``: the listen queue (the kernel caps it at net.core.somaxconn); ``idle_timeout_s``: a connection that
    sends nothing (or reads nothing) this long is closed, so it holds its thread no longer."""
    server = _Server((host, port), make_handler(exporter, idle_timeout_s), bind_and_activate=False)
    server.request_queue_size = backlog
    try:
        server.server_bind()
        server.server_activate()
    except BaseException:
        server.server_close()
        raise
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
    p = ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0], exit_codes="efa-exporter")
    p.add_argument(
        "--sysfs",
        default="/sys",
        metavar="ROOT",
        help="sysfs root holding class/infiniband and the devices its entries point to (default /sys; "
        "the node agent mounts the host's at /host/sys)",
    )
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: any)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--node", default=None, help=f"the node label (default ${NODE_ENV}, else the host name)")
    p.add_argument(
        "--module-version-file",
        default=None,
        metavar="PATH",
        help=f"the efa module's version file (default ROOT/{MODULE_VERSION_PATH}; /sys/module is not "
        "namespaced, so the node agent reads its own /sys/module/efa/version)",
    )
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
