"""Cold start: the GPU nodes' gp3 root volume and nodeadm's FastImagePull, as the stack declares them.

A GPU node from zero pulls the tens-of-GB DLC image onto its root volume; the launch template provisions gp3 IOPS
and throughput for it (EBS user guide, "General Purpose SSD volumes") and turns on nodeadm's ``FastImagePull``
feature gate in MIME multi-part user data EKS merges with its own (awslabs/amazon-eks-ami nodeadm/doc/examples.md;
EKS user guide, "Customize managed nodes with launch templates"). Bad combinations are refused before any resource,
naming the key and the fix; what EC2 itself refuses is also refused by the offline runner (tests/tools/
test_aws_rules.py, rule ``gp3-limits``).
"""

from __future__ import annotations

import base64
import json
import email
from pathlib import Path

import pulumi
import pytest
import yaml

from ray_efa_eks.components.nodes import cold_start
from ray_efa_eks.components.config.config import ConfigError, StackConfig
from ray_efa_eks.components.addons.efa_check import Deadlines
from ray_efa_eks.components.ray.ray_autoscaler import ALLOCATE_TIMEOUT_S
from ray_efa_eks.components.nodes.launch_template import node_config_user_data
from ray_efa_eks.tools.dev.config_schema import docstrings
from ray_efa_eks.tools.mockrun import run_program
from tests.helpers.mockruns import shared_run

MNG = "eks:index:ManagedNodeGroup"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


def _template(run, group: str):
    ref = run.one(MNG, group)["launchTemplate"]["id"]
    (lt,) = [r for r in run.of_type(LT) if run.ids.get(r.urn) == ref]
    return lt


def _node_configs(user_data: str) -> list[dict]:
    """The NodeConfig documents nodeadm reads from the user data (each ``application/node.eks.aws`` part)."""
    msg = email.message_from_string(base64.b64decode(user_data, validate=True).decode())
    assert msg.is_multipart(), "EKS merges only a MIME multi-part archive"
    return [yaml.safe_load(p.get_payload()) for p in msg.walk() if p.get_content_type() == "application/node.eks.aws"]


def test_gpu_root_volume_is_provisioned_for_the_pull_and_the_system_one_is_not(default_run):
    gpu = _template(default_run, "gpu")["blockDeviceMappings"][0]["ebs"]
    assert (gpu["iops"], gpu["throughput"], gpu["volumeSize"]) == (16000, 1000, 200)
    system = _template(default_run, "system")["blockDeviceMappings"][0]["ebs"]
    assert "iops" not in system and "throughput" not in system  # the always-on node stays at the free baseline


def test_gpu_user_data_turns_on_fast_image_pull_and_nothing_else(default_run):
    (cfg,) = _node_configs(_template(default_run, "gpu")["userData"])
    assert cfg == {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"featureGates": {"FastImagePull": True}},
    }
    assert "userData" not in _template(default_run, "system").inputs


def test_fast_image_pull_off_leaves_eks_bootstrap_alone():
    run = shared_run({"gpuFastImagePull": "false"})
    assert "userData" not in _template(run, "gpu").inputs


def test_the_node_config_part_is_one_nodeadm_reads():
    """The MIME form of nodeadm's own example (examples.md): a ``multipart/mixed`` archive, the NodeConfig part typed
    ``application/node.eks.aws``; a gate set false is written false."""
    (cfg,) = _node_configs(node_config_user_data({"FastImagePull": False, "InstanceIdNodeName": True}))
    assert cfg["spec"]["featureGates"] == {"FastImagePull": False, "InstanceIdNodeName": True}


@pytest.mark.parametrize(
    "settings,key,fix",
    [
        (
            {"gpuRootVolumeIops": "3000"},
            "gpuRootVolumeThroughputMiBps = 1000",
            "raise gpuRootVolumeIops to at least 4000",
        ),  # 0.25 MiB/s per IOPS
        (
            {"gpuRootVolumeIops": "80000", "gpuRootVolumeGiB": "150"},
            "gpuRootVolumeIops = 80000",
            "raise gpuRootVolumeGiB to at least 160",
        ),  # 500 IOPS per GiB
        ({"gpuRootVolumeIops": "80001"}, "gpuRootVolumeIops = 80001", "3,000 - 80,000"),
        ({"gpuRootVolumeIops": "2999"}, "gpuRootVolumeIops = 2999", "use 3000..80000"),
        ({"gpuRootVolumeThroughputMiBps": "2001"}, "gpuRootVolumeThroughputMiBps = 2001", "use 125..2000"),
        ({"gpuRootVolumeThroughputMiBps": "124"}, "gpuRootVolumeThroughputMiBps = 124", "use 125..2000"),
        ({"gpuFastImagePull": "sometimes"}, "gpuFastImagePull = 'sometimes'", "true or false"),
    ],
)
def test_what_ec2_refuses_is_refused_before_any_resource(settings, key, fix):
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping(settings)
    assert f"ray-efa-eks:{key} is invalid" in str(e.value) and fix in str(e.value)


@pytest.mark.parametrize(
    "settings",
    [
        {"gpuRootVolumeIops": "8000", "gpuRootVolumeThroughputMiBps": "2000"},  # the maximum at the least IOPS it needs
        {"gpuRootVolumeIops": "3000", "gpuRootVolumeThroughputMiBps": "750"},  # the most the baseline carries
        {"gpuRootVolumeIops": "80000", "gpuRootVolumeGiB": "160"},
    ],
)
def test_the_edges_ec2_accepts_plan(settings):
    StackConfig.from_mapping(settings)


