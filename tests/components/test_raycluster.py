"""The RayCluster the program registers, validated against the real KubeRay CRD and Kubernetes schemas."""

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from ray_efa_eks.components.nodes.instances import CATALOGUE
from tests.helpers.mockruns import shared_run
from ray_efa_eks.components.ray.raycluster import RayClusterArgs, WorkerGroupArgs, build_spec, ray_start_params
from ray_efa_eks.components.kube import check_guaranteed, pod_resources

CRD = yaml.load(
    (Path(__file__).parents[1] / "schemas/ray.io_rayclusters.yaml").read_text(), Loader=yaml.CSafeLoader
)  # libyaml: the same data as safe_load, 10x faster on the CRD
SCHEMA = next(v for v in CRD["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
K8S_VERSION = "1.33.0"
IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
_VALIDATORS: dict[int, tuple[dict, jsonschema.protocols.Validator]] = {}


def validate(instance: dict, schema: dict = SCHEMA) -> None:
    """``jsonschema.validate(instance, schema)``: the same validator class (the schema's draft) and the same
    ValidationError for an invalid instance, but the schema itself is checked against its metaschema once, not on
    every call (5 s for the RayCluster CRD)."""
    if id(schema) not in _VALIDATORS:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        _VALIDATORS[id(schema)] = (schema, cls(schema))
    _VALIDATORS[id(schema)][1].validate(instance)


def raycluster(run):
    return run.one("kubernetes:ray.io/v1:RayCluster")


def pod_templates(spec):
    yield spec["headGroupSpec"]["template"]
    for g in spec["workerGroupSpecs"]:
        yield g["template"]


def containers(spec):
    for t in pod_templates(spec):
        yield from t["spec"]["containers"]


@pytest.mark.parametrize("run_name", ["default_run", "p5_run"])
def test_matches_kuberay_crd_schema(request, run_name):
    rc = raycluster(request.getfixturevalue(run_name))
    obj = {"apiVersion": rc["apiVersion"], "kind": rc["kind"], "metadata": rc["metadata"], "spec": rc["spec"]}
    validate(obj)


def test_crd_schema_rejects_numbers_in_ray_start_params(default_run):
    spec = dict(raycluster(default_run)["spec"])
    bad = {**spec, "headGroupSpec": {**spec["headGroupSpec"], "rayStartParams": {"num-cpus": 0}}}
    with pytest.raises(jsonschema.ValidationError):
        validate({"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": bad})


@pytest.mark.parametrize("run_name", ["default_run", "p5_run"])
def test_pod_templates_match_kubernetes_schema(request, run_name):
    for t in pod_templates(raycluster(request.getfixturevalue(run_name))["spec"]):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", **t.get("metadata", {})},
            "spec": t["spec"],
        }
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_job_matches_kubernetes_schema(default_run):
    job = default_run.one("kubernetes:batch/v1:Job")
    kubernetes_validate.validate(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": job["metadata"], "spec": job["spec"]},
        K8S_VERSION,
        strict=True,
    )


def test_one_image_everywhere(default_run):
    spec = raycluster(default_run)["spec"]
    cached = IMAGE.replace("public.ecr.aws/", "123456789012.dkr.ecr.us-east-1.amazonaws.com/ray-efa-dev-ecr-public/")
    assert {c["image"] for c in containers(spec)} == {cached}  # through the account's pull-through cache
    assert default_run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]["image"] == cached


