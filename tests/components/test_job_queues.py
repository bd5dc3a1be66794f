"""Team job queues (``jobQueues``): the key's refusals, the default stack without Kueue, and the objects the stack
registers with queues on, validated against Kueue v0.19.2's CRDs (tests/schemas/)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from ray_efa_eks.components.config.config import ConfigError, StackConfig
from tests.helpers.crd import plain, validate
from tests.helpers.mockruns import shared_run

TEAMS = {"jobQueues": json.dumps(["vision:1nodes", "nlp:4gpus:borrow"])}
CHART = Path(__file__).resolve().parents[1] / "fixtures/charts/kueue-0.19.2/values.yaml"


@pytest.mark.parametrize(
    "value, fragments",
    [
        (["vision:2"], ["jobQueues", "'vision:2'", "NAME:QUOTA[:borrow]", "vision:2nodes"]),
        (["Vision:1nodes"], ["lowercase DNS label"]),
        (["vision:0nodes"], ["NAME:QUOTA"]),
        (["vision:6gpus"], ["'vision:6gpus'", "not a whole number of 4-GPU nodes", "multiple of 4"]),
        (["a:1nodes", "a:2nodes"], ["'a:2nodes'", "listed twice"]),
        (["solo:1nodes:borrow"], ["borrow needs another team", "remove :borrow"]),
        ([f"{'a' * 41}:1nodes"], ["longer than 40"]),
    ],
)
def test_bad_team_lists_are_refused_naming_key_value_and_fix(value, fragments):
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({"jobQueues": value})
    for f in fragments:
        assert f in str(e.value)


def test_queues_need_the_checkpoint_bucket():
    with pytest.raises(ConfigError, match="checkpointBucket: true"):
        StackConfig.from_mapping({"jobQueues": ["vision:1nodes"], "checkpointBucket": False})


@pytest.mark.parametrize(
    "text, teams",
    [
        ('["vision:2nodes", "nlp:8gpus:borrow"]', [("vision", 2, "nodes", False), ("nlp", 8, "gpus", True)]),
        ("vision:1nodes,nlp:1nodes", [("vision", 1, "nodes", False), ("nlp", 1, "nodes", False)]),
    ],
)
def test_team_lists_parse(text, teams):
    got = StackConfig.from_mapping({"jobQueues": text}).job_queues
    assert [(t.name, t.quota, t.unit, t.borrow) for t in got] == teams


def test_default_stack_has_no_queues():
    run = shared_run()
    assert not [r for r in run.resources if "kueue" in r.type or "JobQueues" in r.type or "job-queues" in r.name]
    assert run.one("kubernetes:helm.sh/v3:Release", "kuberay-release")["values"]["watchNamespace"] == ["ray"]


@pytest.fixture(scope="module")
def queued():
    return shared_run(TEAMS)


def kueue_objects(run):
    return [
        plain({k: r[k] for k in ("apiVersion", "kind", "metadata", "spec")})
        for r in run.resources
        if r.type.startswith("kubernetes:kueue.x-k8s.io/")
    ]


def test_kueue_objects_match_the_pinned_crds(queued):
    objs = kueue_objects(queued)
    assert sorted(o["kind"] for o in objs) == [
        "ClusterQueue",
        "ClusterQueue",
        "LocalQueue",
        "LocalQueue",
        "ResourceFlavor",
    ]
    for o in objs:
        validate(o)


def test_crd_check_can_fail(queued):
    cq = next(o for o in kueue_objects(queued) if o["kind"] == "ClusterQueue")
    cq["spec"]["queueingStrategy"] = "Fastest"
    with pytest.raises(jsonschema.ValidationError):
        validate(cq)


def test_quotas_flavor_and_cohort(queued):
    objs = {(o["kind"], o["metadata"]["name"]): o for o in kueue_objects(queued)}
    flavor = objs[("ResourceFlavor", "gpu-g6-12xlarge")]["spec"]["nodeLabels"]
    assert flavor == {"ray-efa-eks/role": "gpu", "ray-efa-eks/instance-type": "g6.12xlarge"}
    vision, nlp = objs[("ClusterQueue", "team-vision")]["spec"], objs[("ClusterQueue", "team-nlp")]["spec"]
    assert vision["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 0}
    ]  # 1 node x 4 GPUs, lends only
    assert nlp["resourceGroups"][0]["flavors"][0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": 4}]
    assert vision["cohortName"] == nlp["cohortName"] and vision["preemption"]["reclaimWithinCohort"] == "Any"
    assert vision["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-vision"}}
    assert objs[("LocalQueue", "team-vision")]["metadata"]["namespace"] == "team-vision"


def test_no_cohort_without_borrowing():
    run = shared_run({"jobQueues": json.dumps(["vision:1nodes", "nlp:1nodes"])})
    for o in kueue_objects(run):
        assert "cohortName" not in o.get("spec", {}) and "borrowingLimit" not in json.dumps(o)


def test_team_namespaces_rbac_and_operator_watch(queued):
    ns = {
        r["metadata"]["name"]: r["metadata"].get("labels", {}) for r in queued.of_type("kubernetes:core/v1:Namespace")
    }
    for team in ("vision", "nlp"):
        labels = ns[f"team-{team}"]
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline" and labels["ray-efa-eks/team"] == team
    roles = [r for r in queued.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role") if "job-queues" in r.name]
    assert len(roles) == 2
    for role in roles:
        granted = {
            (g, res, v)
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for res in rule["resources"]
            for v in rule["verbs"]
        }
        assert ("ray.io", "rayjobs", "create") in granted and ("ray.io", "rayjobs", "watch") in granted
        assert not [x for x in granted if x[1] in ("secrets", "rayclusters") or x[2] in ("update", "patch", "*")]
    binding = queued.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding", "job-queues-vision")
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ray-efa-eks:team:vision"}
    ]
    watch = queued.one("kubernetes:helm.sh/v3:Release", "kuberay-release")["values"]["watchNamespace"]
    assert watch == ["ray", "team-vision", "team-nlp"]


def test_team_role_reaches_only_its_prefix(queued):
    policy = json.loads(queued.one("aws:iam/rolePolicy:RolePolicy", "job-queues-vision-storage")["policy"])
    objects = next(s for s in policy["Statement"] if s["Sid"] == "ReadWriteOwnPrefix")
    assert objects["Resource"].endswith("/teams/vision/*")
    listing = next(s for s in policy["Statement"] if s["Sid"] == "ListOwnPrefix")
    assert listing["Condition"]["StringLikeIfExists"]["s3:prefix"] == ["teams/vision", "teams/vision/*"]
    assoc = queued.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "job-queues-vision")
    assert (assoc["namespace"], assoc["serviceAccount"]) == ("team-vision", "ray-train")


def test_kueue_release_pinned_and_config_kept(queued):
    rel = queued.one("kubernetes:helm.sh/v3:Release", "job-queues-kueue")
    assert (rel["chart"], rel["version"]) == ("oci://registry.k8s.io/kueue/charts/kueue", "0.19.2")
    image = rel["values"]["controllerManager"]["manager"]["image"]
    assert image == {"repository": "registry.k8s.io/kueue/kueue", "tag": "v0.19.2", "pullPolicy": "IfNotPresent"}
    ours = yaml.safe_load(rel["values"]["managerConfig"]["controllerManagerConfigYaml"])
    chart = yaml.safe_load(yaml.safe_load(CHART.read_text())["managerConfig"]["controllerManagerConfigYaml"])
    changed = {"integrations", "resources", "waitForPodsReady", "managedJobsNamespaceSelector"}
    assert {k: v for k, v in ours.items() if k not in changed} == {k: v for k, v in chart.items() if k not in changed}
    assert "ray.io/rayjob" in chart["integrations"]["frameworks"]
    assert ours["integrations"]["frameworks"] == ["ray.io/rayjob"]
    # the timeout is the gate's wait: the cold-start model's budget when efaCheckWaitSeconds is unset
    assert ours["waitForPodsReady"]["blockAdmission"] is True and ours["waitForPodsReady"]["timeout"] == "1320s"
    assert ours["resources"] == {"quotaCheckStrategy": "IgnoreUndeclared"}


def test_team_workers_may_reach_their_nodes_efa_exporter(queued):
    """The RayJob's workers read their node's EFA counters from the node agent, as the shared cluster's do."""
    policy = queued.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "node-agent-ingress")
    allowed = json.dumps(policy["spec"])
    assert "team-vision" in allowed and "team-nlp" in allowed