def test_fast_image_pull_below_600_mibps_warns_not_refuses(monkeypatch):
    """nodeadm's docs recommend at least 600 MiB/s ("Below that value, you may see longer image pull times"): a
    preference, so a warning naming both keys; EC2 accepts the volume."""
    seen: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: seen.append(msg))
    run_program({"gpuRootVolumeIops": "3000", "gpuRootVolumeThroughputMiBps": "500"})
    assert any("gpuFastImagePull with gpuRootVolumeThroughputMiBps 500" in w and "600 MiB/s" in w for w in seen), seen
    seen.clear()
    run_program({"gpuRootVolumeIops": "3000", "gpuRootVolumeThroughputMiBps": "500", "gpuFastImagePull": "false"})
    assert not any("gpuFastImagePull" in w for w in seen)


# -- the wait budget from zero nodes (components/nodes/cold_start.py) -----------------------------------------------------

GPUS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "gpus.md"


def test_the_gate_and_rays_allocate_timeout_cover_a_node_from_zero():
    """efaCheckWaitSeconds unset is the model's budget: every part's high figure plus one failed launch the Cluster
    Autoscaler retries after its 5-minute backoff (its FAQ's default), rounded up to a minute; Ray's allocate timeout
    covers it too, and the EC2 part fits the Cluster Autoscaler's max-node-provision-time (15 min)."""
    low, high = cold_start.budget_s()
    assert (low, high) == (271, 662)
    cfg = StackConfig.from_mapping({})
    assert cfg.efaCheckWaitSeconds is None and cfg.efa_check_wait_s == cold_start.wait_budget_s() == 1320
    assert high + 300 + 20 + 300 <= 1320 < high + 300 + 20 + 300 + 60
    assert cfg.efa_check_wait_s <= ALLOCATE_TIMEOUT_S
    assert Deadlines().topology_wait_s == 1320
    assert cold_start.LAUNCH.high_s < 15 * 60
    assert all(p.low_s <= p.high_s and p.source for p in cold_start.parts() + (cold_start.JOB_START,))


@pytest.mark.parametrize(
    "settings,wait",
    [
        ({}, 1320),
        ({"dlcImageGiB": "40"}, 1620),  # 20 GiB more at the default pull's 15.8 s/GiB
        ({"gpuFastImagePull": "false"}, 1320),  # the high figure is the default pull either way
        ({"gpuInstanceType": "p5.48xlarge"}, 1320),
        ({"efaCheckWaitSeconds": "900"}, 900),  # a set value replaces the model's
    ],
)
def test_the_gates_wait_follows_the_model(settings, wait):
    assert StackConfig.from_mapping(settings).efa_check_wait_s == wait
    job = json.dumps(shared_run(settings).one("kubernetes:batch/v1:Job")["spec"])
    assert f"--wait-s {wait} " in job


def test_the_proof_beside_the_pull_shortens_the_path_and_the_pull_scales_with_the_image():
    before, after = cold_start.first_step_s(cold_start.BEFORE), cold_start.first_step_s()
    assert after[1] < before[1] and after[0] <= before[0]
    small = cold_start.pull_part(10)
    big = cold_start.pull_part(40)
    assert abs(big.high_s - 4 * small.high_s) <= 4 and big.low_s < big.high_s  # linear in the size (ceil each)
    assert cold_start.pull_part(19.3e9 / 2**30).high_s == 284  # the anchor: 4 m 44 s for 19.3 GB
    assert cold_start.pull_part(19.3e9 / 2**30).low_s == 133  # 2 m 13 s with SOCI parallel pull
    assert cold_start.pull_part(19.3e9 / 2**30, fast_image_pull=False).low_s == 284  # no parallel pull: default rate


def test_plan_prints_the_model_for_the_planned_type_and_image():
    from ray_efa_eks.tools.plan_render import render_text
    from ray_efa_eks.tools.plan_run import plan_tree

    text = render_text(
        plan_tree(overrides={"ray-efa-eks:gpuInstanceType": "p5.48xlarge", "ray-efa-eks:dlcImageGiB": "30"})
    )
    lo, hi = cold_start.budget_s(cold_start.parts(cold_start.Layout("p5.48xlarge", 30)))
    assert f"cold start of a p5.48xlarge from zero (30 GiB DLC, account ECR, FastImagePull on): {lo}-{hi} s" in text
    assert "the gate waits 1440 s (the model's budget)" in text
    assert "cited + measured  DLC image pull and unpack (30 GiB)" in text


def test_the_page_shows_the_budget_table_and_its_sum():
    """The table, its sum, the before/after table and the figures the key's docstring, docs/efa-gate.md and the
    README quote are the model's."""
    low, high = cold_start.budget_s()
    page = GPUS_PAGE.read_text()
    minutes = f"{round(low / 60)} to {round(high / 60)} minutes"
    assert cold_start.markdown_table() in page and f"**{low}-{high} s (about {minutes})**" in page
    assert cold_start.summary_table() in page
    assert f"**{cold_start.wait_budget_s()} s** for the default stack" in page
    assert "1320 s for the default stack" in docstrings()["efaCheckWaitSeconds"]
    assert f"({high} s) plus one Cluster Autoscaler retry" in (GPUS_PAGE.parent / "efa-gate.md").read_text()
    assert (
        f"about **{minutes} from a job's request to its GPU workers**"
        in (GPUS_PAGE.parents[1] / "README.md").read_text()
    )
