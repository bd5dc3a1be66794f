"""Rule queue-quota-fits through ``ray-efa-eks check-rules``: team quotas the GPU node group cannot hold are refused."""

from __future__ import annotations

import json

import pytest

from ray_efa_eks.tools.command import main


def check(capsys, *config: str) -> tuple[int, str]:
    args = ["check-rules", "--defaults"]
    for c in config:
        args += ["--config", c]
    code = main(args)
    return code, capsys.readouterr().out


def teams(*t: str) -> str:
    return f"jobQueues={json.dumps(list(t))}"


@pytest.mark.parametrize(
    "config, fragments",
    [
        (
            (teams("vision:3nodes", "nlp:4gpus:borrow"),),
            [
                "[queue-quota-fits]",
                "ClusterQueue job-queues-clusterqueue-team-vision",
                "GPU quota (12)",
                "can hold (8 GPUs)",
            ],
        ),
        (
            (teams("vision:2nodes", "nlp:1nodes:borrow"),),
            ["[queue-quota-fits] stack", "promise 12 GPUs (team-vision 8, team-nlp 4)", "hold 8", "gpuNodeCount"],
        ),
        ((teams("a:1nodes", "b:1nodes", "c:1nodes"), "gpuScaleToZero=false"), ["promise 12 GPUs", "hold 8"]),
    ],
)
def test_quotas_beyond_the_node_group_are_refused(capsys, config, fragments):
    code, out = check(capsys, *config)
    assert code == 1
    for f in fragments:
        assert f in out


@pytest.mark.parametrize(
    "config",
    [
        (teams("vision:1nodes", "nlp:4gpus:borrow"),),
        (teams("vision:4nodes"), "gpuNodeCount=4"),
        (teams("vision:4nodes"), "gpuNodeCount=0"),  # parked: nothing can run, not checked
    ],
)
def test_quotas_that_fit_pass(capsys, config):
    code, out = check(capsys, *config)
    assert code == 0, out
    assert "queue-quota-fits" in out
