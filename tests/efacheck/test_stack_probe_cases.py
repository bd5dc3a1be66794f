"""Every condition of the stack probe reached through ``probe``, ``manifest_for``, ``parse_manifest``,
``version_matches`` and ``compare_versions``, and its outcome asserted: the branches test_stack_probe.py did not
reach (no GPU here: torch's CUDA answers are stood in for; ``fi_info`` is a script on a PATH of the test's own)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from ray_efa_eks.efacheck import stack_probe as sp

LOG = "h:1:1 [0] NCCL INFO NCCL version 2.29.7+cuda13.0\n"


def _fi_info(monkeypatch, tmp_path, script: str | None) -> None:
    """PATH holds only ``fi_info`` running ``script`` (sh), or nothing at all."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if script is not None:
        (bin_dir / "fi_info").write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / "fi_info").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


@pytest.mark.parametrize(
    "script, libfabric",
    [
        (None, None),  # no fi_info in the image
        ('[ "$*" = --version ] && echo "libfabric: 2.1.0amzn3.0"', "2.1.0"),  # asked with its option
        ('echo "libfabric: 2.1.0amzn3.0"; exit 3', None),  # a failing fi_info's output is not believed
    ],
)
def test_libfabric_from_fi_info_only_when_it_exists_and_succeeds(monkeypatch, tmp_path, script, libfabric):
    _fi_info(monkeypatch, tmp_path, script)
    p = sp.probe("", env={}, root=str(tmp_path))
    assert p["libfabric"] == libfabric
    assert p["sources"].get("libfabric") == ("fi_info --version" if libfabric else None)


@pytest.fixture
def gpu_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "nccl", SimpleNamespace(version=lambda: (2, 28, 3)), raising=False)


def test_the_nccl_a_rank_loaded_wins_over_the_one_torch_was_built_with(gpu_torch, tmp_path):
    v = sp.probe(LOG, env={}, root=str(tmp_path), run=lambda a: None)
    assert v["nccl"] == "2.29.7"
    assert v["sources"]["nccl"] == "torch.cuda.nccl.version() 2.28.3 but the NCCL log says 2.29.7"
    same = sp.probe(LOG.replace("2.29.7", "2.28.3"), env={}, root=str(tmp_path), run=lambda a: None)
    assert same["nccl"] == "2.28.3" and same["sources"]["nccl"] == "torch.cuda.nccl.version()"


def test_without_torch_pyarrow_ray_and_with_a_bad_cuda_version_file(monkeypatch, tmp_path):
    for mod in ("torch", "pyarrow", "ray"):
        monkeypatch.setitem(sys.modules, mod, None)  # import raises ImportError
    (tmp_path / "usr/local/cuda").mkdir(parents=True)
    (tmp_path / "usr/local/cuda/version.json").write_text("{not json")
    v = sp.probe("", env={}, root=str(tmp_path), run=lambda a: None)
    assert (v["torch"], v["pyarrow"], v["ray"], v["cuda"], v["nccl"]) == (None, None, None, None, None)
    assert not {"torch", "pyarrow", "ray", "cuda"} & set(v["sources"])


def test_no_image_has_no_manifest():
    assert sp.manifest_for(None) is None and sp.manifest_for("") is None


