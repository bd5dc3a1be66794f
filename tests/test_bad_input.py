"""Bad input gets a clear answer: a table of bad inputs for every entry point.

Each case runs ``ray-efa-eks <subcommand> ...`` in this process (``tools.command.main``, capsys) and asserts
the exit code from that command's documented table (64 usage, then each CLI's own), no traceback, and a message
that names the argument or key, the bad value and the fix. Nothing may start Ray, call AWS or reach a Jobs API
before the arguments are checked: those entry points are replaced by guards that raise :class:`Started` (a
``BaseException`` no CLI catches), so a check that comes too late fails the case instead of starting a cluster.
Only what needs a process runs in one: Ctrl-C (SIGINT), a FIFO that would block, the ``python -m`` aliases, the
benchmarks and the policy/provider entry points.

``CASES`` is counted per entry point in docs/testing.md ("Bad input"):
``test_docs_state_the_count`` keeps the two equal.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ray_efa_eks.tools import command

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BIN = Path(PY).parent / "ray-efa-eks"
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\w+(Error|Exception): ", re.M)


class Started(BaseException):
    """Ray, AWS or the Jobs API was about to be used before the arguments were checked."""


@dataclass
class Case:
    id: str
    argv: list[str]
    """``ray-efa-eks`` arguments; ``{tmp}`` is the case's own temporary directory (files below are made there)."""
    code: int
    says: tuple[str, ...] = ()
    """Fragments the message must contain (case-insensitive): the argument or key, the bad value, the fix."""
    kind: str = ""
    files: dict[str, bytes | str] = field(default_factory=dict)
    """Files made in {tmp} first (a str value ``"<dir>"`` makes a directory)."""

    @property
    def entry(self) -> str:
        return self.argv[0] if self.argv and self.argv[0] in command.SUBCOMMANDS else "ray-efa-eks"


NON_UTF8 = b"config:\n  ray-efa-eks:gpuNodeCount: \xff\xfe2\n"
EFA_LOG = (ROOT / "tests/fixtures/nccl-logs/real_efa_g7e_slurm_nccl2292_ofi1180_2node.log").read_bytes()
"""A real two-node log whose verdict is efa (tests/fixtures/nccl-logs/README.md)."""
EMPTY_PROGRAM = {"__main__.py": "raise SystemExit('the program must not run for a bad stack file')\n"}


def stack(text: str | bytes) -> dict[str, bytes | str]:
    return {**EMPTY_PROGRAM, "Pulumi.dev.yaml": text}


def plan_cfg(key_value: str, *says: str, code: int = 2, kind: str = "config value") -> Case:
    key = key_value.split("=", 1)[0]
    return Case(f"plan-config-{key_value}", ["plan", "--check", "--config", key_value], code, (key, *says), kind)


def stack_value(id: str, yaml_text: str, code: int, *says: str) -> Case:
    """A value written in Pulumi.dev.yaml (as a user would), planned with the real program beside it."""
    return Case(
        f"plan-yaml-{id}",
        ["plan", "--check", "--program", "{tmp}/__main__.py"],
        code,
        says,
        "stack file value",
        {"__main__.py": (ROOT / "__main__.py").read_text(), "Pulumi.dev.yaml": yaml_text},
    )


