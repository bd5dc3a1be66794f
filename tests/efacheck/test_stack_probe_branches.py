"""Every condition of the stack probe reached and its outcome asserted (issue 40): the branches
test_stack_probe.py did not reach (no GPU here: torch's CUDA answers are stood in for)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from ray_efa_eks.efacheck import stack_probe as sp

LOG = "h:1:1 [0] NCCL INFO NCCL version 2.29.7+cuda13.0\n"


def test_run_returns_stdout_only_for_a_command_that_exists_and_succeeds(monkeypatch):
    assert sp._run(["no-such-command-i40"]) is None
    assert sp._run([sys.executable, "-c", "print('ok')"]) == "ok\n"
    assert sp._run([sys.executable, "-c", "raise SystemExit(3)"]) is None

    def slow(*a, **kw):
        raise subprocess.TimeoutExpired(a[0], 20)
    monkeypatch.setattr(sp.subprocess, "run", slow)
    assert sp._run([sys.executable]) is None


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


@pytest.mark.parametrize("text, says", [("[1]", "must be a JSON object of layer -> version"),
                                        ("{bad", "not JSON"), ('{"ray": 2}', "'ray' is not a known layer")])
def test_a_bad_manifest_is_refused_naming_why(text, says):
    with pytest.raises(ValueError, match=says):
        sp.parse_manifest(text)