def test_a_cuda_build_of_torch_names_its_cuda(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    v = sp.probe("", env={}, root=str(tmp_path), run=lambda a: None)
    assert (v["cuda"], v["sources"]["cuda"]) == ("13.0", "torch.version.cuda (build)")


@pytest.mark.parametrize(
    "text, says",
    [
        ("[1]", "must be a JSON object of layer -> version"),
        ("{bad", "not JSON"),
        ('{"ray": 2}', "'ray' is not a known layer"),
    ],
)
def test_a_bad_manifest_is_refused_naming_why(text, says):
    with pytest.raises(ValueError, match=says):
        sp.parse_manifest(text)


# --- survivors of the mutation tool (mutmut 3.8.1, .ci/mutation.py efacheck/stack_probe.py), killed here ---

G7E = (
    "\n".join(
        [
            "h:1:1 [0] NCCL INFO cudaDriverVersion 12080",
            "h:1:1 [0] NCCL INFO NCCL version 2.29.7+cuda13.0",
            "h:1:1 [0] NCCL INFO Successfully loaded external network plugin /opt/amazon/ofi-nccl/lib64/libnccl-net.so",
            "h:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.18.0",
            "h:1:1 [0] NCCL INFO NET/OFI Using Libfabric version 2.3",
        ]
    )
    + "\n"
)


def _tree(root, nvrm: bytes | None = None, cuda_json: str | None = None, efa: str | None = None) -> str:
    for rel, body in (
        ("proc/driver/nvidia/version", nvrm),
        ("usr/local/cuda/version.json", cuda_json),
        ("sys/module/efa/version", efa),
    ):
        if body is not None:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(body if isinstance(body, bytes) else body.encode())
    return str(root)


def test_the_whole_probe_from_the_strongest_source_of_each_layer(gpu_torch, monkeypatch, tmp_path):
    import pyarrow
    import ray

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(sp.socket, "gethostname", lambda: "node-a")
    root = _tree(
        tmp_path,
        nvrm=b"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n",
        cuda_json='{"cuda": {"version": "13.0.1"}}',
        efa="2.17.0g\n",
    )
    ran = []
    env = {"CUDA_VERSION": "13.0.2", sp.IMAGE_ENV: "img:train-ml-cuda-v1.1"}
    p = sp.probe(G7E, env=env, root=root, run=lambda argv: ran.append(argv))
    assert ran == []  # the log named libfabric: fi_info is not run
    assert p == {
        "torch": torch.__version__,
        "cuda": "13.0.2",
        "driver": "580.95.05",
        "efa_driver": "2.17.0g",
        "nccl": "2.29.7",
        "net_plugin": "/opt/amazon/ofi-nccl/lib64/libnccl-net.so",
        "aws_ofi_nccl": "1.18.0",
        "libfabric": "2.3",
        "ray": ray.__version__,
        "pyarrow": pyarrow.__version__,
        "image": "img:train-ml-cuda-v1.1",
        "host": "node-a",
        "sources": {
            "torch": "torch.__version__",
            "nccl": "torch.cuda.nccl.version() 2.28.3 but the NCCL log says 2.29.7",
            "cuda": "$CUDA_VERSION",
            "driver": "/proc/driver/nvidia/version",
            "aws_ofi_nccl": "NCCL log (NET/OFI)",
            "libfabric": "NCCL log (NET/OFI)",
            "net_plugin": "NCCL log (Successfully loaded external ... plugin)",
            "efa_driver": "/sys/module/efa/version (the node's module, seen from the pod)",
            "pyarrow": "pyarrow.__version__",
            "ray": "ray.__version__",
            "image": f"${sp.IMAGE_ENV}",
        },
    }


def test_the_whole_probe_from_the_weaker_sources(monkeypatch, tmp_path):
    monkeypatch.setattr(sp.socket, "gethostname", lambda: "node-b")
    monkeypatch.setenv("CUDA_VERSION", "12.0.0")  # the caller's env, not the process's, is read
    root = _tree(tmp_path, cuda_json='{"cuda": {"version": "13.0.1"}}', efa="\n")
    log = "h:1:1 [0] NCCL INFO NCCL version 2.29.7+cuda13.0\nh:1:1 [0] NCCL INFO cudaDriverVersion 13000\n"
    p = sp.probe(
        log,
        env={},
        root=root,
        run=lambda argv: "libfabric: 2.1.0amzn3.0\n" if argv == ["fi_info", "--version"] else None,
    )
    assert {k: p[k] for k in ("cuda", "driver", "nccl", "libfabric", "efa_driver", "image", "host")} == {
        "cuda": "13.0.1",
        "driver": "CUDA 13.0",
        "nccl": "2.29.7",
        "libfabric": "2.1.0",
        "efa_driver": None,
        "image": None,
        "host": "node-b",
    }
    src = p["sources"]
    assert (src["cuda"], src["driver"], src["nccl"], src["libfabric"]) == (
        "/usr/local/cuda/version.json",
        "NCCL log cudaDriverVersion",
        "NCCL log",
        "fi_info --version",
    )
    assert src["efa_driver"].startswith("not visible: no /sys/module/efa/version in this pod (")
    assert "the efa module is not loaded on the node, or the pod has no /sys" in src["efa_driver"]
    assert "image" not in src and "aws_ofi_nccl" not in src and "net_plugin" not in src


def test_probe_reads_the_process_environment_and_the_real_root_by_default(monkeypatch):
    import builtins

    monkeypatch.setenv(sp.IMAGE_ENV, "img:from-the-pod")
    monkeypatch.delenv("CUDA_VERSION", raising=False)
    read, real_open = [], builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **kw: read.append(path) or real_open(path, *a, **kw))
    p = sp.probe(run=lambda argv: None)
    monkeypatch.undo()
    assert p["image"] == "img:from-the-pod" and p["nccl"] is None
    assert [r for r in read if str(r).startswith(("/usr/", "/proc/", "/sys/"))] == [
        "/usr/local/cuda/version.json",
        "/proc/driver/nvidia/version",
        "/sys/module/efa/version",
    ]