CASES: list[Case] = [
    # -- the command itself ----------------------------------------------------------------------------------------
    Case("command-no-args", [], 64, ("usage", "subcommand"), "no args"),
    Case("command-unknown-sub", ["deploy"], 64, ("deploy", "unknown subcommand", "plan"), "unknown subcommand"),
    # -- plan / diff / check-rules ---------------------------------------------------------------------------------
    Case("plan-unknown-flag", ["plan", "--stak", "dev"], 64, ("--stak",), "unknown flag"),
    Case(
        "plan-config-no-equals", ["plan", "--config", "gpuNodeCount"], 64, ("gpuNodeCount", "KEY=VALUE"), "wrong type"
    ),
    Case("plan-missing-stack", ["plan", "--stack", "prdo"], 3, ("prdo", "--stack", "--defaults"), "missing file"),
    Case(
        "plan-stack-list",
        ["plan", "--program", "{tmp}/__main__.py"],
        3,
        ("Pulumi.dev.yaml", "mapping"),
        "wrong type",
        stack("- a\n- b\n"),
    ),
    Case(
        "plan-stack-config-5",
        ["plan", "--program", "{tmp}/__main__.py"],
        3,
        ("Pulumi.dev.yaml", "config", "5"),
        "wrong type",
        stack("config: 5\n"),
    ),
    Case(
        "plan-stack-non-utf8",
        ["plan", "--program", "{tmp}/__main__.py"],
        3,
        ("Pulumi.dev.yaml", "UTF-8"),
        "non-UTF-8 file",
        stack(NON_UTF8),
    ),
    Case(
        "plan-stack-binary",
        ["plan", "--program", "{tmp}/__main__.py"],
        3,
        ("Pulumi.dev.yaml",),
        "binary file",
        stack(b"\x00\x01\x02\x89PNG\r\n"),
    ),
    Case(
        "plan-stack-bad-yaml",
        ["plan", "--program", "{tmp}/__main__.py"],
        3,
        ("Pulumi.dev.yaml", "YAML"),
        "bad file",
        stack("config: [\n"),
    ),
    Case(
        "plan-stack-dir",
        ["plan", "--program", "{tmp}/__main__.py"],
        3,
        ("Pulumi.dev.yaml", "directory"),
        "a directory",
        {**EMPTY_PROGRAM, "Pulumi.dev.yaml": "<dir>"},
    ),
    Case(
        "plan-stack-key-list",
        ["plan", "--program", "{tmp}/__main__.py"],
        3,
        ("Pulumi.dev.yaml", "config"),
        "wrong type",
        stack("config:\n  - ray-efa-eks:gpuNodeCount\n"),
    ),
    Case("plan-program-missing", ["plan", "--defaults", "--program", "{tmp}/nope.py"], 3, ("nope.py",), "missing file"),
    Case(
        "plan-program-device",
        ["plan", "--defaults", "--program", "/dev/null"],
        3,
        ("--program", "regular file"),
        "a device",
    ),
    Case(
        "plan-program-dir", ["plan", "--defaults", "--program", "{tmp}"], 3, ("--program", "directory"), "a directory"
    ),
    Case("diff-ref-option", ["plan", "--diff=--output={tmp}/x.tar"], 64, ("--output", "ref"), "option-looking ref"),
    Case(
        "diff-ref-option-after-dashdash",
        ["diff", "--", "--output={tmp}/x.tar"],
        64,
        ("--output",),
        "option-looking ref",
    ),
    Case("diff-ref-unknown", ["diff", "no-such-ref-xyz"], 3, ("no-such-ref-xyz", "fetch"), "missing ref"),
    Case("diff-three", ["diff", "a.json", "b.json", "c.json"], 64, ("--diff",), "wrong arity"),
    Case(
        "diff-json-empty",
        ["diff", "{tmp}/a.json", "{tmp}/b.json"],
        3,
        ("a.json",),
        "empty file",
        {"a.json": "", "b.json": "{}"},
    ),
    Case(
        "diff-json-not-object",
        ["diff", "{tmp}/a.json", "{tmp}/b.json"],
        3,
        ("a.json", "plan"),
        "wrong type",
        {"a.json": "[1, 2]", "b.json": "[]"},
    ),
    Case(
        "diff-json-non-utf8",
        ["diff", "{tmp}/a.json", "{tmp}/b.json"],
        3,
        ("a.json",),
        "non-UTF-8 file",
        {"a.json": b"\xff\xfe{}", "b.json": "{}"},
    ),
    Case("check-rules-unknown-flag", ["check-rules", "--jsn"], 64, ("--jsn",), "unknown flag"),
    plan_cfg("vpcCidr=10.0.0.0/8", "/16", "/28"),
    plan_cfg("vpcCidr=10.0.0.0/30", "/28"),
    plan_cfg("vpcCidr=banana", "CIDR"),
    plan_cfg("gpuRootVolumeGiB=1000000", "65536"),
    plan_cfg("gpuRootVolumeGiB=-5", "100"),
    plan_cfg("gpuNodeCount=-1", ">= 0"),
    plan_cfg("gpuNodeCount=10000", "450"),
    plan_cfg("gpuNodeCount=two", "two"),
    plan_cfg("kubernetesVersion=1.3", "1.30", "quote"),
    plan_cfg("kubernetesVersion=latest", "MAJOR.MINOR"),
    plan_cfg("dlcImage=my image:1.0", "my image:1.0", "reference"),
    plan_cfg("dlcImage=Public.ecr.aws/UPPER/ray:1", "reference"),
    plan_cfg("dlcImage=repo/ray:" + "t" * 129, "tag"),
    plan_cfg("efaCheckMinBusbwGbps=-5", ">= 0"),
    plan_cfg("efaCheckMinBusbwGbps=nan", "nan"),
    plan_cfg("efaCheckMinBusbwFraction=nan", "nan"),
    plan_cfg("efaCheckMinBusbwFraction=2", "0", "1"),
    plan_cfg("efaCheckWaitSeconds=0", "60"),
    plan_cfg("imdsHopLimit=0", "1..64"),
    plan_cfg("gpuInstanceType=p5.48xlarg", "p5.48xlarge"),
    plan_cfg("efa=maybe", "maybe", "true"),
    plan_cfg("gpuCapacity=spot", "on-demand"),
    plan_cfg("gpuCapacity=reservation", "gpuCapacityReservationId"),
    plan_cfg("gpuNodCount=2", "gpuNodeCount"),
    Case(
        "plan-region-mars",
        ["plan", "--check", "--config", "aws:region=mars-1"],
        2,
        ("aws:region", "mars-1"),
        "config value",
    ),
    stack_value(
        "k8s-float", "config:\n  ray-efa-eks:kubernetesVersion: 1.30\n", 2, "kubernetesVersion", "1.3", '"1.30"'
    ),
    stack_value("node-count-list", "config:\n  ray-efa-eks:gpuNodeCount: [1, 2]\n", 2, "gpuNodeCount"),
    # -- preflight (exit 0 ok, 1 failed, 2 undetermined, 64 usage) ---------------------------------------------------
    Case("preflight-count-0", ["preflight", "--count", "0"], 64, ("--count", "0"), "zero"),
    Case("preflight-count-neg", ["preflight", "--count", "-3"], 64, ("--count", "-3"), "negative"),
    Case("preflight-count-word", ["preflight", "--count", "two"], 64, ("--count", "two"), "wrong type"),
    Case("preflight-region-empty", ["preflight", "--region", ""], 64, ("--region", "us-east-1"), "empty"),
    Case("preflight-region-bad", ["preflight", "--region", "mars-1"], 64, ("--region", "mars-1"), "wrong value"),
    Case(
        "preflight-az-bad",
        ["preflight", "--region", "us-east-1", "--az", "eu-west-1a"],
        64,
        ("--az", "eu-west-1a", "us-east-1"),
        "wrong value",
    ),
    Case(
        "preflight-type-bad",
        ["preflight", "--region", "us-east-1", "--instance-type", "g6 12xlarge"],
        64,
        ("--instance-type", "g6 12xlarge", "g6.12xlarge"),
        "wrong value",
    ),
    Case(
        "preflight-count-huge",
        ["preflight", "--region", "us-east-1", "--count", "100000"],
        64,
        ("--count", "100000"),
        "huge",
    ),
    Case(
        "preflight-endpoint-bad",
        ["preflight", "--region", "us-east-1", "--endpoint-url", "not a url"],
        64,
        ("--endpoint-url", "not a url"),
        "wrong value",
    ),
    Case(
        "preflight-cr-bad",
        ["preflight", "--region", "us-east-1", "--capacity-reservation-id", "../x"],
        64,
        ("--capacity-reservation-id", "../x", "cr-"),
        "wrong value",
    ),
    Case("preflight-unknown-flag", ["preflight", "--zone", "x"], 64, ("--zone",), "unknown flag"),
    # -- config-schema (0 up to date, 1 stale, 2 not a project, 64 usage) -----------------------------------------
    Case("config-schema-no-args", ["config-schema"], 64, ("--check", "--write"), "no args"),
    Case("config-schema-both", ["config-schema", "--check", "--write"], 64, ("--write",), "conflicting flags"),
    Case(
        "config-schema-not-a-checkout",
        ["config-schema", "--write", "--root", "{tmp}"],
        2,
        ("not a ray-efa-eks checkout", "--root"),
        "wrong directory",
    ),
    # -- train (0 ok, 1 failed, 2 unreachable, 4 Ray could not start, 6 cluster too small, 64 usage, 130 Ctrl-C) -
    Case("train-unknown-flag", ["train", "--step", "5", "--wrkers", "2"], 64, ("--wrkers",), "unknown flag"),
    Case("train-steps-word", ["train", "--steps", "five"], 64, ("--steps", "five"), "wrong type"),
    Case("train-steps-0", ["train", "--steps", "0"], 64, ("--steps", "0", ">= 1"), "zero"),
    Case("train-steps-huge", ["train", "--steps", str(10**12)], 64, ("--steps", str(10**12)), "huge"),
    Case("train-workers-neg", ["train", "--workers", "-2"], 64, ("--workers", "-2"), "negative"),
    Case("train-workers-huge", ["train", "--workers", "1000"], 64, ("--workers", "1000", "--address", "CPU"), "huge"),
    Case("train-batch-huge", ["train", "--batch-size", str(10**9)], 64, ("--batch-size", str(10**9)), "huge"),
    Case("train-preset-unknown", ["train", "--preset", "70b"], 64, ("--preset", "70b", "tiny"), "wrong value"),
    Case(
        "train-name-traversal",
        ["train", "--name", "../../x", "--storage-path", "{tmp}/store"],
        64,
        ("--name", "../../x", "storage"),
        "path traversal",
    ),
    Case("train-name-absolute", ["train", "--name", "/etc/x"], 64, ("--name", "/etc/x"), "path traversal"),
    Case("train-name-empty", ["train", "--name", ""], 64, ("--name",), "empty"),
    Case("train-name-option", ["train", "--name", "--json"], 64, ("--name",), "option-looking value"),
    Case(
        "train-storage-file",
        ["train", "--storage-path", "{tmp}/f"],
        64,
        ("--storage-path", "not a directory"),
        "a file for a dir",
        {"f": "x"},
    ),
    Case("train-storage-empty", ["train", "--storage-path", ""], 64, ("--storage-path", "empty"), "empty"),
    Case(
        "train-storage-newline",
        ["train", "--storage-path", "{tmp}/new\nline"],
        64,
        ("--storage-path", "control character", "\\n"),
        "control character",
    ),
    Case(
        "train-storage-s3-empty-segment",
        ["train", "--storage-path", "s3://bucket//x"],
        64,
        ("--storage-path", "s3://bucket//x", "empty s3 key segment"),
        "empty segment",
    ),
    Case(
        "train-use-gpu-local", ["train", "--use-gpu", "--steps", "5"], 64, ("--use-gpu", "GPU", "--address"), "no GPUs"
    ),
    Case(
        "train-fail-before-ckpt",
        ["train", "--fail-at-step", "3"],
        64,
        ("--fail-at-step", "--checkpoint-every"),
        "wrong value",
    ),
    Case("train-max-failures", ["train", "--max-failures", "-7"], 64, ("--max-failures", "-7"), "negative"),
    Case(
        "train-address-bad-port",
        ["train", "--address", "127.0.0.1:notaport"],
        64,
        ("--address", "notaport"),
        "wrong type",
    ),
    Case("train-address-closed", ["train", "--address", "127.0.0.1:1"], 2, ("127.0.0.1:1",), "unreachable"),
    Case(
        "train-wait-negative",
        ["train", "--wait-for-workers-s", "-1"],
        64,
        ("--wait-for-workers-s", "-1", "seconds from 0"),
        "negative",
    ),
    Case(
        "train-wait-no-workers",
        ["train", "--address", "auto", "--use-gpu", "--wait-for-workers-s", "60"],
        64,
        ("--wait-for-workers-s", "needs --workers"),
        "conflicting flags",
    ),
    Case("train-json-usage", ["train", "--json", "--steps", "0"], 64, ("--steps", '"exit_code": 64'), "json usage"),
    # -- submit (the job's code, 2 unreachable, 64 usage) ----------------------------------------------------------
    Case("submit-preset-unknown", ["submit", "--", "--preset", "70b"], 64, ("--preset", "70b", "tiny"), "wrong value"),
    Case("submit-workers-0", ["submit", "--", "--workers", "0"], 64, ("--workers", "0"), "zero"),
    Case("submit-name-traversal", ["submit", "--", "--name", "../x"], 64, ("--name", "../x"), "path traversal"),
    Case(
        "submit-address-not-url", ["submit", "--address", "127.0.0.1:8265"], 64, ("--address", "http://"), "wrong value"
    ),
    Case("submit-env-bad", ["submit", "--env", "NOEQUALS"], 64, ("--env", "NOEQUALS", "KEY=VALUE"), "wrong type"),
    Case("submit-train-address", ["submit", "--", "--address", "auto"], 64, ("--address",), "conflicting flags"),
    Case(
        "submit-prog-once",
        ["submit", "--", "--steps", "x"],
        64,
        ("ray-efa-eks submit ... --: error", "--steps"),
        "wrong type",
    ),
    Case("submit-unknown-flag", ["submit", "--adress", "http://x"], 64, ("--adress",), "unknown flag"),
    # -- efa-check (0 efa, 1 fallback/failed, 2 undetermined, 3 logs unreadable, 64 usage) ------------------------
    Case("efa-check-iters-0", ["efa-check", "--local", "--iters", "0"], 64, ("--iters", "0", ">= 1"), "zero"),
    Case(
        "efa-check-bytes-order",
        ["efa-check", "--local", "--min-bytes", "4096", "--max-bytes", "1024"],
        64,
        ("--min-bytes", "--max-bytes", "4096", "1024"),
        "wrong order",
    ),
    Case("efa-check-bytes-0", ["efa-check", "--local", "--min-bytes", "0"], 64, ("--min-bytes", "0"), "zero"),
    Case(
        "efa-check-bytes-huge",
        ["efa-check", "--local", "--max-bytes", str(1 << 40)],
        64,
        ("--max-bytes", str(1 << 40)),
        "huge",
    ),
    Case(
        "efa-check-fraction-2",
        ["efa-check", "--local", "--min-busbw-fraction", "2"],
        64,
        ("--min-busbw-fraction", "2", "0", "1"),
        "out of range",
    ),
    Case(
        "efa-check-fraction-nan",
        ["efa-check", "--local", "--min-busbw-fraction", "nan"],
        64,
        ("--min-busbw-fraction", "nan"),
        "nan",
    ),
    Case(
        "efa-check-gbps-neg",
        ["efa-check", "--local", "--min-busbw-gbps", "-5"],
        64,
        ("--min-busbw-gbps", "-5"),
        "negative",
    ),
    Case("efa-check-wait-inf", ["efa-check", "--local", "--wait-s", "inf"], 64, ("--wait-s", "inf"), "huge"),
    Case(
        "efa-check-manifest-missing",
        ["efa-check", "--local", "--manifest", "{tmp}/none.json"],
        64,
        ("--manifest", "none.json"),
        "missing file",
    ),
    Case(
        "efa-check-manifest-bad",
        ["efa-check", "--local", "--manifest", "{not json"],
        64,
        ("--manifest", "not JSON"),
        "wrong type",
    ),
    Case(
        "efa-check-preset-unknown",
        ["efa-check", "--local", "--preset", "70b"],
        64,
        ("--preset", "70b", "tiny"),
        "wrong value",
    ),
    Case("efa-check-nics-0", ["efa-check", "--local", "--expect-nics", "0"], 64, ("--expect-nics", "0"), "zero"),
    Case("efa-check-nodes-0", ["efa-check", "--local", "--expect-nodes", "0"], 64, ("--expect-nodes", "0"), "zero"),
    Case(
        "efa-check-report-file",
        ["efa-check", "--local", "--report", "{tmp}/f"],
        64,
        ("--report", "directory"),
        "a file for a dir",
        {"f": "x"},
    ),
    Case("efa-check-unknown-flag", ["efa-check", "--lcoal"], 64, ("--lcoal",), "unknown flag"),
    Case(
        "efa-check-address-closed",
        ["efa-check", "--address", "127.0.0.1:1", "--json"],
        2,
        ("127.0.0.1:1",),
        "unreachable",
    ),
    # -- nccl-verdict (0 efa, 1 fallback, 2 undetermined, 3 unreadable, 64 usage) ---------------------------------
    Case("nccl-no-args", ["nccl-verdict"], 64, ("FILE_OR_DIR",), "no args"),
    Case("nccl-missing", ["nccl-verdict", "{tmp}/none.log"], 3, ("none.log", "no such file"), "missing file"),
    Case("nccl-empty", ["nccl-verdict", "{tmp}/e.log"], 3, ("e.log", "empty"), "empty file", {"e.log": ""}),
    Case(
        "nccl-binary",
        ["nccl-verdict", "{tmp}/b.log"],
        3,
        ("b.log", "binary"),
        "binary file",
        {"b.log": bytes(range(256)) * 8},
    ),
    Case(
        "nccl-non-utf8",
        ["nccl-verdict", "{tmp}/n.log"],
        3,
        ("n.log",),
        "non-UTF-8 file",
        {"n.log": b"\xff\xfe caf\xe9 no nccl here\n" * 20},
    ),
    Case("nccl-dir-empty", ["nccl-verdict", "{tmp}/d"], 3, ("d", "no "), "a directory", {"d": "<dir>"}),
    Case(
        "nccl-dir-readme",
        ["nccl-verdict", "{tmp}/d"],
        0,
        ("efa",),
        "a directory",
        {"d": "<dir>", "d/README.md": "# notes\n", "d/verdict.json": "{}", "d/rank0.log": EFA_LOG},
    ),
    Case("nccl-nodes-0", ["nccl-verdict", "--expect-nodes", "0", "x.log"], 64, ("--expect-nodes", "0"), "zero"),
    Case(
        "nccl-nics-word",
        ["nccl-verdict", "--expect-nics", "many", "x.log"],
        64,
        ("--expect-nics", "many"),
        "wrong type",
    ),
    Case("nccl-unknown-flag", ["nccl-verdict", "--jsn", "x.log"], 64, ("--jsn",), "unknown flag"),
    Case("nccl-root-dir", ["nccl-verdict", "/"], 3, ("/", "more than 10000 files"), "huge directory"),
    Case("nccl-device", ["nccl-verdict", "/dev/null"], 3, ("/dev/null", "not a regular file"), "a device"),
    Case("nccl-huge", ["nccl-verdict", "{tmp}/big.log"], 3, ("big.log",), "huge file", {"big.log": b"x" * (8 << 20)}),
]


