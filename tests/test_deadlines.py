"""Every wait has a deadline: each command (and reader) that talks to a network peer, against a server on loopback
that accepts the connection and never answers (a stuck ``kubectl port-forward``, a wedged API server). Each must
end, in the time docs/cli.md ("Deadlines") gives, with its documented exit code or answer, never hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.silent_server import silent_server

EXE = Path(sys.executable).with_name("ray-efa-eks")


@pytest.fixture()
def silent():
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte; yields its port."""
    with silent_server("127.0.0.1") as port:
        yield port


def _ca(tmp_path: Path) -> Path:
    """A service-account directory with a token and a CA bundle (any PEM loads; the handshake never completes)."""
    import certifi

    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("t0ken\n")
    (sa / "ca.crt").write_text(Path(certifi.where()).read_text())
    return sa


@pytest.mark.parametrize("how", ["--address", "RAY_ADDRESS"])
def test_efa_check_against_a_silent_gcs_is_unreachable_within_its_wait(silent, how):
    t0 = time.monotonic()
    where = f"127.0.0.1:{silent}"
    argv, env = (["--address", where], os.environ) if how == "--address" else ([], {**os.environ, "RAY_ADDRESS": where})
    r = subprocess.run(
        [str(EXE), "efa-check", "--json", *argv, "--wait-s", "5"], capture_output=True, text=True, timeout=120, env=env
    )
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stdout + r.stderr
    failure = json.loads(r.stdout)["failure"]
    assert failure["stage"] == "unreachable" and "did not answer within 5 s" in failure["reason"]
    assert where in failure["reason"]
    assert took < 60 and "Traceback" not in r.stderr


def test_preflight_against_a_silent_endpoint_is_exit_2_in_its_deadline(silent):
    t0 = time.monotonic()
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    r = subprocess.run(
        [str(EXE), "preflight", "--region", "us-east-1", "--endpoint-url", f"http://127.0.0.1:{silent}"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    took = time.monotonic() - t0
    assert r.returncode == 2 and "timeout" in (r.stdout + r.stderr).lower(), r.stdout + r.stderr
    assert took < 45 and "Traceback" not in r.stderr


def test_node_check_against_a_silent_api_server_is_exit_2(silent, tmp_path, monkeypatch, capsys):
    from ray_efa_eks.efacheck import node_api
    from ray_efa_eks.efacheck import node_check as nc

    monkeypatch.setattr(node_api, "TOKEN_DIR", str(_ca(tmp_path)))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(silent))
    t0 = time.monotonic()
    code = nc.main(["--node", "n", "--expect-devices", "1", "--once", "--sysfs", str(tmp_path)])
    assert code == nc.EXIT_API and time.monotonic() - t0 < 30
    assert "timed out" in capsys.readouterr().out.lower()


def test_image_fleet_against_a_silent_api_server_ends_within_its_wait(silent, tmp_path, monkeypatch, capsys):
    from ray_efa_eks.efacheck import image_fleet

    monkeypatch.setattr(image_fleet, "SA_DIR", str(_ca(tmp_path)))
    monkeypatch.setattr(image_fleet, "API", f"https://127.0.0.1:{silent}")
    t0 = time.monotonic()
    code = image_fleet.main(
        ["--namespace", "ray", "--cluster", "ray", "--expect-pods", "2", "--wait-s", "3", "--poll-s", "1"]
    )
    took = time.monotonic() - t0
    out = json.loads(capsys.readouterr().out)["image_fleet"]
    assert out["verdict"] == "undetermined" and "cannot list the Ray pods" in out["failure"]["reason"]
    assert code != 0 and took < 10  # --wait-s 3: a list in flight is not let run to its own 30 s


def test_the_counter_witness_against_a_silent_exporter_says_no_answer(silent):
    from ray_efa_eks.efacheck import efa_counters

    t0 = time.monotonic()
    v = efa_counters.read_view((("exporter", f"http://127.0.0.1:{silent}/metrics"),))
    assert v["view"] is None and "no answer" in v["unreadable"] and "timed out" in v["unreadable"]
    assert time.monotonic() - t0 < efa_counters.EXPORTER_TIMEOUT_S + 5