def test_nccl_is_not_asked_of_torch_without_a_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "nccl", SimpleNamespace(version=lambda: (2, 28, 3)), raising=False)
    assert sp.probe("", env={}, root=str(tmp_path), run=lambda a: None)["nccl"] is None


def test_version_files_with_bytes_that_are_not_utf8_are_still_read(tmp_path):
    root = _tree(
        tmp_path, nvrm=b"NVRM version: NVIDIA UNIX Kernel Module  580.95.05  \xff\xfe Build\n", efa=b"2.17.0g\xff\n"
    )
    p = sp.probe("", env={}, root=root, run=lambda a: None)
    assert p["driver"] == "580.95.05" and p["efa_driver"] == "2.17.0g\ufffd"


def test_a_hung_fi_info_is_bounded(monkeypatch, tmp_path):
    seen = {}

    def hung(argv, **kw):
        seen.update(kw)
        if kw.get("timeout") is None:
            raise AssertionError("no timeout: a hung fi_info would hang the rank")
        raise subprocess.TimeoutExpired(argv, kw["timeout"])

    _fi_info(monkeypatch, tmp_path, 'echo "libfabric: 2.1.0"')
    monkeypatch.setattr(sp.subprocess, "run", hung)
    assert sp.probe("", env={}, root=str(tmp_path))["libfabric"] is None and 0 < seen["timeout"] <= 60


def test_the_manifest_of_references_with_a_registry_port_a_digest_or_no_path():
    digest = "@sha256:" + "0" * 64
    V11 = sp.MANIFESTS["train-ml-cuda-v1.1"]
    assert sp.manifest_for("localhost:5000/dlc/ray:train-ml-cuda-v1.1") == V11
    assert sp.manifest_for("localhost:5000/ray:train-ml-cuda-v1.1" + digest) == V11
    assert sp.manifest_for("ray:train-ml-cuda-v1.1") == V11
    assert sp.manifest_for("localhost:5000/dlc/ray" + digest) is None  # no tag: no manifest


def test_a_bad_manifest_message_lists_the_layers():
    with pytest.raises(ValueError) as e:
        sp.parse_manifest('{"ray": "2.58.0", "pytorch": "2.13.0"}')
    assert str(e.value).startswith("--manifest: 'pytorch' is not a known layer")
    assert str(e.value).endswith(f"layers: {', '.join(sp.KEYS)}")  # every layer a manifest may name
    with pytest.raises(ValueError) as e:
        sp.parse_manifest("ray")
    assert str(e.value).startswith("--manifest 'ray': not JSON (") and str(e.value).endswith(
        """e.g. '{"ray": "2.58.0", "torch": "2.13.0", "cuda": "13.0.2", "nccl": "2.29.7"}'"""
    )


