"""The node agent's exporter and the node check on hostile sysfs trees, and the exporter as a server under load.

Each tree is a kernel-shaped p5 tree of two devices (tests/helpers/sysfs.py) with one thing made odd: a value out of
a 64-bit counter's range or not an integer, a FIFO, a device, a symlink loop, a file without permissions, a huge
file, odd names. Whatever the tree holds, every scrape must get a well-formed ``/metrics`` in time (promtool-clean,
no duplicate series, counters unsigned 64-bit integers) with the odd file refused and counted, the other device's
counters still served; the node check must decide without hanging or raising.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

import pytest

from ray_efa_eks.efacheck import efa_exporter
from ray_efa_eks.efacheck import node_check as nc
from tests.helpers.sysfs import P5_48XLARGE, kernel_sysfs, port_dir

HOSTILE, HEALTHY = P5_48XLARGE[0][0], P5_48XLARGE[1][0]
SCRAPE_TIMEOUT_S = 15
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def well_formed(text: str) -> dict[tuple[str, tuple], str]:
    """{(metric, labels): value}; asserts the shape promtool does not check: no duplicate series, counters whole
    numbers 0..2^64-1, every sample's family declared once with HELP and TYPE."""
    out: dict[tuple[str, tuple], str] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert name not in types, f"family {name} declared twice"
            types[name] = kind
            continue
        if line.startswith("#"):
            assert re.match(r"^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* \S", line), line
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        key = (m.group(1), tuple(sorted(LABEL.findall(m.group(2) or ""))))
        assert key not in out, f"duplicate series {line!r}"
        assert m.group(1) in types, f"{m.group(1)} has no TYPE"
        if types[m.group(1)] == "counter":
            assert re.fullmatch(r"\d+", m.group(3)) and int(m.group(3)) < 2**64, line
        else:
            float(m.group(3))
        out[key] = m.group(3)
    return out


def value(samples: dict, metric: str, **labels: str) -> str | None:
    hits = [v for (m, ls), v in samples.items() if m == metric and set(labels.items()) <= set(ls)]
    assert len(hits) <= 1, (metric, labels, hits)
    return hits[0] if hits else None


def promtool_says(text: str) -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        return ""  # test_efa_exporter.py says it is skipped; the shape checks above still run
    out = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode("utf-8", "surrogateescape"), capture_output=True, timeout=60
    )
    return "" if out.returncode == 0 else (out.stdout + out.stderr).decode(errors="replace") or "rejected"


# -- hostile trees --------------------------------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> None:
    path.unlink()
    path.write_bytes(data)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _link(target: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.unlink()
        path.symlink_to(target)

    return make


def _loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)  # a link to itself: ELOOP


def _no_permission(path: Path) -> None:
    path.chmod(0)


