"""The node agent's EFA exporter on kernel-shaped sysfs trees (class entries are symlinks into ../../devices)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from ray_efa_eks.efacheck import efa_exporter
from tests.helpers.sysfs import (
    EFA_PORT_COUNTERS,
    EFA_VERSION,
    G6_12XLARGE,
    P5_48XLARGE,
    efa_device,
    kernel_sysfs,
    port_dir,
    write_counter,
)

GB = 10**9
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], str]:
    """{(metric, sorted labels): value} of a text exposition (comment lines checked for shape)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* \S", line), line
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
        out[(m.group(1), labels)] = m.group(3)
    return out


def value(samples: dict, metric: str, **labels: str) -> str | None:
    want = tuple(sorted(labels.items()))
    hits = [v for (m, ls), v in samples.items() if m == metric and set(want) <= set(ls)]
    assert len(hits) <= 1, (metric, labels, hits)
    return hits[0] if hits else None


@pytest.fixture()
def served(tmp_path: Path):
    """An exporter over a g6.12xlarge-shaped tree, on loopback; yields (sysfs root, base url, exporter)."""
    sysfs = kernel_sysfs(tmp_path / "sys", counters={"rdmap0s30": {"tx_bytes": 7 * GB, "rx_bytes": 7 * GB + 1}})
    exp = efa_exporter.Exporter(str(sysfs), "ip-10-0-1-23.ec2.internal")
    server = efa_exporter.serve(exp, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield sysfs, f"http://127.0.0.1:{server.server_address[1]}", exp
    server.shutdown()
    server.server_close()


def get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.headers["Content-Type"], r.read().decode()


def test_every_port_counter_file_is_a_labelled_counter(served) -> None:
    sysfs, url, _ = served
    status, ctype, text = get(url + "/metrics")
    assert status == 200 and ctype == efa_exporter.CONTENT_TYPE
    s = parse(text)
    node = "ip-10-0-1-23.ec2.internal"
    for name in EFA_PORT_COUNTERS:
        assert f"# TYPE efa_{name}_total counter" in text
        assert value(s, f"efa_{name}_total", node=node, device="rdmap0s30", port="1") is not None, name
    assert value(s, "efa_tx_bytes_total", device="rdmap0s30") == str(7 * GB)
    assert value(s, "efa_rx_bytes_total", device="rdmap0s30") == str(7 * GB + 1)
    assert value(s, "efa_hw_counters_lifespan_seconds", device="rdmap0s30") == "0.01"  # lifespan is not a counter
    assert "efa_lifespan_total" not in text
    assert value(s, "efa_devices", node=node) == "1"
    assert value(s, "efa_info", node=node, driver_version=EFA_VERSION) == "1"
    assert value(s, "efa_module_loaded", node=node) == "1"
    assert value(s, "efa_exporter_read_errors_total", node=node) == "0"
    # the device-level <dev>/hw_counters (admin-command counters; reading it in a namespace oopsed 5.14..fix) never
    assert "efa_submitted_cmds_total" not in text and "efa_keep_alive_rcvd_total" not in text
    assert get(url + "/healthz")[2] == "ok\n"


def test_series_of_a_g6_12xlarge_node(served) -> None:
    """The figure docs/observability.md states: 22 port counters + lifespan + 7 per-node series."""
    _, url, _ = served
    s = parse(get(url + "/metrics")[2])
    per_port = [k for k in s if ("device", "rdmap0s30") in k[1]]
    assert len(per_port) == len(EFA_PORT_COUNTERS) + 1 == 23
    assert len(s) == 23 + 7, sorted(m for m, _ in s)


def test_follows_the_counters_between_scrapes(served) -> None:
    sysfs, url, exp = served
    before = parse(get(url + "/metrics")[2])
    write_counter(sysfs, "rdmap0s30", "tx_bytes", 7 * GB + 3 * GB)
    write_counter(sysfs, "rdmap0s30", "retrans_bytes", 4096)
    after = parse(get(url + "/metrics")[2])
    assert (
        int(value(after, "efa_tx_bytes_total", device="rdmap0s30"))
        - int(value(before, "efa_tx_bytes_total", device="rdmap0s30"))
        == 3 * GB
    )
    assert value(after, "efa_retrans_bytes_total", device="rdmap0s30") == "4096"


def test_exact_integers_past_2_to_the_53(served) -> None:
    sysfs, url, _ = served
    big = 2**63 + 12345  # u64 counter past float64's exact range
    write_counter(sysfs, "rdmap0s30", "rx_bytes", big)
    assert value(parse(get(url + "/metrics")[2]), "efa_rx_bytes_total", device="rdmap0s30") == str(big)


def test_a_device_that_goes_away_and_one_that_comes(tmp_path: Path) -> None:
    sysfs = kernel_sysfs(tmp_path / "sys", devices=P5_48XLARGE[:2])
    exp = efa_exporter.Exporter(str(sysfs), "n")
    first = parse(exp.scrape())
    assert value(first, "efa_devices") == "2"
    gone, _ = P5_48XLARGE[1]
    (sysfs / "class" / "infiniband" / gone).unlink()  # hot-unplug: the class entry goes first
    second = parse(exp.scrape())
    assert value(second, "efa_devices") == "1" and value(second, "efa_tx_bytes_total", device=gone) is None
    assert value(second, "efa_exporter_read_errors_total") == "0"  # a missing device is not an error


def test_unreadable_files_are_counted_and_the_rest_still_served(tmp_path: Path) -> None:
    sysfs = kernel_sysfs(tmp_path / "sys")
    hw = port_dir(sysfs, "rdmap0s30") / "hw_counters"
    (hw / "rx_drops").unlink()
    (hw / "rx_drops").mkdir()  # open() fails whoever reads it (root reads any mode, so a directory)
    (hw / "send_bytes").write_text("garbage\n")
    exp = efa_exporter.Exporter(str(sysfs), "n")
    s = parse(exp.scrape())
    assert value(s, "efa_rx_drops_total") is None and value(s, "efa_send_bytes_total") is None
    assert value(s, "efa_tx_bytes_total") == "0"
    assert value(s, "efa_exporter_scrape_errors") == "2" and value(s, "efa_exporter_read_errors_total") == "2"
    assert value(parse(exp.scrape()), "efa_exporter_read_errors_total") == "4"  # over the exporter's life


def test_the_class_tree_alone_reads_nothing(tmp_path: Path) -> None:
    """Why the node agent mounts /sys/devices too: without it every class entry is a dangling symlink."""
    host = kernel_sysfs(tmp_path / "host")
    pod = tmp_path / "pod"
    shutil.copytree(host / "class", pod / "class", symlinks=True)
    s = parse(efa_exporter.Exporter(str(pod), "n").scrape())
    assert value(s, "efa_devices") == "1" and value(s, "efa_tx_bytes_total") is None
    assert value(s, "efa_exporter_read_errors_total") == "1"
    assert value(s, "efa_info", driver_version="unknown") == "1" and value(s, "efa_module_loaded") == "0"


def test_only_efa_devices(tmp_path: Path) -> None:
    sysfs = kernel_sysfs(tmp_path / "sys")
    kernel_sysfs(tmp_path / "other", devices=(("mlx5_0", "0000:20:00.0"),), driver="mlx5_core", version=None)
    shutil.copytree(
        tmp_path / "other" / "devices" / "pci0000:00" / "0000:20:00.0",
        sysfs / "devices" / "pci0000:00" / "0000:20:00.0",
        symlinks=True,
    )
    (sysfs / "class" / "infiniband" / "mlx5_0").symlink_to("../../devices/pci0000:00/0000:20:00.0/infiniband/mlx5_0")
    s = parse(efa_exporter.Exporter(str(sysfs), "n").scrape())
    assert value(s, "efa_devices") == "1" and value(s, "efa_tx_bytes_total", device="mlx5_0") is None


def test_label_values_are_escaped(tmp_path: Path) -> None:
    sysfs = kernel_sysfs(tmp_path / "sys", version='2.1"x\\y')
    text = efa_exporter.Exporter(str(sysfs), "n").scrape()
    assert 'driver_version="2.1\\"x\\\\y"' in text


def test_metric_names_round_trip() -> None:
    assert efa_exporter.counter_metric("tx_bytes") == "efa_tx_bytes_total"
    assert efa_exporter.counter_file("efa_tx_bytes_total") == "tx_bytes"
    assert efa_exporter.counter_file("efa_exporter_read_errors_total") is None
    assert efa_exporter.counter_metric("odd-name.x") == "efa_odd_name_x_total"


def test_promtool_check_metrics_accepts_the_real_output(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package `prometheus`; .ci/run installs it)")
    sysfs = kernel_sysfs(tmp_path / "sys", devices=P5_48XLARGE[:4], counters={"rdmap16s0": {"tx_bytes": 5}})
    text = efa_exporter.Exporter(str(sysfs), "ip-10-0-1-23.ec2.internal").scrape()
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout + out.stderr == "", out.stdout + out.stderr
    # and it does object to a counter without _total (so the check can fail)
    bad = text.replace("efa_tx_bytes_total", "efa_tx_bytes")
    out = subprocess.run([promtool, "check", "metrics"], input=bad, capture_output=True, text=True, timeout=60)
    assert "efa_tx_bytes" in out.stdout + out.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_command_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    """``ray-efa-eks efa-exporter --sysfs ROOT --port PORT`` as the DaemonSet runs it (in its own process)."""
    sysfs = kernel_sysfs(tmp_path / "sys", counters={"rdmap0s30": {"tx_bytes": 11}})
    port = _free_port()
    exe = Path(sys.executable).with_name("ray-efa-eks")
    proc = subprocess.Popen(
        [str(exe), "efa-exporter", "--sysfs", str(sysfs), "--port", str(port), "--host", "127.0.0.1"],
        env={**os.environ, "NODE_NAME": "node-a"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                text = get(f"http://127.0.0.1:{port}/metrics")[2]
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.1)
        assert value(parse(text), "efa_tx_bytes_total", node="node-a", device="rdmap0s30") == "11"
        write_counter(sysfs, "rdmap0s30", "tx_bytes", 12)
        assert value(parse(get(f"http://127.0.0.1:{port}/metrics")[2]), "efa_tx_bytes_total") == "12"
        # a second one on the same port cannot serve: 3, one line, no traceback
        busy = subprocess.run(
            [str(exe), "efa-exporter", "--sysfs", str(sysfs), "--port", str(port), "--host", "127.0.0.1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert busy.returncode == 3 and "cannot listen on 127.0.0.1" in busy.stderr
        assert "Traceback" not in busy.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "serving http://127.0.0.1" in out and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, code, says",
    [
        (["--sysfs", "{tmp}/nope"], 3, "not a directory"),
        (["--port", "70000"], 64, "70000 is not a port number"),
        (["--port", "http"], 64, "'http' is not a port number"),
    ],
)
def test_bad_arguments(tmp_path: Path, capsys, argv, code, says) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        rc = efa_exporter.main(argv, prog="ray-efa-eks efa-exporter")
    except SystemExit as e:
        rc = e.code
    assert rc == code and says in capsys.readouterr().err


def test_no_devices_is_zero_not_an_error(tmp_path: Path) -> None:
    s = parse(efa_exporter.Exporter(str(kernel_sysfs(tmp_path / "sys", devices=())), "n").scrape())
    assert value(s, "efa_devices") == "0" and value(s, "efa_exporter_read_errors_total") == "0"
    name, pci = efa_device(16, 27)
    assert (name, pci) == ("rdmap16s27", "0000:10:1b.0") and G6_12XLARGE[0][0] == "rdmap0s30"
