"""What the node agent's token can do: RBAC as narrow as Kubernetes allows, then the
ValidatingAdmissionPolicy that cuts it down to its own node, the startup taint and the EfaFabricProven condition.

The policy's CEL runs for real (cel-python, tests/helpers/vap.py) against the requests node_check really makes
(recorded by the loopback API fake while it proves a node) and against the ones it must never be able to make."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import kubernetes_validate
import pytest

from ray_efa_eks.components import kube
from ray_efa_eks.components.addons import node_agent
from ray_efa_eks.components.cluster import eks_versions
from ray_efa_eks.efacheck import node_api
from ray_efa_eks.efacheck import node_check as nc
from tests.efacheck.test_node_check import GPU_TAINT, STARTUP, FakeApi, _node
from tests.helpers.sysfs import kernel_sysfs
from tests.helpers.vap import admit, request

USER = node_agent.service_account_user()
ACCEPTED = [v.version for v in eks_versions.VERSIONS if not eks_versions.version_problem(v.version)]
POLICY = node_agent.own_node_policy()
TAINT_MESSAGE = f"on its node the node agent may only remove the taint {nc.TAINT_KEY} or put it back"


def _objects(run, prefix: str) -> dict[str, dict]:
    return {r.type.rsplit(":", 1)[1]: r.inputs for r in run.resources if r.name.startswith(prefix)}


def test_names_shared_with_the_proof_stay_equal():
    assert kube.FABRIC_STARTUP_TAINT == nc.TAINT_KEY
    assert node_agent.FABRIC_CONDITION == nc.CONDITION
    assert node_agent.TOKEN_DIR == nc.TOKEN_DIR
    assert node_agent.EVENTS_NAMESPACE == "default" and "/namespaces/default/events" in open(node_api.__file__).read()
    assert node_agent.NODE_NAME_EXTRA == "authentication.kubernetes.io/node-name"


def test_the_token_is_mounted_into_the_proof_container_only(default_run):
    spec = default_run.one("kubernetes:apps/v1:DaemonSet", "node-agent")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    (vol,) = [v for v in spec["volumes"] if "projected" in v]
    assert vol["projected"]["sources"][0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    mounting = {
        c["name"]: [m["mountPath"] for m in c["volumeMounts"] if m["name"] == vol["name"]] for c in spec["containers"]
    }
    assert mounting == {"efa-exporter": [], "fabric-proof": [nc.TOKEN_DIR]}
    proof = next(c for c in spec["containers"] if c["name"] == "fabric-proof")
    assert proof["command"][:3] == ["python", "-m", "ray_efa_eks.efacheck.node_check"]
    assert proof["command"][proof["command"].index("--expect-devices") + 1] == "g6.12xlarge=1"
    assert proof["securityContext"]["runAsNonRoot"] and not proof["securityContext"]["privileged"]
    assert proof["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert proof["resources"]["requests"] == proof["resources"]["limits"]
    # no EFA device, no GPU: the agent never holds what the Ray worker needs
    assert not any(
        k.startswith(("vpc.amazonaws.com", "nvidia.com")) for c in spec["containers"] for k in c["resources"]["limits"]
    )


def test_rbac_is_get_and_patch_on_nodes_and_events_in_one_namespace(default_run):
    objs = _objects(default_run, "node-agent-")
    assert objs["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]
    assert objs["Role"]["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    assert objs["Role"]["metadata"]["namespace"] == objs["RoleBinding"]["metadata"]["namespace"] == "default"
    for b in ("ClusterRoleBinding", "RoleBinding"):
        assert objs[b]["subjects"] == [{"kind": "ServiceAccount", "name": "node-agent", "namespace": "efa-node-agent"}]
    assert objs["ValidatingAdmissionPolicy"]["spec"] == node_agent.own_node_policy(
        kubernetes_version=eks_versions.DEFAULT_VERSION
    )
    assert objs["ValidatingAdmissionPolicyBinding"]["spec"] == {
        "policyName": node_agent.POLICY_NAME,
        "validationActions": ["Deny"],
    }
    for kind, body in objs.items():
        if kind in (
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ):
            group = "rbac.authorization.k8s.io/v1" if "Role" in kind else "admissionregistration.k8s.io/v1"
            for version in ACCEPTED:  # every Kubernetes version the stack deploys today
                kubernetes_validate.validate({"apiVersion": group, "kind": kind, **body}, f"{version}.0", strict=True)


def test_the_policy_is_in_place_before_the_token_can_do_anything(default_run):
    by_name = {r.name: r for r in default_run.resources}
    policy, binding = by_name["node-agent-own-node-policy"].urn, by_name["node-agent-own-node-binding"].urn
    for n in ("node-agent-nodes-binding", "node-agent-events-binding"):
        assert {policy, binding} <= set(by_name[n].options["dependencies"])
    assert by_name["node-agent-nodes-binding"].urn in by_name["node-agent-daemonset"].options["dependencies"]


def test_every_kubernetes_version_the_stack_accepts_puts_the_node_in_the_token():
    """ValidatingAdmissionPolicy v1 and ServiceAccountTokenPodNodeInfo (on by default) arrive in 1.30; the stack
    refuses versions past EKS support, which today leaves 1.32 and later."""
    accepted = [v.version for v in eks_versions.VERSIONS if not eks_versions.version_problem(v.version)]
    assert accepted and all(tuple(map(int, v.split("."))) >= (1, 30) for v in accepted), accepted


# -- the policy's CEL against recorded and forged requests ---------------------------------------------------------


class Recorder(FakeApi):
    """The loopback fake, keeping each write as an AdmissionRequest (old and new object, as admission sees them)."""

    def __init__(self, nodes):
        super().__init__(nodes)
        self.admissions: list[dict] = []
        self._before = copy.deepcopy(nodes)

    def snapshot_requests(self):
        """Turn the recorded PATCH/POST calls into admission requests (replaying them on copies of the nodes)."""
        nodes = copy.deepcopy(self._before)
        out = []
        for method, path, _ctype, body in self.requests:
            if method == "POST":
                out.append(request(USER, "CREATE", "events", body, node_name=self.node_name))
            elif method == "PATCH":
                name = path.split("/")[4]
                old = copy.deepcopy(nodes[name])
                new = nodes[name]
                # the API server's field manager rewrites managedFields on every write, before admission
                new.setdefault("metadata", {})["managedFields"] = [
                    *old["metadata"].get("managedFields", []),
                    {"manager": "node-check", "operation": "Update", "apiVersion": "v1"},
                ]
                if path.endswith("/status"):
                    conds = new.setdefault("status", {}).setdefault("conditions", [])
                    for c in body["status"]["conditions"]:
                        conds[:] = [x for x in conds if x["type"] != c["type"]] + [c]
                    out.append(request(USER, "UPDATE", "nodes", copy.deepcopy(new), old, "status", self.node_name))
                else:
                    for op in body:
                        if op["op"] == "remove":
                            del new["spec"]["taints"][int(op["path"].rsplit("/", 1)[-1])]
                        elif op["op"] == "add" and op["path"] == "/spec/taints/-":
                            new["spec"]["taints"].append(op["value"])
                        elif op["op"] == "add" and op["path"] == "/spec/taints":
                            new["spec"]["taints"] = op["value"]
                    out.append(request(USER, "UPDATE", "nodes", copy.deepcopy(new), old, "", self.node_name))
        return out


def _nodes():
    """Two GPU nodes with the fields a kubelet fills in (addresses, daemonEndpoints, nodeInfo, images) and a
    finalizer-free metadata, as the API server holds them."""
    a = _node("gpu-a", [GPU_TAINT, STARTUP])
    a["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "g6.12xlarge", "ray-efa-eks/role": "gpu"}
    a["metadata"].update(
        {
            "resourceVersion": "4711",
            "creationTimestamp": "2026-12-06T01:00:00Z",
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}],
        }
    )
    a["spec"].update({"providerID": "aws:///us-east-1a/i-0abc", "podCIDR": "10.0.0.0/24"})
    a["status"].update(
        {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
            "capacity": dict(a["status"]["allocatable"]),
            "addresses": [{"type": "InternalIP", "address": "10.0.1.17"}, {"type": "Hostname", "address": "gpu-a"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "kubeletVersion": "v1.33.5-eks-1",
                "containerRuntimeVersion": "containerd://1.7.27",
                "machineID": "ec2abc",
                "systemUUID": "ec2abc",
                "bootID": "b1",
                "kernelVersion": "6.12.40",
                "osImage": "Amazon Linux 2023",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [{"names": ["public.ecr.aws/deep-learning-containers/ray@sha256:" + "a" * 64], "sizeBytes": 9}],
        }
    )
    b = copy.deepcopy(a)
    b["metadata"]["name"], b["metadata"]["uid"] = "gpu-b", "uid-gpu-b"
    return {"gpu-a": a, "gpu-b": b}


@pytest.fixture
def recorded(tmp_path):
    """What node_check sends while proving gpu-a (taint removal, condition), then while it fails (condition,
    Event): every request, as admission sees it."""
    fake = Recorder(_nodes())
    fake.node_name = "gpu-a"
    root = str(kernel_sysfs(tmp_path))
    provider = [(True, "efa listed")]
    nc.run_loop(
        fake.api, "gpu-a", root, 1, provider=lambda: provider[0], log=lambda m: None, sleep=lambda s: None, rounds=1
    )
    provider[0] = (False, "fi_info -l does not list efa")
    nc.run_loop(
        fake.api, "gpu-a", root, 1, provider=lambda: provider[0], log=lambda m: None, sleep=lambda s: None, rounds=1
    )
    yield fake.snapshot_requests()
    fake.close()


def test_every_request_the_proof_makes_is_admitted(recorded):
    kinds = [(r["resource"]["resource"], r["subResource"], r["operation"]) for r in recorded]
    assert kinds == [
        ("nodes", "status", "UPDATE"),
        ("nodes", "", "UPDATE"),
        ("nodes", "status", "UPDATE"),
        ("events", "", "CREATE"),
    ]
    for r in recorded:
        assert admit(POLICY, r) == (True, []), json.dumps(r)[:300]


def _forged(recorded, change, node_name="gpu-a"):
    """The recorded taint removal (or status write), changed."""
    r = copy.deepcopy(recorded)
    change(r)
    r["userInfo"]["extra"]["authentication.kubernetes.io/node-name"] = [node_name]
    return r


def test_another_node_is_refused(recorded):
    removal = recorded[1]
    ok, why = admit(POLICY, _forged(removal, lambda r: None, node_name="gpu-b"))
    assert not ok and why == ["the node agent may change only the node its pod runs on"]
    status = recorded[0]
    assert admit(POLICY, _forged(status, lambda r: None, node_name="gpu-b"))[0] is False
    event = recorded[3]
    assert admit(POLICY, _forged(event, lambda r: None, node_name="gpu-b")) == (
        False,
        ["the node agent may only write Events about its own node"],
    )


@pytest.mark.parametrize(
    "what,change",
    [
        ("the GPU taint", lambda r: r["object"]["spec"]["taints"].remove(GPU_TAINT)),
        ("a new taint", lambda r: r["object"]["spec"]["taints"].append({"key": "x", "effect": "NoSchedule"})),
        ("a label", lambda r: r["object"]["metadata"]["labels"].update({"ray-efa-eks/role": "system"})),
        ("an annotation", lambda r: r["object"]["metadata"].setdefault("annotations", {}).update({"a": "b"})),
        ("cordon", lambda r: r["object"]["spec"].update({"unschedulable": True})),
        ("keeping the startup taint", lambda r: r["object"]["spec"]["taints"].append(dict(STARTUP))),
    ],
)
def test_on_its_own_node_it_may_only_remove_the_startup_taint(recorded, what, change):
    ok, why = admit(POLICY, _forged(recorded[1], change))
    assert not ok and why == [TAINT_MESSAGE], what


@pytest.mark.parametrize(
    "what,change",
    [
        ("Ready", lambda r: r["object"]["status"]["conditions"][0].update({"status": "False"})),
        ("allocatable", lambda r: r["object"]["status"]["allocatable"].update({"vpc.amazonaws.com/efa": "4"})),
        ("a label", lambda r: r["object"]["metadata"]["labels"].update({"x": "y"})),
    ],
)
def test_in_its_status_it_may_only_write_its_condition(recorded, what, change):
    ok, why = admit(POLICY, _forged(recorded[0], change))
    assert not ok and why == [f"in its node's status the node agent may only write {nc.CONDITION}"], what


GC_OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "uid-of-a-deleted-object"}
EVERYTHING_ELSE = [  # what a compromised proof container would write to hand the Node away or misroute the API server
    ("ownerReferences", lambda r: r["object"]["metadata"].update({"ownerReferences": [GC_OWNER]})),
    ("finalizers", lambda r: r["object"]["metadata"].update({"finalizers": ["example.com/hold"]})),
    ("addresses", lambda r: r["object"]["status"]["addresses"][0].update({"address": "169.254.169.254"})),
    ("daemonEndpoints", lambda r: r["object"]["status"]["daemonEndpoints"]["kubeletEndpoint"].update({"Port": 443})),
    ("nodeInfo", lambda r: r["object"]["status"]["nodeInfo"].update({"kubeletVersion": "v1.99.0"})),
    ("images", lambda r: r["object"]["status"].update({"images": []})),
    ("providerID", lambda r: r["object"]["spec"].update({"providerID": "aws:///us-east-1a/i-0other"})),
    ("capacity", lambda r: r["object"]["status"]["capacity"].update({"nvidia.com/gpu": "8"})),
]


@pytest.mark.parametrize("what,change", EVERYTHING_ELSE, ids=[w for w, _ in EVERYTHING_ELSE])
@pytest.mark.parametrize("write", [1, 0], ids=["taint removal", "condition"])
def test_everything_else_of_the_node_stays_equal(recorded, write, what, change):
    """Either write (taint removal on the Node, the condition on its status) with any other field changed is
    refused; the recorded requests themselves (managedFields rewritten by the API server) pass above."""
    ok, why = admit(POLICY, _forged(recorded[write], change))
    assert not ok and why == [
        TAINT_MESSAGE if write == 1 else f"in its node's status the node agent may only write {nc.CONDITION}"
    ], what


@pytest.mark.parametrize("version", ACCEPTED)
def test_the_policy_holds_every_node_field_of_each_accepted_version(version):
    """Each field of ObjectMeta, NodeSpec and NodeStatus in that version's schema is held (but the three the API
    server writes itself), and no field the version lacks is named (its CEL would not compile)."""
    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}.0-local-strict"
    fields = node_agent.node_fields(version)
    for part, schema in (("metadata", "objectmeta-meta-v1"), ("spec", "nodespec-v1"), ("status", "nodestatus-v1")):
        props = set(json.loads((schemas / f"{schema}.json").read_text())["properties"])
        assert set(fields[part]) == props - {"managedFields", "resourceVersion", "generation"}, (version, part)
    expressions = json.dumps(node_agent.own_node_policy(kubernetes_version=version)["validations"])
    assert all(f"object.status.{f})" in expressions for f in fields["status"])


def test_a_token_without_a_node_is_refused_and_other_users_are_not_this_policys_business(recorded):
    r = copy.deepcopy(recorded[1])
    r["userInfo"]["extra"] = {}
    ok, why = admit(POLICY, r)
    assert not ok and why[0].startswith("the token names no node")
    kubelet = copy.deepcopy(recorded[1])
    kubelet["userInfo"]["username"] = "system:node:gpu-b"
    kubelet["object"]["spec"]["taints"] = []
    assert admit(POLICY, kubelet) == (True, [])
    other = copy.deepcopy(recorded[1])
    other["userInfo"]["username"] = "system:serviceaccount:efa-node-agent:default"
    other["object"]["metadata"]["labels"]["x"] = "y"
    assert admit(POLICY, other) == (True, [])  # RBAC gives that account nothing in the first place


def test_every_module_the_shipped_ones_import_is_shipped_too(default_run, tmp_path):
    """The ConfigMap is the agent's whole code: a relative import of an unshipped module kills both containers
    (efacheck/cli.py began importing exit_codes.py after the agent shipped it)."""
    import ast
    import subprocess
    import sys
    from pathlib import Path

    cm = default_run.one("kubernetes:core/v1:ConfigMap", "node-agent")
    root = Path(nc.__file__).parent
    for name in node_agent.SHIPPED:
        tree = ast.parse((root / name).read_text())
        for node in tree.body:  # module level: what importing it needs (a function's lazy import is the gate's)
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                wanted = [f"{node.module}.py"] if node.module else [f"{a.name}.py" for a in node.names]
                assert set(wanted) <= set(node_agent.SHIPPED), (name, wanted)
    pkg = tmp_path / "ray_efa_eks"
    spec = default_run.one("kubernetes:apps/v1:DaemonSet", "node-agent")["spec"]["template"]["spec"]
    items = next(v for v in spec["volumes"] if "configMap" in v)["configMap"]["items"]
    for it in items:
        (pkg / it["path"]).parent.mkdir(parents=True, exist_ok=True)
        (pkg / it["path"]).write_text(cm["data"][it["key"]])
    proof = next(c for c in spec["containers"] if c["name"] == "fabric-proof")
    p = subprocess.run(
        [sys.executable, *proof["command"][1:3], "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert p.returncode == 0 and "--expect-devices" in p.stdout, p.stderr
    proof_prog = "python -m ray_efa_eks.efacheck.node_check"
    # the shipped copy's usage error is 64, not the API error's 2; no API server to ask is 2; never a traceback
    for args, code in (
        (["--expect-devices", "1", "--node", "n", "--interval", "0"], 64),
        (["--expect-devices", "1", "--node", "n", "--once"], 2),
    ):
        p = subprocess.run(
            [sys.executable, *proof["command"][1:3], *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )
        assert p.returncode == code and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.splitlines()[-1].startswith(f"{proof_prog}: error: "), p.stderr
    # run through run_cli: an unexpected exception (here planted at startup by a sitecustomize) is one line, exit 70
    (tmp_path / "plant").mkdir()
    (tmp_path / "plant" / "sitecustomize.py").write_text(
        "import ssl\ndef boom(*a, **k):\n    raise RuntimeError('planted')\nssl.create_default_context = boom\n"
    )
    p = subprocess.run(
        [sys.executable, *proof["command"][1:3], "--expect-devices", "1", "--node", "n", "--once"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PYTHONPATH": f"{tmp_path / 'plant'}:{tmp_path}",
            "PATH": "/usr/bin:/bin",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "TMPDIR": str(tmp_path),
        },
    )
    assert p.returncode == 70 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(f"{proof_prog}: internal error: RuntimeError: planted (a bug: the full trace is in "), (
        p.stderr
    )


# -- part D: a Ray worker's failed provider check puts the startup taint back --------------------------------------


@pytest.fixture
def put_back(tmp_path):
    """What node_check sends when a Ray worker's efa-provider-check failed on its proven node: condition, Event and
    the one JSON patch adding the taint, as admission sees them."""
    from tests.efacheck.test_node_check import FAILED_INIT, _worker

    nodes = _nodes()
    nodes["gpu-a"]["spec"]["taints"] = [GPU_TAINT]  # proven
    fake = Recorder(nodes)
    fake.node_name = "gpu-a"
    fake.pods[:] = [_worker("ray-gpu-worker-x1", "gpu-a", FAILED_INIT, phase="Failed")]
    assert (
        nc.run_check(
            fake.api,
            "gpu-a",
            str(kernel_sysfs(tmp_path)),
            1,
            provider=lambda: (True, "efa listed"),
            log=lambda m: None,
            workers_namespace="ray",
        )
        == nc.EXIT_UNPROVEN
    )
    yield fake.snapshot_requests()
    fake.close()


def test_every_request_of_a_put_back_is_admitted(put_back):
    kinds = [(r["resource"]["resource"], r["subResource"], r["operation"]) for r in put_back]
    assert kinds == [("nodes", "status", "UPDATE"), ("events", "", "CREATE"), ("nodes", "", "UPDATE")]
    for r in put_back:
        assert admit(POLICY, r) == (True, []), json.dumps(r)[:300]
    added = put_back[2]
    assert added["object"]["spec"]["taints"] == [GPU_TAINT, STARTUP] and added["oldObject"]["spec"]["taints"] == [
        GPU_TAINT
    ]


@pytest.mark.parametrize(
    "what,change",
    [
        ("another taint with it", lambda r: r["object"]["spec"]["taints"].append({"key": "x", "effect": "NoSchedule"})),
        ("NoExecute instead", lambda r: r["object"]["spec"]["taints"][-1].update({"effect": "NoExecute"})),
        ("another value", lambda r: r["object"]["spec"]["taints"][-1].update({"value": "false"})),
        ("another key", lambda r: r["object"]["spec"]["taints"][-1].update({"key": nc.TAINT_KEY + "-x"})),
        ("a second copy", lambda r: r["object"]["spec"]["taints"].append(dict(STARTUP))),
        ("dropping the GPU taint", lambda r: r["object"]["spec"]["taints"].remove(GPU_TAINT)),
        ("a label with it", lambda r: r["object"]["metadata"]["labels"].update({"ray-efa-eks/role": "system"})),
        ("cordon with it", lambda r: r["object"]["spec"].update({"unschedulable": True})),
        ("a timeAdded", lambda r: r["object"]["spec"]["taints"][-1].update({"timeAdded": "2026-12-05T03:00:00Z"})),
        ("no value", lambda r: r["object"]["spec"]["taints"][-1].pop("value")),
        (
            "PreferNoSchedule instead",
            lambda r: r["object"]["spec"]["taints"][-1].update({"effect": "PreferNoSchedule"}),
        ),
        ("the GPU taint changed with it", lambda r: r["object"]["spec"]["taints"][0].update({"value": "false"})),
        ("an annotation with it", lambda r: r["object"]["metadata"].setdefault("annotations", {}).update({"a": "b"})),
    ],
)
def test_putting_back_is_only_that_one_taint(put_back, what, change):
    ok, why = admit(POLICY, _forged(put_back[2], change))
    assert not ok and why == [TAINT_MESSAGE], what


def test_putting_back_on_another_node_is_refused(put_back):
    ok, why = admit(POLICY, _forged(put_back[2], lambda r: None, node_name="gpu-b"))
    assert not ok and "the node agent may change only the node its pod runs on" in why


@pytest.mark.parametrize(
    "old,new",
    [
        ([], [STARTUP]),  # a node with no taint left: the first add creates the list
        (
            [GPU_TAINT, {"key": "x", "value": "y", "effect": "NoExecute"}],
            [GPU_TAINT, {"key": "x", "value": "y", "effect": "NoExecute"}, STARTUP],
        ),
        (
            [GPU_TAINT],
            [STARTUP, GPU_TAINT],
        ),  # put first: the other taints unchanged in their order (order means nothing)
    ],
)
def test_putting_back_onto_any_taint_list_is_admitted(put_back, old, new):
    def change(r):
        r["oldObject"]["spec"]["taints"], r["object"]["spec"]["taints"] = old, new

    assert admit(POLICY, _forged(put_back[2], change)) == (True, [])

    # and a node whose spec has no taints field at all
    def bare(r):
        r["oldObject"]["spec"].pop("taints")
        r["object"]["spec"]["taints"] = [STARTUP]

    assert admit(POLICY, _forged(put_back[2], bare)) == (True, [])


def test_the_taint_cannot_be_added_while_it_is_there(put_back):
    """A second copy of the taint is neither a removal nor a put-back."""

    def twice(r):
        r["oldObject"]["spec"]["taints"] = [GPU_TAINT, STARTUP]
        r["object"]["spec"]["taints"] = [GPU_TAINT, STARTUP, dict(STARTUP)]

    assert admit(POLICY, _forged(put_back[2], twice)) == (False, [TAINT_MESSAGE])


def test_the_worker_read_is_a_role_in_the_ray_namespace_listing_pods_only(default_run):
    objs = {
        r.type.rsplit(":", 1)[1]: r.inputs for r in default_run.resources if r.name.startswith("node-agent-workers-")
    }
    assert objs["Role"]["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    assert objs["Role"]["metadata"]["namespace"] == objs["RoleBinding"]["metadata"]["namespace"] == "ray"
    assert objs["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "node-agent", "namespace": "efa-node-agent"}
    ]
    assert objs["RoleBinding"]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": objs["Role"]["metadata"]["name"],
    }
    for kind, body in objs.items():
        for version in ACCEPTED:
            kubernetes_validate.validate(
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, **body}, f"{version}.0", strict=True
            )
    by_name = {r.name: r for r in default_run.resources}
    ray_ns = by_name["ray-ns"].urn
    assert ray_ns in by_name["node-agent-workers-role"].options["dependencies"]
    # the RayCluster (so every worker pod) comes after the read is granted
    rc = default_run.resources[[r.type for r in default_run.resources].index("kubernetes:ray.io/v1:RayCluster")]
    assert by_name["node-agent-workers-binding"].urn in rc.options["dependencies"]
    spec = default_run.one("kubernetes:apps/v1:DaemonSet", "node-agent")["spec"]["template"]["spec"]
    proof = next(c for c in spec["containers"] if c["name"] == "fabric-proof")
    assert proof["command"][proof["command"].index("--workers-namespace") + 1] == "ray"
