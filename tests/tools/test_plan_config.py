"""Config the program never reads is said, and the plan shows every value it runs with and where it came from
(worst-ten item 6). Before: `--config aws:gpuNodeCount=7`, a misspelt namespace and PULUMI_CONFIG were
silent (PULUMI_CONFIG even changed the plan), and the Config block listed only the stack file's keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_efa_eks.tools import command

ROOT = Path(__file__).resolve().parents[2]


def plan(argv, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = command.main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "pair, says",
    [
        ("aws:gpuNodeCount=7", "the aws namespace holds no gpuNodeCount; this stack reads ray-efa-eks:gpuNodeCount"),
        ("ray-efa-ek:gpuNodeCount=7", "namespace holds no gpuNodeCount"),
        ("rayefaeks:gpuNodeCont=7", "did you mean ray-efa-eks:gpuNodeCount?"),
    ],
)
def test_config_never_read_is_a_warning(pair, says, capsys, monkeypatch, caplog):
    code, out, err = plan(["--config", pair], capsys, monkeypatch)
    assert code == 0, err
    text = out + err + caplog.text  # the program's pulumi.log.warn: stderr in a process, logging in pytest
    assert f"config {pair.split('=')[0]} is never read by this program" in text and says in text, text
    assert f"{pair.split('=')[0]}: 7  [--config, never read]" in out


def test_the_plan_shows_every_effective_value_and_its_source(capsys, monkeypatch):
    code, out, _ = plan(["--config", "gpuNodeCount=4"], capsys, monkeypatch)
    assert code == 0
    assert "  ray-efa-eks:gpuNodeCount: 4  [--config]" in out
    assert (
        "  ray-efa-eks:dlcImage: public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1  [Pulumi.dev.yaml]"
        in out
    )
    assert "  ray-efa-eks:checkpointPrefix: ray-train  [default]" in out
    assert "  ray-efa-eks:efaCheckWaitSeconds: null  [default]" in out  # unset: the cold-start model's budget
    assert "the gate waits 1320 s (the model's budget)" in out


def test_pulumi_config_is_ignored_as_pulumi_up_ignores_it(capsys, monkeypatch):
    """`pulumi up` hands the program the stack's config in PULUMI_CONFIG, replacing the shell's; the plan too."""
    import os

    monkeypatch.setenv("PULUMI_CONFIG", '{"ray-efa-eks:gpuNodeCount": "9"}')
    code, out, err = plan([], capsys, monkeypatch)
    assert code == 0 and "PULUMI_CONFIG is set in this environment" in err, err
    assert "node group gpu-mng: 0..2 x g6.12xlarge" in out and "  ray-efa-eks:gpuNodeCount: 2  [Pulumi.dev.yaml]" in out
    assert os.environ["PULUMI_CONFIG"] == '{"ray-efa-eks:gpuNodeCount": "9"}', "restored after the run"
