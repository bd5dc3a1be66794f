"""efacheck.report: report.md and busbw.png from a real local run (2 gloo ranks, EFA-env and Socket-env sweeps in
fresh processes, each rank's stack probe), and the text-only fallback without matplotlib."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ray_efa_eks.efacheck import report, stack_probe, sweep
from tests.helpers.gloo_sweep import spawn_sweep


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("local-run")
    entries = sweep.plan(16 << 10, 256 << 10, 2, preset="tiny")
    efa, sock = spawn_sweep(base / "efa", {}, entries), spawn_sweep(base / "socket", sweep.SOCKET_ENV, entries)
    rows = sweep.summarize([r["rows"] for r in efa], 2)
    socket_rows = sweep.summarize([r["rows"] for r in sock], 2)
    probes = [r["probe"] for r in efa]
    return {
        "verdict": "undetermined",
        "code": 2,
        "backend": "gloo",
        "world": 2,
        "nodes": 1,
        "reasons": ["backend gloo: NCCL was not used, so no NCCL logs and no EFA"],
        "rows": rows,
        "socket_rows": socket_rows,
        "comparison": sweep.compare(rows, socket_rows),
        "line_rate": sweep.line_rate(rows, 40.0),
        "stack_probes": probes,
        "versions": stack_probe.compare_versions(probes, stack_probe.MANIFESTS["train-ml-cuda-v1.1"]),
    }


def _pixels(png: Path) -> dict[tuple[int, int, int], int]:
    """Pixel count per colour."""
    from PIL import Image

    return {c[:3]: n for n, c in Image.open(png).convert("RGB").getcolors(1 << 20)}


def test_report_md_and_png(result: dict, tmp_path: Path) -> None:
    out = report.write_report(str(tmp_path / "r"), result)
    md = Path(out["report_md"]).read_text()
    assert out["plot_error"] is None and out["png"] == str(tmp_path / "r" / "busbw.png")
    assert md.startswith("# EFA check report\n\n**Verdict: undetermined** (exit 2) — backend gloo, 2 ranks")
    assert "![busbw against message size](busbw.png)" in md
    assert "EFA/Socket busbw ratio at large messages: **" in md
    assert "(40 Gbit/s = 5 GB/s per node)" in md
    for key in stack_probe.KEYS:
        assert f"\n| {key} | " in md
    assert f"| torch | 2.13.0 | {torch.__version__} (ranks 0-1) | ok |" in md
    assert "Where each version came from (rank 0): torch: torch.__version__" in md
    for c in sweep.COLLECTIVES:
        assert f"## {c} sweep" in md and f"## {c} Socket sweep" in md
    assert "| fsdp:tiny |" in md and "**NO**" not in md
    png = Path(out["png"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    w, h = Image.open(png).size
    assert w > 1.8 * h  # two panels side by side


def test_png_draws_a_line_per_collective_and_the_line_rate(tmp_path: Path) -> None:
    """Fixed, well separated figures (the real run's lines overlap at random): each collective's colour covers a
    line's worth of pixels in each panel (its FSDP markers and legend entry alone: < 200 px), the line rate is drawn."""

    def rows(scale: float) -> list[dict]:
        return [
            {"collective": c, "bytes": b, "source": "pow2", "busbw_gbps": scale * (k + 1) * (i + 1)}
            for k, c in enumerate(sweep.COLLECTIVES)
            for i, b in enumerate(sweep.pow2_sizes(1 << 16, 1 << 22))
        ]

    png = tmp_path / "p.png"
    report.plot(str(png), rows(0.1), rows(0.05), efa_gbps=40.0)
    pixels = _pixels(png)
    for hexc in ("#1f77b4", "#d62728", "#2ca02c"):  # all_reduce, all_gather, reduce_scatter: matplotlib's tab10
        assert pixels.get(tuple(int(hexc[i : i + 2], 16) for i in (1, 3, 5)), 0) > 600
    report.plot(str(png), rows(0.1), rows(0.05), efa_gbps=None)

    # the dashed line across both panels (not only its legend entry) goes with the line rate; dark = antialiased black
    def dark(px: dict) -> int:
        return sum(n for c, n in px.items() if max(c) < 160)

    assert dark(pixels) - dark(_pixels(png)) > 1200


def test_efa_only_report_without_line_rate(result: dict, tmp_path: Path) -> None:
    r = {k: v for k, v in result.items() if k not in ("socket_rows", "comparison", "line_rate")}
    out = report.write_report(str(tmp_path), r)
    md = Path(out["report_md"]).read_text()
    assert "EFA/Socket ratio: not measured (run with --compare-socket)" in md
    assert "unknown (no --efa-gbps for this instance type)" in md
    from PIL import Image

    w, h = Image.open(out["png"]).size
    assert w < 1.8 * h  # one panel


def test_text_only_without_matplotlib(result: dict, tmp_path: Path, monkeypatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out = report.write_report(str(tmp_path), result)
    assert out["png"] is None and "matplotlib is not installed" in out["plot_error"]
    assert not (tmp_path / "busbw.png").exists()
    md = Path(out["report_md"]).read_text()
    assert "_No plot: matplotlib is not installed" in md and "## all_reduce sweep" in md
    assert out["text"] == md


def test_versions_failure_is_in_the_report(result: dict, tmp_path: Path) -> None:
    probes = [
        dict(result["stack_probes"][0], nccl="2.29.7"),
        dict(result["stack_probes"][1], nccl="2.27.3", host="node-b"),
    ]
    r = dict(result, stack_probes=probes, versions=stack_probe.compare_versions(probes))
    md = report.render_markdown(r)
    assert "## Versions (failure)" in md
    assert "| nccl | — | 2.29.7 (ranks 0); 2.27.3 (ranks 1) | failure |" in md
    assert "- ranks disagree on nccl: 2.29.7 on ranks 0" in md


def test_human_bytes() -> None:
    assert [report.human_bytes(n) for n in (512, 1 << 10, 788480, 1 << 20, 1082368, 3 << 30)] == [
        "512 B",
        "1 KiB",
        "770 KiB",
        "1 MiB",
        "1.03 MiB",
        "3 GiB",
    ]
