"""Issue 35, cold start: the GPU nodes' gp3 root volume and nodeadm's FastImagePull, as the stack declares them.

A GPU node from zero pulls the tens-of-GB DLC image onto its root volume; the launch template provisions gp3 IOPS
and throughput for it (EBS user guide, "General Purpose SSD volumes") and turns on nodeadm's ``FastImagePull``
feature gate in MIME multi-part user data EKS merges with its own (awslabs/amazon-eks-ami nodeadm/doc/examples.md;
EKS user guide, "Customize managed nodes with launch templates"). Bad combinations are refused before any resource,
naming the key and the fix; what EC2 itself refuses is also refused by the offline runner (tests/tools/
test_aws_rules.py, rule ``gp3-limits``).
"""

from __future__ import annotations

import base64
import email
from pathlib import Path

import pulumi
import pytest
import yaml

from ray_efa_eks.components import cold_start
from ray_efa_eks.components.config import ConfigError, StackConfig
from ray_efa_eks.components.ray_autoscaler import ALLOCATE_TIMEOUT_S
from ray_efa_eks.components.launch_template import node_config_user_data
from ray_efa_eks.tools.config_schema import docstrings
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
    assert cfg == {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig",
                   "spec": {"featureGates": {"FastImagePull": True}}}
    assert "userData" not in _template(default_run, "system").inputs


def test_fast_image_pull_off_leaves_eks_bootstrap_alone():
    run = shared_run({"gpuFastImagePull": "false"})
    assert "userData" not in _template(run, "gpu").inputs


def test_the_node_config_part_is_one_nodeadm_reads():
    """The MIME form of nodeadm's own example (examples.md): a ``multipart/mixed`` archive, the NodeConfig part typed
    ``application/node.eks.aws``; a gate set false is written false."""
    (cfg,) = _node_configs(node_config_user_data({"FastImagePull": False, "InstanceIdNodeName": True}))
    assert cfg["spec"]["featureGates"] == {"FastImagePull": False, "InstanceIdNodeName": True}


@pytest.mark.parametrize("settings,key,fix", [
    ({"gpuRootVolumeIops": "3000"}, "gpuRootVolumeThroughputMiBps = 1000",
     "raise gpuRootVolumeIops to at least 4000"),  # 0.25 MiB/s per IOPS
    ({"gpuRootVolumeIops": "80000", "gpuRootVolumeGiB": "150"}, "gpuRootVolumeIops = 80000",
     "raise gpuRootVolumeGiB to at least 160"),  # 500 IOPS per GiB
    ({"gpuRootVolumeIops": "80001"}, "gpuRootVolumeIops = 80001", "3,000 - 80,000"),
    ({"gpuRootVolumeIops": "2999"}, "gpuRootVolumeIops = 2999", "use 3000..80000"),
    ({"gpuRootVolumeThroughputMiBps": "2001"}, "gpuRootVolumeThroughputMiBps = 2001", "use 125..2000"),
    ({"gpuRootVolumeThroughputMiBps": "124"}, "gpuRootVolumeThroughputMiBps = 124", "use 125..2000"),
    ({"gpuFastImagePull": "sometimes"}, "gpuFastImagePull = 'sometimes'", "true or false"),
])
def test_what_ec2_refuses_is_refused_before_any_resource(settings, key, fix):
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping(settings)
    assert f"ray-efa-eks:{key} is invalid" in str(e.value) and fix in str(e.value)


@pytest.mark.parametrize("settings", [
    {"gpuRootVolumeIops": "8000", "gpuRootVolumeThroughputMiBps": "2000"},  # the maximum at the least IOPS it needs
    {"gpuRootVolumeIops": "3000", "gpuRootVolumeThroughputMiBps": "750"},  # the most the baseline carries
    {"gpuRootVolumeIops": "80000", "gpuRootVolumeGiB": "160"},
])
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


# -- the wait budget from zero nodes (components/cold_start.py) -----------------------------------------------------

GPUS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "gpus.md"


def test_the_gate_and_rays_allocate_timeout_cover_a_node_from_zero():
    """efaCheckWaitSeconds (the gate's wait for its GPU workers) and Ray's allocate timeout (a worker pod's wait for
    its node) each cover the sum of every part's high figure; the EC2 part fits the Cluster Autoscaler's
    max-node-provision-time (15 min, chart values.yaml), after which it would give the node up."""
    low, high = cold_start.budget_s()
    assert (low, high) == (194, 765)
    wait = StackConfig.from_mapping({}).efaCheckWaitSeconds
    assert high <= wait and high <= ALLOCATE_TIMEOUT_S
    assert wait - high >= 300, "at least 5 minutes of margin over the published figures"
    launch = next(p for p in cold_start.PARTS if p.name.startswith("EC2 launch"))
    assert launch.high_s < 15 * 60
    assert all(p.low_s <= p.high_s and p.source for p in cold_start.PARTS + (cold_start.JOB_START,))


def test_the_page_shows_the_budget_table_and_its_sum():
    """The table, its sum and the figure the key's docstring, docs/efa-gate.md and the README quote are the data's."""
    low, high = cold_start.budget_s()
    page = GPUS_PAGE.read_text()
    minutes = f"{round(low / 60)} to {round(high / 60)} minutes"
    assert cold_start.markdown_table() in page and f"**{low}-{high} s (about {minutes})**" in page
    assert f"at most {high} s" in docstrings()["efaCheckWaitSeconds"]
    assert f"at most {high} s" in (GPUS_PAGE.parent / "efa-gate.md").read_text()
    assert f"about **{minutes} from a job's request to its GPU workers**" in \
        (GPUS_PAGE.parents[1] / "README.md").read_text()
