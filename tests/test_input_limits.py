"""Files read with limits: tools/files.py for the tools, nccl_log's bounded chunks for the verdict.

An alias bomb, a deep nest, a repeated key, a huge or binary file: each a :class:`FileProblem` naming the file, read
no further than needed. nccl-verdict decides "binary" on a file's first 64 KiB instead of reading it whole first.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from ray_efa_eks.efacheck import nccl_input, nccl_log
from ray_efa_eks.tools import files

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)
"""Nine levels of ten aliases each: 10**9 nodes once expanded, 400 bytes on disk."""


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return p


@pytest.mark.parametrize(
    "text, says",
    [
        (BOMB, "alias bomb"),
        ("a: &a [*a]\n", "nested more than"),  # a recursive alias: infinite once expanded
        ("x: " + "[" * 200 + "]" * 200 + "\n", "nested more than"),
        ("config:\n  k: 1\n  k: 2\n", "'k' appears twice (lines 2 and 3)"),
        ("config: [\n", "not valid YAML"),
    ],
)
def test_yaml_limits(tmp_path, text, says):
    with pytest.raises(files.FileProblem, match=r"Pulumi\.dev\.yaml") as e:
        files.load_yaml(write(tmp_path, "Pulumi.dev.yaml", text), what="stack file")
    assert says in str(e.value)


def test_yaml_with_a_few_aliases_still_loads(tmp_path):
    text = "base: &b {x: 1}\nconfig:\n  a: *b\n  b: *b\n"
    assert files.load_yaml(write(tmp_path, "s.yaml", text)) == {
        "base": {"x": 1},
        "config": {"a": {"x": 1}, "b": {"x": 1}},
    }


@pytest.mark.parametrize(
    "data, says",
    [
        (b"\xff\xfe{}", "not UTF-8"),
        (b"\x00\x01\x02", "binary"),
        (b"[" * 5000 + b"]" * 5000, "nested more than"),
        (b"{", "not JSON"),
    ],
)
def test_json_limits(tmp_path, data, says):
    with pytest.raises(files.FileProblem, match=says):
        files.load_json(write(tmp_path, "plan.json", data), what="saved plan")


def test_size_is_checked_before_reading(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(files.MAX_STACK_FILE + 1)
    with pytest.raises(files.FileProblem, match="more than"):
        files.load_yaml(big)
    with pytest.raises(files.FileProblem, match="directory"):
        files.read_text(tmp_path, max_bytes=10)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(files.FileProblem, match="not a regular file"):
        files.read_text(tmp_path / "fifo", max_bytes=10)


def test_confined(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "out").symlink_to("/etc")
    assert files.confined(tmp_path, "a/b.py") == (tmp_path / "a" / "b.py").resolve()
    for bad in ("../x", "a/../../x", "/etc/passwd", "a/out/passwd", "", "a\x00b"):
        with pytest.raises(files.FileProblem):
            files.confined(tmp_path, bad)


def test_nccl_verdict_decides_binary_on_the_first_chunk(tmp_path, monkeypatch):
    """Before: a 3.5 GB file was read whole (4 GiB limit) before being called binary; now 64 KiB are read."""
    big = tmp_path / "core.log"
    with open(big, "wb") as f:
        f.truncate(64 << 20)  # sparse zeros: binary from the first byte
    read: list[int] = []

    class Counting(io.FileIO):
        def read(self, n=-1):
            data = super().read(n)
            read.append(len(data))
            return data

    monkeypatch.setattr(nccl_input, "open", lambda p, mode="rb": io.BufferedReader(Counting(p, "r")), raising=False)
    with pytest.raises(nccl_log.UnreadableInput, match="binary"):
        nccl_log.analyze_paths([str(big)])
    assert sum(read) <= 2 * nccl_input.HEAD_BYTES, sum(read)


def test_nccl_verdict_stops_reading_stdin_at_the_limit(monkeypatch, capsys):
    monkeypatch.setattr(nccl_input, "MAX_LOG_BYTES", 3 << 20)

    class Endless(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, b):
            b[:] = b"x" * len(b)
            return len(b)

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Endless())))
    from ray_efa_eks.tools import command

    assert command.main(["nccl-verdict", "-"]) == nccl_log.EXIT["unreadable"]
    err = capsys.readouterr().err
    assert "unreadable input" in err and "GiB" in err and "Traceback" not in err, err


# -- through the real entry point -------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
SAVED = {
    "source": "x",
    "stack": "dev",
    "region": "us-east-1",
    "resources": [],
    "settings": {},
    "rules": {"violations": [], "checked": []},
}


def _plan(argv, capsys, monkeypatch):
    from ray_efa_eks.tools import command

    monkeypatch.chdir(ROOT)
    code = command.main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize(
    "yaml_text, says",
    [
        (BOMB.replace("\n", "\n", 1) + "config:\n  ray-efa-eks:endpointPublicAccessCidrs: *i\n", "alias bomb"),
        ("config:\n  ray-efa-eks:gpuNodeCount: 2\n  ray-efa-eks:gpuNodeCount: 7\n", "appears twice"),
    ],
)
def test_plan_refuses_a_stack_file_pulumi_refuses(tmp_path, capsys, monkeypatch, yaml_text, says):
    """Before: the alias bomb ran out of memory (a hang, then a traceback); the repeated key planned with 7."""
    (tmp_path / "__main__.py").write_text("raise SystemExit('the program must not run')\n")
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml_text)
    code, text = _plan(["plan", "--check", "--program", str(tmp_path / "__main__.py")], capsys, monkeypatch)
    assert code == 3 and "Pulumi.dev.yaml" in text and says in text, (code, text)
    assert "Traceback" not in text


@pytest.mark.parametrize(
    "change, says",
    [
        ({"resources": [1]}, "resources[0]"),
        ({"resources": 5}, "'resources' is a int"),
        ({"rules": {"violations": [{}], "checked": []}}, "rules.violations[0]"),
        ({"rules": {"violations": [], "checked": "x"}}, "rules.checked"),
        ({"stack": 3}, "'stack' is a int"),
        ({"settings": []}, "'settings' is a list"),
    ],
)
def test_diff_of_a_malformed_saved_plan_exits_3(tmp_path, capsys, monkeypatch, change, says):
    """Before: a TypeError/KeyError traceback and exit 1 (the README says 3)."""
    import json

    (tmp_path / "a.json").write_text(json.dumps({**SAVED, **change}))
    (tmp_path / "b.json").write_text(json.dumps(SAVED))
    code, text = _plan(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")], capsys, monkeypatch)
    assert code == 3 and "a.json" in text and says in text, (code, text)