def test_team_ray_pods_are_scraped_like_the_shared_clusters(queued):
    """A job's fabric verdict metric (on its Ray head) reaches Prometheus, as the gate's does."""
    monitors = [r for r in queued.of_type("kubernetes:monitoring.coreos.com/v1:PodMonitor") if "ray-" in r.name]
    assert len(monitors) == 2
    for m in monitors:
        validate({k: m[k] for k in ("apiVersion", "kind", "metadata", "spec")})
        assert m["spec"]["namespaceSelector"]["matchNames"] == ["ray", "team-vision", "team-nlp"]


def test_team_namespaces_admit_only_their_own_pods_and_the_metrics_scrape(queued):
    policies = {
        r["metadata"]["namespace"]: r["spec"]
        for r in queued.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if r["metadata"].get("namespace", "").startswith("team-") and r["metadata"]["name"] == "team-pods"
    }
    assert set(policies) == {"team-vision", "team-nlp"}
    spec = policies["team-vision"]
    assert spec["podSelector"] == {} and spec["policyTypes"] == ["Ingress"]
    own, metrics = spec["ingress"]
    assert own == {"from": [{"podSelector": {}}]}
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert {p["port"] for p in metrics["ports"]} == {8080, 44217, 44227}


def test_under_strict_mode_every_queue_namespace_reaches_dns_and_the_api_server_calls_kueue(queued):
    """The VPC CNI's strict mode denies a pod no policy selects, DNS included: Kueue's manager and the teams' Ray pods
    need an all-egress policy, and the API server must reach Kueue's webhook and visibility servers."""
    from tests.components.test_cluster_hardening import pod
    from tests.components.test_least_privilege import admitted, policies_of, selecting

    policies = policies_of(queued)
    namespaces = ["kueue-system", *(f"team-{t}" for t in ("vision", "nlp"))]
    for ns in namespaces:
        egress = [
            p["spec"] for p in policies if p["metadata"]["namespace"] == ns and "Egress" in p["spec"]["policyTypes"]
        ]
        assert egress == [{"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}], ns
        assert selecting(policies, pod(ns, app="anything")), ns
    manager = pod("kueue-system", **{"control-plane": "controller-manager"})
    for port in (9443, 8082):
        assert admitted(policies, pod("api-server-has-no-namespace"), manager, port), port
    assert not admitted(policies, pod("ray"), manager, 8443)
    labels = {
        r["metadata"]["name"]: (r["metadata"].get("labels") or {}).get("pod-security.kubernetes.io/enforce")
        for r in queued.of_type("kubernetes:core/v1:Namespace")
    }
    assert {ns: labels[ns] for ns in namespaces} == dict.fromkeys(namespaces, "baseline")