@pytest.fixture
def guards(monkeypatch):
    """Make starting Ray, calling AWS or reaching a Jobs API fail the case (see :class:`Started`)."""
    import boto3.session
    import ray

    from ray_efa_eks.efacheck import local_cluster
    from ray_efa_eks.training import reach

    def started(what):
        def boom(*a, **k):
            raise Started(f"{what} before the arguments were checked")

        return boom

    monkeypatch.setattr(ray, "init", started("ray.init"))
    monkeypatch.setattr(local_cluster, "local_cluster", started("local Ray cluster"))
    monkeypatch.setattr(boto3.session, "Session", started("AWS session"))
    real_probe = reach.probe

    def probe(host, port, what, timeout=2.0):
        if "Jobs API" in what:
            raise Started("Jobs API probe")
        return real_probe(host, port, what, timeout)

    monkeypatch.setattr(reach, "probe", probe)


def make_files(tmp: Path, files: dict[str, bytes | str]) -> None:
    for rel, content in files.items():
        path = tmp / rel
        if content == "<dir>":
            path.mkdir(parents=True, exist_ok=True)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def run_case(case: Case, tmp: Path, capsys) -> tuple[int, str]:
    make_files(tmp, case.files)
    argv = [a.replace("{tmp}", str(tmp)) for a in case.argv]
    try:
        code = command.main(argv)
    except SystemExit as e:  # argparse inside a module whose main lets it through
        code = e.code if isinstance(e.code, int) else 1
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path, capsys, guards, monkeypatch):
    monkeypatch.chdir(ROOT)
    before = set(ROOT.iterdir()) | set(Path("/tmp").iterdir())
    code, text = run_case(case, tmp_path, capsys)
    assert not TRACEBACK.search(text), f"traceback:\n{text}"
    assert code == case.code, f"exit {code}, want {case.code}:\n{text}"
    low = text.lower()
    missing = [s for s in case.says if s.lower() not in low]
    assert not missing, f"message does not say {missing}:\n{text}"
    assert "= none is invalid" not in low and "must be a int" not in low, text
    created = (set(ROOT.iterdir()) | set(Path("/tmp").iterdir())) - before
    stray = [p for p in created if p.name.endswith(".tar") or p.name == "x"]
    assert not stray, f"wrote outside where the command writes: {stray}"
    assert not (tmp_path / "x.tar").exists(), "a ref reached git archive as an option"


