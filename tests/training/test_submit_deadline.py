"""Every request `submit` makes has a deadline: a Jobs API that accepts the connection and never answers (a stuck
`kubectl port-forward`) ends `submit` with exit 2 and a message within the documented time (docs/cli.md), instead
of waiting for ever."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from ray_efa_eks.tools import command
from ray_efa_eks.training import __main__ as train_cli


@pytest.fixture
def silent_server():
    """Accepts every connection, reads nothing, answers nothing."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


def test_submit_to_a_server_that_never_answers_exits_2_in_time(silent_server, capsys, monkeypatch):
    monkeypatch.setattr(train_cli, "REQUEST_TIMEOUT_S", 3.0, raising=False)  # the figure is docs/cli.md's; 3 s keeps the test short
    t0 = time.monotonic()
    code = command.main(["submit", "--address", f"http://127.0.0.1:{silent_server}", "--", "--steps", "5"])
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no answer within 3 s" in err and f"127.0.0.1:{silent_server}" in err, err
    assert took < 60, f"took {took:.1f} s"  # 3 s per request, plus importing Ray and torch on a loaded 2-core box


def test_the_documented_figures_are_the_code_s():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs/cli.md").read_text()
    for figure in (train_cli.PROBE_TIMEOUT_S, train_cli.REQUEST_TIMEOUT_S, train_cli.UPLOAD_TIMEOUT_S):
        assert f"{figure:g} s" in text, figure