def _huge_file(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(8 << 30)  # 8 GiB, sparse: a reader that reads to EOF runs out of memory


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


FILE_KINDS: dict[str, Callable[[Path], None]] = {
    "10^400": lambda p: _write(p, b"1" + b"0" * 400 + b"\n"),
    "2^64 (one past a 64-bit counter)": lambda p: _write(p, b"%d\n" % 2**64),
    "negative": lambda p: _write(p, b"-5\n"),
    "not an integer": lambda p: _write(p, b"1.5\n"),
    "python's int() spelling": lambda p: _write(p, b"1_000\n"),
    "empty": lambda p: _write(p, b""),
    "binary": lambda p: _write(p, b"\x00\xff\n"),
    "FIFO": _fifo,
    "/dev/zero": _link("/dev/zero"),
    "/dev/urandom": _link("/dev/urandom"),
    "symlink loop": _loop,
    "no permission": _no_permission,
    "8 GiB file": _huge_file,
    "directory": _directory,
}
FILES = ("tx_bytes", "lifespan")


def _tree_case(name: str) -> Callable[[Path], None]:
    def hw(root: Path) -> Path:
        return port_dir(root, HOSTILE) / "hw_counters"

    def odd_device(root: Path, dev: str) -> None:
        cls = root / "class" / "infiniband"
        os.symlink(os.readlink(cls / HOSTILE), os.path.join(os.fsencode(cls), os.fsencode(dev)))
        (cls / HOSTILE).unlink()

    return {
        "hw_counters a symlink loop": lambda r: (shutil.rmtree(hw(r)), hw(r).symlink_to("hw_counters")),
        "ports a FIFO": lambda r: (shutil.rmtree(hw(r).parent.parent), os.mkfifo(hw(r).parent.parent)),
        "class entry a FIFO": lambda r: (
            (r / "class/infiniband" / HOSTILE).unlink(),
            os.mkfifo(r / "class/infiniband" / HOSTILE),
        ),
        "device name not UTF-8": lambda r: odd_device(r, "rdma\udcff0"),
        "device name with quote, backslash, newline": lambda r: odd_device(r, 'rd"m\\a\n0'),
        "counter name with a newline": lambda r: (hw(r) / "odd\nname").write_text("1\n"),
        "counter name not UTF-8": lambda r: Path(os.fsdecode(os.path.join(os.fsencode(hw(r)), b"odd\xff"))).write_text(
            "1\n"
        ),
        "two names for one metric": lambda r: ((hw(r) / "tx-bytes").write_text("2\n"),),
        "the exporter's own metric name": lambda r: (hw(r) / "exporter_read_errors").write_text("9\n"),
        "2000 counter files": lambda r: [(hw(r) / f"c{i:04}").write_text("1\n") for i in range(2000)],
        "module version a FIFO": lambda r: _fifo(r / "module/efa/version"),
        "module version /dev/zero": lambda r: _link("/dev/zero")(r / "module/efa/version"),
    }[name]


TREE_CASES = (
    "hw_counters a symlink loop",
    "ports a FIFO",
    "class entry a FIFO",
    "device name not UTF-8",
    "device name with quote, backslash, newline",
    "counter name with a newline",
    "counter name not UTF-8",
    "two names for one metric",
    "the exporter's own metric name",
    "2000 counter files",
    "module version a FIFO",
    "module version /dev/zero",
)
CASES = [pytest.param(kind, file, id=f"{file}: {kind}") for kind, file in itertools.product(FILE_KINDS, FILES)] + [
    pytest.param(None, name, id=name) for name in TREE_CASES
]


def hostile_tree(tmp_path: Path, kind: str | None, what: str) -> Path:
    if kind == "no permission" and os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    root = kernel_sysfs(
        tmp_path / "sys",
        devices=P5_48XLARGE[:2],
        counters={HEALTHY: {"tx_bytes": 7, "rx_bytes": 8}, HOSTILE: {"rx_bytes": 5}},
    )
    if kind is None:
        _tree_case(what)(root)
    else:
        FILE_KINDS[kind](port_dir(root, HOSTILE) / "hw_counters" / what)
    return root


def serving(exporter: efa_exporter.Exporter, **kw) -> tuple[object, str]:
    server = efa_exporter.serve(exporter, "127.0.0.1", 0, **kw)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def scrape(url: str, timeout: float = SCRAPE_TIMEOUT_S) -> tuple[int, str, str]:
    with urllib.request.urlopen(url + "/metrics", timeout=timeout) as r:
        return r.status, r.headers["Content-Type"], r.read().decode("utf-8", "surrogateescape")


@pytest.mark.parametrize("kind, what", CASES)
def test_every_hostile_tree_gets_a_well_formed_metrics_in_time(tmp_path, kind, what):
    root = hostile_tree(tmp_path, kind, what)
    server, url = serving(efa_exporter.Exporter(str(root), "node-a"))
    try:
        t0 = time.monotonic()
        status, ctype, text = scrape(url)
        took = time.monotonic() - t0
        again = scrape(url)[2]  # and the next scrape too (nothing left half-read)
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200 and ctype == efa_exporter.CONTENT_TYPE and took < SCRAPE_TIMEOUT_S
    assert promtool_says(text) == ""
    s = well_formed(text)
    well_formed(again)
    assert value(s, "efa_tx_bytes_total", device=HEALTHY, port="1") == "7"  # the rest of the node is served
    assert value(s, "efa_rx_bytes_total", device=HEALTHY, port="1") == "8"
    assert int(value(s, "efa_exporter_scrape_errors")) >= 1  # the odd thing is counted, not served
    if kind is not None:
        metric = "efa_hw_counters_lifespan_seconds" if what == "lifespan" else f"efa_{what}_total"
        assert value(s, metric, device=HOSTILE) is None
        assert value(s, "efa_rx_bytes_total", device=HOSTILE) == "5"
    if what == "2000 counter files":
        assert len([k for k in s if k[0].startswith("efa_c")]) <= efa_exporter.MAX_FILES_PER_PORT


@pytest.mark.parametrize("kind, what", CASES)
def test_the_node_check_decides_on_every_hostile_tree(tmp_path, kind, what):
    root = hostile_tree(tmp_path, kind, what)
    got: list = []
    t = threading.Thread(
        target=lambda: got.append(nc.decide(str(root), 2, {nc.EFA_RESOURCE: "2"}, (True, "ok"))), daemon=True
    )
    t.start()
    t.join(SCRAPE_TIMEOUT_S)
    assert got, "the node check did not decide in time (or raised)"
    counters = next(f for f in got[0] if f.check == "counters")
    if kind is not None and what != "lifespan" or what in ("hw_counters a symlink loop", "ports a FIFO"):
        assert not counters.ok and HOSTILE in counters.detail


# -- the server ------------------------------------------------------------------------------------------------------


def test_200_concurrent_scrapes_are_all_answered_in_30_s(tmp_path):
    root = kernel_sysfs(tmp_path / "sys", devices=P5_48XLARGE)
    server, url = serving(efa_exporter.Exporter(str(root), "node-a"))
    answers: list[int] = []
    start = threading.Barrier(200)

    def one() -> None:
        start.wait()
        try:
            status, _, text = scrape(url, timeout=30)
            answers.append(status if "efa_devices{" in text else -1)
        except OSError:
            answers.append(0)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(200)]
    try:
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.1, 30 - (time.monotonic() - t0)))
        took = time.monotonic() - t0
    finally:
        server.shutdown()
        server.server_close()
    assert answers.count(200) == 200, f"{answers.count(200)} of 200 answered in {took:.1f} s"