def test_storage_path_tilde_with_home_unset(tmp_path, capsys, guards, monkeypatch):
    """``~/st`` with HOME unset would be the account's home from /etc/passwd (``/root``), not the user's: refused."""
    monkeypatch.delenv("HOME", raising=False)
    code, text = run_case(Case("train-storage-tilde", ["train", "--storage-path", "~/st"], 64), tmp_path, capsys)
    assert code == 64 and "~/st" in text and "HOME" in text, text


def test_name_cannot_leave_the_storage_path(tmp_path):
    from ray_efa_eks.training.request import run_name_problem

    for bad in ("../../x", "/abs", "a/b", "..", ".", "", "-x", "a\x00b", "x" * 200):
        assert run_name_problem(bad), bad
    for good in ("fsdp-lm-1733300000", "run_1.b", "A1"):
        assert run_name_problem(good) is None, good


def test_use_gpu_on_a_cluster_without_gpus_fails_fast():
    from ray_efa_eks.training.errors import EXIT_TOO_SMALL, CliError
    from ray_efa_eks.training.reach import check_cluster_fits

    with pytest.raises(CliError) as e:
        check_cluster_fits({"CPU": 2.0}, workers=2, use_gpu=True)
    assert e.value.code == EXIT_TOO_SMALL and "0 GPU" in str(e.value) and "--workers" in str(e.value)
    with pytest.raises(CliError):
        check_cluster_fits({"CPU": 1.0}, workers=2, use_gpu=False)
    check_cluster_fits({"CPU": 2.0, "GPU": 8.0}, workers=8, use_gpu=True)