def test_head(default_run):
    head = raycluster(default_run)["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert head["serviceType"] == "ClusterIP"
    assert head["template"]["spec"]["nodeSelector"] == {"ray-efa-eks/role": "system"}
    res = head["template"]["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in res["limits"]


def test_ray_version_and_string_params(default_run):
    spec = raycluster(default_run)["spec"]
    assert spec["rayVersion"] == "2.58.0"
    for params in [spec["headGroupSpec"]["rayStartParams"], *[g["rayStartParams"] for g in spec["workerGroupSpecs"]]]:
        assert all(isinstance(v, str) for v in params.values())


@pytest.mark.parametrize("run_name", ["default_run", "p5_run"])
def test_guaranteed_everywhere(request, run_name):
    for c in containers(raycluster(request.getfixturevalue(run_name))["spec"]):
        assert c["resources"]["requests"] == c["resources"]["limits"]


@pytest.mark.parametrize("run_name,itype", [("default_run", "g6.12xlarge"), ("p5_run", "p5.48xlarge")])
def test_worker_gpu_and_efa_from_catalogue(request, run_name, itype):
    (group,) = raycluster(request.getfixturevalue(run_name))["spec"]["workerGroupSpecs"]
    it = CATALOGUE[itype]
    lim = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert lim["nvidia.com/gpu"] == str(it.gpus) and lim["vpc.amazonaws.com/efa"] == str(it.max_efa_interfaces)
    assert int(lim["cpu"]) < it.vcpus
    # on demand the GPU workers scale from zero: Ray's autoscaler owns replicas, the spec none
    assert (group["minReplicas"], group["maxReplicas"]) == (0, 2) and "replicas" not in group
    env = {e["name"]: e.get("value") for e in group["template"]["spec"]["containers"][0]["env"]}
    assert env["FI_PROVIDER"] == "efa" and env["NCCL_SOCKET_IFNAME"].startswith("^lo")
    assert ("FI_EFA_USE_DEVICE_RDMA" in env) == it.gpudirect_rdma
    assert group["template"]["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"
    # the NCCL_* values the stack rendered, said on the pod (training/fabric.py tells them from a user's own)
    assert json.loads(env["RAY_EFA_EKS_STACK_NCCL_ENV"]) == {k: v for k, v in env.items() if k.startswith("NCCL_")}
    head = raycluster(request.getfixturevalue(run_name))["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head_env = {e["name"]: e.get("value") for e in head["env"]}
    for e in (env, head_env):  # the training CLI's memory check reads them where the job's driver runs (the head)
        assert (e["RAY_EFA_EKS_GPU_MODEL"], e["RAY_EFA_EKS_GPU_MEMORY_MIB"]) == (it.gpu_model, str(it.gpu_memory_mib))


def test_replicas_follow_gpu_node_count():
    run = shared_run({"gpuNodeCount": "3", "gpuScaleToZero": "false"})
    assert raycluster(run)["spec"]["workerGroupSpecs"][0]["replicas"] == 3
    assert raycluster(shared_run({"gpuNodeCount": "3"}))["spec"]["workerGroupSpecs"][0]["maxReplicas"] == 3


def test_gpu_workers_scale_from_zero_with_autoscaler_v2():
    """KubeRay 1.7: autoscalerOptions.version v2 (KubeRay sets RAY_enable_autoscaler_v2 on the head itself and refuses
    both), idleTimeoutSeconds only with v2, the allocation timeout on the autoscaler container."""
    spec = raycluster(shared_run({"gpuIdleTimeoutSeconds": "900"}))["spec"]
    assert spec["enableInTreeAutoscaling"] is True
    opts = spec["autoscalerOptions"]
    assert opts["version"] == "v2" and opts["idleTimeoutSeconds"] == 900
    assert {"name": "RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S", "value": "1800"} in opts["env"]
    assert opts["resources"]["requests"] == opts["resources"]["limits"]
    head = spec["headGroupSpec"]["template"]["spec"]
    assert all(e["name"] != "RAY_enable_autoscaler_v2" for c in head["containers"] for e in c["env"])
    # the autoscaler's token is projected for its container alone; no Ray container mounts it
    (vol,) = [v for v in head["volumes"] if "projected" in v]
    assert opts["volumeMounts"][0]["name"] == vol["name"]
    assert all(m["name"] != vol["name"] for c in containers(spec) for m in c.get("volumeMounts", []))
    obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray"}, "spec": spec}
    validate(obj)


@pytest.mark.parametrize(
    "cfg",
    [
        {"gpuScaleToZero": "false"},
        {
            "gpuCapacity": "reservation",
            "availabilityZone": "us-east-1a",
            "gpuCapacityReservationId": "cr-0123456789abcdef0",
        },
    ],
)
def test_fixed_fleet_keeps_todays_worker_group(cfg):
    spec = raycluster(shared_run(cfg))["spec"]
    assert spec["enableInTreeAutoscaling"] is False and "autoscalerOptions" not in spec
    (group,) = spec["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2


def test_no_efa_env_or_request_when_efa_off():
    run = shared_run({"efa": "false", "efaCheck": "false"})
    c = raycluster(run)["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    names = {e["name"] for e in c["env"]}
    assert not names & {"FI_PROVIDER", "NCCL_NET_PLUGIN", "FI_EFA_USE_DEVICE_RDMA"}
    assert "vpc.amazonaws.com/efa" not in c["resources"]["limits"]


def test_operator_chart_pinned(default_run):
    rel = default_run.one("kubernetes:helm.sh/v3:Release", "kuberay")
    assert rel["chart"] == "kuberay-operator" and rel["version"] == "1.7.0"
    assert rel["repositoryOpts"]["repo"] == "https://ray-project.github.io/kuberay-helm/"
    assert rel["values"]["nodeSelector"] == {"ray-efa-eks/role": "system"}


def test_efa_check_job(default_run):
    job = default_run.one("kubernetes:batch/v1:Job")
    assert job["spec"]["backoffLimit"] == 0
    assert "pulumi.com/skipAwait" not in job["metadata"].get("annotations", {})
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "python -m ray_efa_eks.efacheck.efa_check --json" in script
    assert "ray-head-svc.ray.svc.cluster.local:8265" in script and "--working-dir /opt/ray-efa-eks " in script
    cm = default_run.one("kubernetes:core/v1:ConfigMap", "efa-check")
    assert {
        "ray_efa_eks.__init__.py",
        "ray_efa_eks.efacheck.nccl_log.py",
        "ray_efa_eks.efacheck.efa_check.py",
        "ray_efa_eks.efacheck.__init__.py",
        "ray_efa_eks.efacheck.fsdp_shapes.py",
    } <= set(cm["data"])
    # the EFA proof, the root package and the gate's typed options (the spec the check parses its argv into)
    spec = {"ray_efa_eks.__init__.py", "ray_efa_eks.components.__init__.py", "ray_efa_eks.components.gate_request.py"}
    assert not [k for k in cm["data"] if not k.startswith("ray_efa_eks.efacheck.") and k not in spec]
    pod = job["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"] == "code"}
    assert mounts == {"code": "/opt/ray-efa-eks/ray_efa_eks"}  # the working_dir holds ray_efa_eks/, its real name
    items = {
        v["name"]: {i["key"]: i["path"] for i in v["configMap"]["items"]} for v in pod["volumes"] if "configMap" in v
    }
    assert items["code"]["ray_efa_eks.efacheck.nccl_log.py"] == "efacheck/nccl_log.py"
    assert items["code"]["ray_efa_eks.__init__.py"] == "__init__.py"
    assert set(cm["data"]) == {k for v in items.values() for k in v}  # every shipped file is mounted
    # Job is created after the RayCluster: its parent chain is the EfaCheckJob, created after RayCluster registration
    types = [r.type for r in default_run.resources]
    assert types.index("kubernetes:ray.io/v1:RayCluster") < types.index("kubernetes:batch/v1:Job")


def test_efa_check_nonblocking():
    job = shared_run({"efaCheckBlocking": "false"}).one("kubernetes:batch/v1:Job")
    assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


# --- guards ----------------------------------------------------------------------------------


def test_guard_requests_differ_from_limits():
    res = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    with pytest.raises(ValueError, match="Guaranteed QoS"):
        check_guaranteed(res, "c")
    check_guaranteed(pod_resources("1", "1Gi"), "c")


def test_guard_ray_start_params():
    assert ray_start_params({"num-cpus": 0, "block": True}) == {"num-cpus": "0", "block": "true"}
    with pytest.raises(ValueError, match="scalar"):
        ray_start_params({"resources": {"a": 1}})
    with pytest.raises(ValueError, match="without dashes"):
        ray_start_params({"--num-cpus": 1})


def _args(**kw):
    base = dict(provider=None, image=IMAGE, worker_groups=[WorkerGroupArgs("gpu", CATALOGUE["g6.12xlarge"], 2)])
    base.update(kw)
    return RayClusterArgs(**base)


def test_guard_worker_groups():
    with pytest.raises(ValueError, match="at least one"):
        build_spec(_args(worker_groups=[]))
    g = WorkerGroupArgs("gpu", CATALOGUE["g6.12xlarge"], 2)
    with pytest.raises(ValueError, match="unique"):
        build_spec(_args(worker_groups=[g, g]))
    with pytest.raises(ValueError, match="replicas"):
        build_spec(_args(worker_groups=[WorkerGroupArgs("gpu", CATALOGUE["g6.12xlarge"], -1)]))
    with pytest.raises(ValueError, match="reserve"):
        build_spec(_args(worker_groups=[WorkerGroupArgs("gpu", CATALOGUE["g6.12xlarge"], 2, cpu_reserve=48)]))


def test_extra_worker_group_from_another_repo():
    spec = build_spec(
        _args(
            worker_groups=[
                WorkerGroupArgs("gpu", CATALOGUE["g6.12xlarge"], 2),
                WorkerGroupArgs("big", CATALOGUE["p5.48xlarge"], 1, node_selector={"pool": "p5"}),
            ]
        )
    )
    validate({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "x"}, "spec": spec})
    assert [g["groupName"] for g in spec["workerGroupSpecs"]] == ["gpu", "big"]


# --- Ray token auth -----------------------------------------------------------------------------


SHARED_CRD = Path(__file__).resolve().parents[3] / "shared/schemas/kuberay-v1.7.0/ray.io_rayclusters.yaml"


def _secret_wrapped(value) -> bool:
    from pulumi.runtime import rpc

    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def test_token_auth_on_by_default(default_run):
    rc = raycluster(default_run)
    assert rc["spec"]["authOptions"] == {"mode": "token", "secretName": "ray-auth-token"}
    shared = yaml.load(SHARED_CRD.read_text(), Loader=yaml.CSafeLoader) if SHARED_CRD.exists() else None
    schemas = [SCHEMA] + (
        [next(v for v in shared["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]]
        if SHARED_CRD.exists()
        else []
    )
    for schema in schemas:  # KubeRay 1.7's CRD: authOptions.mode is an enum, secretName a string
        validate(
            {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": rc["metadata"], "spec": rc["spec"]}, schema
        )
        bad = {**rc["spec"], "authOptions": {"mode": "tokens", "secretName": "ray-auth-token"}}
        with pytest.raises(jsonschema.ValidationError):
            validate({"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": bad}, schema)
    secret = default_run.one("kubernetes:core/v1:Secret", "auth-token")
    assert secret["metadata"] == {"name": "ray-auth-token", "namespace": "ray"}
    assert _secret_wrapped(secret["stringData"])  # the token never appears in plain text in state or diffs
    password = default_run.one("random:index/randomPassword:RandomPassword")
    assert password.inputs == {"length": 64, "special": False}  # no keepers: generated once, stable across ups
    assert "rayAuthToken" in default_run.outputs
    env = default_run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "RAY_AUTH_MODE", "value": "token"} in env
    assert {
        "name": "RAY_AUTH_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "ray-auth-token", "key": "auth_token"}},
    } in env


def test_token_is_not_regenerated_by_the_program():
    # Same program, same config -> same inputs: a token made in Python would differ on every run (a new Secret
    # value, every Ray pod restarted); RandomPassword keeps it in state.
    a, b = shared_run(), shared_run()
    for typ in ("random:index/randomPassword:RandomPassword", "kubernetes:core/v1:Secret"):
        assert a.of_type(typ), typ
        assert [r.inputs for r in a.of_type(typ)] == [r.inputs for r in b.of_type(typ)]


def test_token_auth_off():
    run = shared_run({"rayTokenAuth": "false"})
    assert "authOptions" not in raycluster(run)["spec"]
    # the Secret stays (switching auth off must not delete it under pods that still reference it), unused
    assert run.one("kubernetes:core/v1:Secret")["metadata"]["name"] == "ray-auth-token"
    assert "ray-auth-token" not in json.dumps(raycluster(run)["spec"])
    container = run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]
    assert not any(e["name"].startswith("RAY_AUTH") for e in container.get("env", []))
    assert "rayAuthToken" not in run.outputs


def test_token_auth_needs_ray_2_52():
    from ray_efa_eks.components.config.config import ConfigError, StackConfig

    with pytest.raises(ConfigError, match=r"rayTokenAuth = True is invalid: needs Ray >= 2\.52 \(rayVersion is 2\.51"):
        StackConfig.from_mapping({"rayVersion": "2.51.0"})
    StackConfig.from_mapping({"rayVersion": "2.51.0", "rayTokenAuth": "false"})
    with pytest.raises(ValueError, match="Ray token auth needs Ray >= 2.52"):
        build_spec(_args(ray_version="2.49.1"))
    assert "authOptions" not in build_spec(_args(ray_version="2.49.1", token_auth=False))


def test_efa_workers_read_their_nodes_exporter_not_the_host(default_run):
    """No Ray pod mounts a host path; EFA workers get their node's exporter URL and their node's name."""
    from ray_efa_eks.components.addons.node_agent import exporter_url
    from ray_efa_eks.efacheck import efa_counters

    spec = raycluster(default_run)["spec"]
    for t in pod_templates(spec):
        assert not [v for v in t["spec"]["volumes"] if "hostPath" in v]
        assert not t["spec"].get("hostNetwork")
    (group,) = spec["workerGroupSpecs"]
    env = {e["name"]: e for e in group["template"]["spec"]["containers"][0]["env"]}
    assert (
        env[efa_counters.EXPORTER_ENV]["value"]
        == exporter_url()
        == "http://efa-exporter.efa-node-agent.svc.cluster.local:9810/metrics"
    )
    assert env[efa_counters.NODE_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    head = {e["name"] for e in spec["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
    assert efa_counters.EXPORTER_ENV not in head  # the head has no EFA


def test_no_host_sysfs_without_efa():
    run = shared_run({"efa": "false", "efaCheck": "false"})
    pod = raycluster(run)["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert not [v for v in pod["volumes"] if "hostPath" in v]
    assert "RAY_EFA_EKS_EFA_EXPORTER" not in {e["name"] for e in pod["containers"][0]["env"]}
    # no EFA, no node agent: the DLC pre-pull is the only DaemonSet
    assert [d.name for d in run.of_type("kubernetes:apps/v1:DaemonSet")] == ["image-prepull-daemonset"]


def test_efa_check_requires_counters_with_efa_only(default_run):
    script = default_run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--require-counters" in script
    off = shared_run({"efaCheckRequireCounters": "false"}).one("kubernetes:batch/v1:Job")
    assert "--require-counters" not in off["spec"]["template"]["spec"]["containers"][0]["command"][2]


def test_efa_check_proves_checkpoint_storage_when_the_stack_has_a_bucket(default_run):
    script = default_run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--storage-proof" in script
    cm = default_run.one("kubernetes:core/v1:ConfigMap", "efa-check")
    assert "ray_efa_eks.efacheck.storage_proof.py" in cm["data"]  # shipped with the check
    off = shared_run({"checkpointBucket": "false"}).one("kubernetes:batch/v1:Job")
    assert "--storage-proof" not in off["spec"]["template"]["spec"]["containers"][0]["command"][2]


# --- every accepted shape has a gate it can pass ---------------------------------------------------------


def _job_args(run) -> list[str]:
    import shlex

    script = run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]["command"][2]
    line = next(ln for ln in script.splitlines() if "efacheck.efa_check" in ln)
    return shlex.split(line.split(" -- ", 1)[1])


EFA_ONLY = {
    "--expect-nics",
    "--expect-gdrdma",
    "--efa-gbps",
    "--require-counters",
    "--compare-socket",
    "--min-busbw-fraction",
}


@pytest.mark.parametrize(
    "config, transport, nodes, warning",
    [
        (
            {"efa": "false", "efaCheckCompareSocket": "true", "efaCheckMinBusbwFraction": "0.5"},
            "socket",
            "2",
            "over its Socket transport (TCP); it does not prove EFA",
        ),
        (
            {"gpuNodeCount": "1", "allowSingleEfaNode": "true"},
            "intra-node",
            "1",
            "EFA (and any inter-node path) is not exercised",
        ),
        ({"gpuNodeCount": "1", "efa": "false"}, "intra-node", "1", "checks NCCL inside the node only"),
    ],
)
def test_non_efa_shapes_get_a_gate_that_demands_only_what_they_have(monkeypatch, config, transport, nodes, warning):
    import pulumi

    from ray_efa_eks.efacheck import efa_check

    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: warnings.append(msg))
    args = _job_args(shared_run(config))
    assert args[args.index("--expect-transport") + 1] == transport and args[args.index("--expect-nodes") + 1] == nodes
    assert not EFA_ONLY & set(args), args
    assert [w for w in warnings if warning in w], warnings
    a = efa_check.parser().parse_args(args[3:])  # the check's own parser accepts exactly these
    assert a.expect_transport == transport and a.expect_nics is None and not a.require_counters


def test_the_efa_shape_keeps_its_full_proof(default_run):
    args = _job_args(default_run)
    assert "--expect-transport" not in args and {"--expect-nics", "--require-counters", "--efa-gbps"} <= set(args)


def test_upgrade_strategy_is_recreate_and_validated():
    spec = build_spec(_args())
    assert spec["upgradeStrategy"] == {"type": "Recreate"}
    assert build_spec(_args(upgrade_strategy="None"))["upgradeStrategy"] == {"type": "None"}
    with pytest.raises(ValueError, match=r"upgrade_strategy 'Rolling' is not one of \('Recreate', 'None'\)"):
        build_spec(_args(upgrade_strategy="Rolling"))


def test_spec_hash_ignores_scaling_like_kuberay_and_follows_everything_else():
    from ray_efa_eks.components.ray.raycluster import spec_hash

    def h(**kw):
        spec = build_spec(_args(**kw))
        envs = [
            {e["name"]: e["value"] for e in g["template"]["spec"]["containers"][0]["env"]}
            for g in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
        ]
        assert (
            len({e["RAY_EFA_EKS_SPEC_HASH"] for e in envs}) == 1 and spec_hash(spec) == envs[0]["RAY_EFA_EKS_SPEC_HASH"]
        )
        return envs[0]["RAY_EFA_EKS_SPEC_HASH"]

    base = h()
    assert h(upgrade_strategy="None") == base  # KubeRay mutes upgradeStrategy too
    assert h(worker_groups=[WorkerGroupArgs("gpu", CATALOGUE["g6.12xlarge"], 5)]) == base  # and replicas
    assert len({base, h(image="repo/ray:other"), h(nccl_debug="INFO"), h(token_auth=False)}) == 4