@pytest.mark.parametrize(
    "want, got, match",
    [
        ("2.13.0", "2.13.0+cu130", True),  # a local build suffix is not part of the release
        ("2.1.0", "2.1amzn3.0", True),  # letters end the release: 2.1 against 2.1.0
        ("2.1.3", "2.1amzn3.0", True),
        ("1.18.0", " 1.18.0-aws ", True),
        ("2.3.1", "2.3.0RC1", False),
        ("2.1.0.5", "2.1.0RC4", True),  # an upper-case letter ends the release too: 2.1.0 against 2.1.0.5
        ("13", "13.0.2", True),  # equal as far as both are precise
        ("13.1", "13.0.2", False),
        ("2.58.0", "unknown", False),  # nothing to compare is no match
        ("", "", False),
    ],
)
def test_versions_match_as_far_as_both_releases_are_precise(want, got, match):
    assert sp.version_matches(want, got) is match


@pytest.mark.parametrize(
    "hosts, values",
    [
        (["2.0", "2.0", "2.0", "x", "x", "2.0"], {"2.0": "0-2,5", "x": "3-4"}),
        (["2.0", "x", "2.0"], {"2.0": "0,2", "x": "1"}),
        (["2.0", "2.0", "x", "2.0", "2.0"], {"2.0": "0-1,3-4", "x": "2"}),
    ],
)
def test_ranks_that_agree_are_named_as_ranges(hosts, values):
    r = sp.compare_versions([{"ray": v, "host": f"n{i}"} for i, v in enumerate(hosts)])
    assert {t["key"]: t for t in r["table"]}["ray"]["values"] == values


def test_the_whole_comparison_of_ranks_and_manifest():
    base = {"torch": "2.13.0+cu130", "cuda": "13.0", "nccl": "2.29.7", "ray": "2.57.0", "host": "node-a"}
    probes = [base, {**base, "host": "node-b"}, {**base, "host": "node-b", "driver": "580.95.05"}]
    want = {"ray": "2.58.0", "cuda": "13.0.2", "driver": "580.95.05"}
    r = sp.compare_versions(probes, want)
    rows = {t["key"]: t for t in r["table"]}
    assert [t["key"] for t in r["table"]] == list(sp.KEYS)
    assert rows["cuda"] == {"key": "cuda", "expected": "13.0.2", "values": {"13.0": "0-2"}, "status": "ok"}
    assert rows["ray"] == {"key": "ray", "expected": "2.58.0", "values": {"2.57.0": "0-2"}, "status": "warning"}
    assert rows["driver"] == {
        "key": "driver",
        "expected": "580.95.05",
        "values": {"None": "0-1", "580.95.05": "2"},
        "status": "failure",
    }
    assert rows["libfabric"] == {"key": "libfabric", "expected": None, "values": {"None": "0-2"}, "status": "unknown"}
    assert r == {
        "status": "failure",
        "strict": False,
        "table": r["table"],
        "reasons": [
            "ranks disagree on driver: None on ranks 0-1 (node-a, node-b); 580.95.05 on ranks 2 (node-b)",
            "ray 2.57.0 differs from the image manifest's 2.58.0 (a warning; --strict-versions makes it a failure)",
        ],
    }
    strict = sp.compare_versions(probes[:2], want, strict=True)
    assert strict["status"] == "failure" and strict["strict"] is True
    assert strict["reasons"] == ["ray 2.57.0 differs from the image manifest's 2.58.0"]
    assert {t["key"]: t["status"] for t in strict["table"]}["ray"] == "failure"
    warn = sp.compare_versions(probes[:2], want)
    assert (warn["status"], len(warn["reasons"])) == ("warning", 1)
