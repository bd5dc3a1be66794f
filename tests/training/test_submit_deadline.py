"""Every request `submit` makes has a deadline: a Jobs API that accepts the connection and never answers (a stuck
`kubectl port-forward`) ends `submit` with exit 2 and a message within the documented time (docs/cli.md), instead
of waiting for ever."""

from __future__ import annotations

import time

import pytest

from tests.helpers.silent_server import silent_server as listening

from ray_efa_eks.tools import command
from ray_efa_eks.training import reach, run, submit


@pytest.fixture
def silent_server():
    """Accepts every connection, reads nothing, answers nothing."""
    with listening("0.0.0.0") as port:  # `train --address 127.0.0.1:P` is resolved to this node's IP, as ray.init does
        yield port


def test_submit_to_a_server_that_never_answers_exits_2_in_time(silent_server, capsys, monkeypatch):
    # the figure is docs/cli.md's (30 s); 3 s keeps the test short
    monkeypatch.setattr(submit, "REQUEST_TIMEOUT_S", 3.0)
    t0 = time.monotonic()
    code = command.main(["submit", "--address", f"http://127.0.0.1:{silent_server}", "--", "--steps", "5"])
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no answer within 3 s" in err and f"127.0.0.1:{silent_server}" in err, err
    assert took < 60, f"took {took:.1f} s"  # 3 s per request, plus importing Ray and torch on a loaded 2-core box


def test_train_address_that_never_answers_exits_2_in_time(silent_server, capsys, monkeypatch, tmp_path):
    """ray.init retries a GCS that accepts and never answers for minutes (seen: still retrying after 4 min); the
    run is stopped after CONNECT_TIMEOUT_S (60 s; 5 s here) and the command exits 2."""
    from ray_efa_eks.training import lifecycle

    monkeypatch.setattr(run, "CONNECT_TIMEOUT_S", 5.0)
    monkeypatch.setattr(lifecycle, "GRACE_S", 3.0)
    t0 = time.monotonic()
    code = command.main(
        [
            "train",
            "--address",
            f"127.0.0.1:{silent_server}",
            "--steps",
            "5",
            "--json",
            "--storage-path",
            str(tmp_path),
            "--name",
            "silent",
        ]
    )
    took = time.monotonic() - t0
    out = capsys.readouterr()
    assert code == 2, out.err[-2000:]
    assert "did not answer within 5 s" in out.err and out.out.strip().splitlines()[-1].startswith("{"), out
    assert took < 60, f"took {took:.1f} s"


def test_the_documented_figures_are_the_code_s():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs/cli.md").read_text()
    for figure in (reach.PROBE_TIMEOUT_S, submit.REQUEST_TIMEOUT_S, submit.UPLOAD_TIMEOUT_S, run.CONNECT_TIMEOUT_S):
        assert f"{figure:g} s" in text, figure