# -- what needs a process ---------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def _interrupt(argv: list[str], after: str | float, timeout: float = 120) -> tuple[int, str, str]:
    """Start ``argv``, send SIGINT once stdout/stderr shows ``after`` (or after that many seconds), collect."""
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )  # stdin stays open: `-` waits on it
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        if isinstance(after, float):
            time.sleep(after)
        else:
            for line in proc.stdout:
                seen.append(line)
                if after in line or time.monotonic() > deadline:
                    break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(seen) + (rest or "")
    return proc.returncode, text, "".join(seen)


def test_fifo_and_stdin_do_not_hang(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    r = subprocess.run([str(BIN), "nccl-verdict", str(fifo)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "pipe.log" in r.stderr and "not a regular file" in r.stderr, r.stderr
    r = subprocess.run([str(BIN), "nccl-verdict", "-"], input=EFA_LOG, capture_output=True, timeout=60)
    assert r.returncode == 0 and b"verdict: efa" in r.stdout, r.stdout + r.stderr
    assert not TRACEBACK.search(r.stderr.decode())


def test_ctrl_c_plan_and_nccl_verdict_exit_130():
    """The ``python -m`` aliases handle Ctrl-C themselves (``ray-efa-eks`` does too)."""
    # plan: once its program runs (its first warning; a fixed delay raced the plan's end once it got faster);
    # nccl-verdict '-' waits on stdin for ever
    for argv, after in (
        ([PY, "-m", "ray_efa_eks.tools.plan"], "the EKS API endpoint is open"),
        ([PY, "-m", "ray_efa_eks.efacheck.nccl_log", "-"], 1.5),
    ):
        code, text, _ = _interrupt(argv, after)
        assert code == 130, (argv, code, text)
        assert "interrupted" in text and not TRACEBACK.search(text), text


def test_ctrl_c_during_fit_is_interrupted_not_success(tmp_path):
    """Ray Train's own SIGINT handler ends fit() with sys.exit(0): the CLI must still answer 130, not 0 or 1.

    In process with a stand-in trainer that registers a handler the way DataParallelTrainer does; the real run
    (a local cluster, SIGINT after a ``[train]`` line) is tests/training/test_cli_interrupt.py.
    """
    from ray_efa_eks.training.errors import CliError
    from ray_efa_eks.training.request import TrainRequest
    from ray_efa_eks.training.run import run_training

    class RayLikeTrainer:
        def _register_sigint_handler(self, controller):
            signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(0))

        def fit(self):
            self._register_sigint_handler(None)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            raise AssertionError("SIGINT did not arrive")

    saved = signal.getsignal(signal.SIGINT)
    req = TrainRequest(storage_path=str(tmp_path), name="ctrl-c")
    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr("ray_efa_eks.training.trainer.build_trainer", lambda **kw: RayLikeTrainer())
            with pytest.raises(CliError) as e:
                run_training(req)
    finally:
        signal.signal(signal.SIGINT, saved)
    assert e.value.code == 130 and "interrupted" in str(e.value) and "--name ctrl-c" in str(e.value)


def test_benchmark_and_policy_entry_points():
    r = subprocess.run(
        [PY, "benchmarks/plan_speed.py", "--runs", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 64 and "--runs" in r.stderr and not TRACEBACK.search(r.stderr), r.stderr
    r = subprocess.run([PY, "policy/__main__.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "pulumi preview --policy-pack" in r.stdout, r.stdout + r.stderr


def test_docs_state_the_count():
    readme = (ROOT / "docs/testing.md").read_text()
    per_entry = Counter(c.entry for c in CASES)
    m = re.search(r"tries \*\*(\d+) bad inputs\*\*", readme)
    assert m and int(m.group(1)) == len(CASES), (m and m.group(0), len(CASES))
    for entry, n in per_entry.items():
        assert f"`{entry}` {n}" in readme, (entry, n)


# -- the docs as written ----------------------------------------------------------------------------------------

DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
"""The README and every docs page (the pages that show commands and quote figures)."""

WORDS = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def test_docs_figures_are_what_the_commands_print(monkeypatch):
    """What the docs quote about the plan and the benchmarks is what the code has now: a resource count it quotes
    for a plan is the plan's, and docs/benchmarks.md's table has one row per target of benchmarks/run_all.py."""
    from ray_efa_eks.tools.plan_run import plan_tree

    readme = "".join(p.read_text() for p in DOC_PAGES)
    monkeypatch.chdir(ROOT)
    plan = plan_tree(overrides={"ray-efa-eks:gpuNodeCount": "64"})
    for quoted in re.findall(r"64-GPU-node stack[^\n]*?(\d+) resources", readme):
        assert int(quoted) == len(plan.resources), (quoted, len(plan.resources))
    doc = (ROOT / "benchmarks/run_all.py").read_text().split('"""')[1]
    targets = [ln for ln in doc.splitlines() if ln.startswith("| ") and not ln.startswith("| target")]
    section = (ROOT / "docs/benchmarks.md").read_text()
    rows = [
        ln
        for ln in section.split("| target | measured |", 1)[1].split("\n\n", 1)[0].splitlines()
        if ln.startswith("| ") and not ln.startswith("|---")
    ]
    assert len(rows) == len(targets), (len(rows), len(targets))
    said = re.search(r"measures the (\w+) targets", readme)
    assert not said or WORDS.get(said.group(1)) == len(targets), said.group(0)


def test_docs_examples_write_to_a_temporary_directory():
    """A command the README or a docs page shows never writes over committed files (docs/) unless the reader asks."""
    readme = "".join(p.read_text() for p in DOC_PAGES)
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, re.S)
    writers = [ln for b in blocks for ln in b.splitlines() if re.search(r"--report\s+(?!\"?\$\(mktemp)", ln)]
    assert not writers, writers