def test_an_idle_connection_is_closed_and_does_not_stop_scrapes(tmp_path):
    root = kernel_sysfs(tmp_path / "sys", devices=P5_48XLARGE[:1])
    server, url = serving(efa_exporter.Exporter(str(root), "node-a"), idle_timeout_s=1.0)
    port = server.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(50)]
    try:
        assert scrape(url, timeout=10)[0] == 200  # while 50 connections say nothing
        t0 = time.monotonic()
        for s in idle:
            assert s.recv(1) == b""  # closed by the server, not our 10 s timeout
        assert time.monotonic() - t0 < 8
    finally:
        for s in idle:
            s.close()
        server.shutdown()
        server.server_close()


def test_a_scrape_past_its_time_budget_is_cut_short_and_says_so(tmp_path):
    root = kernel_sysfs(tmp_path / "sys", devices=P5_48XLARGE)
    s = well_formed(efa_exporter.Exporter(str(root), "node-a", budget_s=0.0).scrape())
    assert value(s, "efa_exporter_scrape_truncated") == "1" and value(s, "efa_devices") == "32"
    assert len([k for k in s if k[0] == "efa_tx_bytes_total"]) < 32
    full = well_formed(efa_exporter.Exporter(str(root), "node-a").scrape())
    assert value(full, "efa_exporter_scrape_truncated") == "0"
    assert len([k for k in full if k[0] == "efa_tx_bytes_total"]) == 32
