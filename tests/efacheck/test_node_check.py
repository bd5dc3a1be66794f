"""The per-node fabric proof: its decisions on kernel-shaped sysfs trees, and its taint removal against a
Kubernetes API fake on loopback that records every request (only its own node, only the startup taint)."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ray_efa_eks.efacheck import node_api, node_findings
from ray_efa_eks.efacheck import node_check as nc
from ray_efa_eks.efacheck import worker_pods as wp
from tests.helpers.sysfs import P5_48XLARGE, kernel_sysfs

OK_PROVIDER = (True, "provider: efa")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
STARTUP = {"key": nc.TAINT_KEY, "value": "true", "effect": "NoSchedule"}


def failed(findings):
    return sorted(f.check for f in findings if not f.ok)


def test_healthy_node_passes_every_check(tmp_path):
    root = str(kernel_sysfs(tmp_path))
    assert failed(nc.decide(root, 1, {nc.EFA_RESOURCE: "1"}, OK_PROVIDER)) == []
    big = str(kernel_sysfs(tmp_path / "p5", P5_48XLARGE))
    assert failed(nc.decide(big, 32, {nc.EFA_RESOURCE: "32"}, OK_PROVIDER)) == []


def test_missing_device(tmp_path):
    root = str(kernel_sysfs(tmp_path, devices=()))
    assert failed(nc.decide(root, 1, {nc.EFA_RESOURCE: "1"}, OK_PROVIDER)) == ["counters", "devices"]


def test_fewer_devices_than_the_catalogue(tmp_path):
    root = str(kernel_sysfs(tmp_path, P5_48XLARGE[:31]))
    findings = nc.decide(root, 32, {nc.EFA_RESOURCE: "32"}, OK_PROVIDER)
    assert failed(findings) == ["devices"]
    assert "31 EFA device(s)" in findings[0].detail and "says 32" in findings[0].detail


def test_plugin_advertising_fewer(tmp_path):
    root = str(kernel_sysfs(tmp_path, P5_48XLARGE))
    assert failed(nc.decide(root, 32, {nc.EFA_RESOURCE: "16"}, OK_PROVIDER)) == ["plugin"]
    assert failed(nc.decide(root, 32, {}, OK_PROVIDER)) == ["plugin"]  # no plugin on the node yet


def test_provider_missing(tmp_path):
    root = str(kernel_sysfs(tmp_path))
    assert failed(nc.decide(root, 1, {nc.EFA_RESOURCE: "1"}, (False, "fi_getinfo: -61 (No data available)"))) == [
        "provider"
    ]


def test_module_not_loaded_and_unreadable_counters(tmp_path):
    root = kernel_sysfs(tmp_path, version=None)
    assert failed(nc.decide(str(root), 1, {nc.EFA_RESOURCE: "1"}, OK_PROVIDER)) == ["module"]
    hw = next((root / "devices").glob("pci0000:00/*/infiniband/*/ports/1/hw_counters"))
    shutil.rmtree(hw)
    assert failed(nc.decide(str(root), 1, {nc.EFA_RESOURCE: "1"}, OK_PROVIDER)) == ["counters", "module"]


FI_INFO_L = """usnic:
    version: 1.0
efa:
    version: 201.0
tcp;ofi_rxm:
    version: 201.0
"""


class _R:
    def __init__(self, rc, out, err=""):
        self.returncode, self.stdout, self.stderr = rc, out, err


def test_libfabric_probe_reads_the_registered_providers():
    """``fi_info -l`` lists what libfabric registered (efa registers without a device: node_check's docstring)."""
    calls = []

    def run(cmd, **k):
        calls.append(cmd)
        return _R(0, FI_INFO_L)

    ok, detail = nc.libfabric_lists_efa(run)
    assert ok and "version 201.0" in detail and calls == [["fi_info", "-l"]]
    ok, detail = nc.libfabric_lists_efa(lambda *a, **k: _R(0, "tcp;ofi_rxm:\n    version: 201.0\nshm:\n"))
    assert not ok and detail == "fi_info -l does not list efa (providers tcp;ofi_rxm, shm)"
    # a line merely containing "efa" (a layered name) is not the provider
    assert nc.libfabric_lists_efa(lambda *a, **k: _R(0, "efa;ofi_rxd:\n    version: 1.0\n"))[0] is False
    assert nc.libfabric_lists_efa(lambda *a, **k: _R(1, FI_INFO_L))[0] is False

    def missing(*a, **k):
        raise FileNotFoundError("fi_info")

    assert nc.libfabric_lists_efa(missing) == (False, "fi_info could not run: fi_info")


class FakeApi:
    """A loopback Kubernetes API for nodes: GET a node, JSON-patch it (``test`` ops honoured as the API server does:
    a failed test is 422 and nothing changes), strategic-merge its status conditions, POST events; every request
    recorded."""

    def __init__(self, nodes: dict[str, dict], pods: list[dict] | None = None):
        self.nodes, self.requests, self.tokens = nodes, [], []
        self.pods = pods if pods is not None else []
        """Pods of every node and namespace; a list is answered as the API server answers it (namespace, field
        selector ``spec.nodeName=``, label selector ``k=v``)."""
        fake = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, obj=None):
                body = json.dumps(obj or {}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n)) if n else None

            def do_GET(self):
                fake.requests.append(("GET", self.path, None, None))
                fake.tokens.append(self.headers.get("Authorization"))
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.split("/")
                if len(parts) == 6 and parts[3] == "namespaces" and parts[5] == "pods":
                    q = urllib.parse.parse_qs(url.query)
                    field = dict(x.split("=", 1) for x in q.get("fieldSelector", [""])[0].split(",") if x)
                    label = dict(x.split("=", 1) for x in q.get("labelSelector", [""])[0].split(",") if x)
                    if set(field) - {"spec.nodeName"}:
                        return self._send(400, {"message": "field label not supported"})
                    items = [
                        p
                        for p in fake.pods
                        if p["metadata"]["namespace"] == parts[4]
                        and all(p["spec"].get("nodeName") == v for v in field.values())
                        and all(p["metadata"].get("labels", {}).get(k) == v for k, v in label.items())
                    ]
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "items": items})
                name = self.path.rsplit("/", 1)[-1]
                return self._send(200, fake.nodes[name]) if name in fake.nodes else self._send(404)

            def do_POST(self):
                fake.requests.append(("POST", self.path, self.headers["Content-Type"], self._body()))
                self._send(201)

            def do_PATCH(self):
                body = self._body()
                fake.requests.append(("PATCH", self.path, self.headers["Content-Type"], body))
                parts = self.path.split("/")
                node = fake.nodes[parts[4]]
                if self.path.endswith("/status"):  # strategic merge: conditions merge on their type
                    conds = node.setdefault("status", {}).setdefault("conditions", [])
                    for c in body["status"]["conditions"]:
                        conds[:] = [x for x in conds if x["type"] != c["type"]] + [c]
                    return self._send(200, node)
                spec = node.setdefault("spec", {})
                taints = spec.get("taints")
                for op in body:  # RFC 6902 on /spec/taints and its members, as the API server applies it
                    last = op["path"].rsplit("/", 1)[-1]
                    if op["op"] == "test" and (
                        (op["path"] == "/spec/taints" and taints != op["value"])
                        or (
                            last.isdigit()
                            and (taints is None or int(last) >= len(taints) or taints[int(last)] != op["value"])
                        )
                    ):
                        return self._send(422, {"message": "testing value failed"})
                for op in body:
                    last = op["path"].rsplit("/", 1)[-1]
                    if op["op"] == "remove":
                        del spec["taints"][int(last)]
                    elif op["op"] == "add" and op["path"] == "/spec/taints":
                        spec["taints"] = op["value"]
                    elif op["op"] == "add" and op["path"] == "/spec/taints/-":
                        spec["taints"].append(op["value"])
                    elif op["op"] != "test":
                        return self._send(422, {"message": f"unexpected op {op}"})
                self._send(200, node)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.api = nc.Api(f"http://127.0.0.1:{self.server.server_address[1]}", token="t0k3n")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _node(name, taints, efa="1"):
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {"allocatable": {nc.EFA_RESOURCE: efa, "nvidia.com/gpu": "4"}},
    }


@pytest.fixture
def fake():
    f = FakeApi({"gpu-a": _node("gpu-a", [GPU_TAINT, STARTUP]), "gpu-b": _node("gpu-b", [GPU_TAINT, STARTUP])})
    yield f
    f.close()


def test_a_proven_node_removes_only_its_startup_taint(tmp_path, fake):
    root = str(kernel_sysfs(tmp_path))
    assert nc.run_check(fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None) == nc.EXIT_PROVEN
    patches = [r for r in fake.requests if r[0] == "PATCH" and not r[1].endswith("/status")]
    assert patches == [
        (
            "PATCH",
            "/api/v1/nodes/gpu-a",
            "application/json-patch+json",
            [{"op": "test", "path": "/spec/taints/1", "value": STARTUP}, {"op": "remove", "path": "/spec/taints/1"}],
        )
    ]
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]  # the GPU taint stays
    assert fake.nodes["gpu-b"]["spec"]["taints"] == [GPU_TAINT, STARTUP]  # another node is never touched
    assert all("/gpu-b" not in r[1] for r in fake.requests)
    (cond,) = fake.nodes["gpu-a"]["status"]["conditions"]
    assert (cond["type"], cond["status"]) == (nc.CONDITION, "True")
    assert not [r for r in fake.requests if r[0] == "POST"]


def test_a_failing_node_keeps_the_taint_with_a_condition_and_an_event(tmp_path, fake):
    fake.nodes["gpu-a"]["status"]["allocatable"][nc.EFA_RESOURCE] = "0"
    root = str(kernel_sysfs(tmp_path))
    assert (
        nc.run_check(fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None) == nc.EXIT_UNPROVEN
    )
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert not [r for r in fake.requests if r[0] == "PATCH" and not r[1].endswith("/status")]
    (cond,) = fake.nodes["gpu-a"]["status"]["conditions"]
    assert cond["status"] == "False" and cond["message"].startswith("plugin: ")
    (event,) = [r for r in fake.requests if r[0] == "POST"]
    assert event[1] == "/api/v1/namespaces/default/events"
    assert event[3]["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-a", "uid": "uid-gpu-a"}
    assert event[3]["type"] == "Warning" and "plugin" in event[3]["message"]


def test_the_removal_is_refused_when_the_taint_list_moved(tmp_path, fake):
    """The JSON-patch test op: if the taint list changed between the read and the patch, nothing is removed."""
    node = json.loads(json.dumps(fake.nodes["gpu-a"]))
    fake.nodes["gpu-a"]["spec"]["taints"].insert(0, {"key": "other", "effect": "NoExecute"})
    with pytest.raises(Exception, match="422"):
        nc.remove_startup_taint(fake.api, node)
    assert len(fake.nodes["gpu-a"]["spec"]["taints"]) == 3


def _taint_patches(fake):
    return [r for r in fake.requests if r[0] == "PATCH" and not r[1].endswith("/status")]


def test_the_loop_removes_a_taint_put_back_and_writes_nothing_while_nothing_changes(tmp_path, fake):
    """UpdateNodegroupConfig applies a changed taint list to running nodes: the loop proves the node again and
    removes it again, with the same guarded patch; rounds in between write nothing."""
    root = str(kernel_sysfs(tmp_path))
    sleeps = []
    code = nc.run_loop(
        fake.api,
        "gpu-a",
        root,
        1,
        interval_s=7,
        provider=lambda: OK_PROVIDER,
        log=lambda m: None,
        sleep=sleeps.append,
        rounds=3,
    )
    assert code == nc.EXIT_PROVEN and sleeps == [7, 7]
    assert len(_taint_patches(fake)) == 1
    assert [r[0] for r in fake.requests] == ["GET", "PATCH", "PATCH", "GET", "GET"]  # one status write, once
    fake.nodes["gpu-a"]["spec"]["taints"].insert(0, dict(STARTUP))  # put back, now first in the list
    assert (
        nc.run_loop(
            fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, sleep=lambda s: None, rounds=1
        )
        == nc.EXIT_PROVEN
    )
    assert _taint_patches(fake)[-1] == (
        "PATCH",
        "/api/v1/nodes/gpu-a",
        "application/json-patch+json",
        [{"op": "test", "path": "/spec/taints/0", "value": STARTUP}, {"op": "remove", "path": "/spec/taints/0"}],
    )
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]
    assert fake.nodes["gpu-b"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert all("/gpu-b" not in r[1] for r in fake.requests)


def test_a_proof_that_fails_later_writes_the_condition_and_one_event_and_does_not_taint_again(tmp_path, fake):
    root = str(kernel_sysfs(tmp_path))
    provider = [OK_PROVIDER]
    nc.run_loop(
        fake.api, "gpu-a", root, 1, provider=lambda: provider[0], log=lambda m: None, sleep=lambda s: None, rounds=1
    )
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]
    provider[0] = (False, "fi_info -l does not list efa (providers tcp;ofi_rxm)")
    logs = []
    assert (
        nc.run_loop(
            fake.api, "gpu-a", root, 1, provider=lambda: provider[0], log=logs.append, sleep=lambda s: None, rounds=3
        )
        == nc.EXIT_UNPROVEN
    )
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]  # not tainted again
    assert len(_taint_patches(fake)) == 1  # only the first removal
    (cond,) = fake.nodes["gpu-a"]["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (nc.CONDITION, "False", "FabricCheckFailed")
    assert cond["message"] == "provider: fi_info -l does not list efa (providers tcp;ofi_rxm)"
    events = [r for r in fake.requests if r[0] == "POST"]
    assert len(events) == 1 and events[0][3]["message"] == cond["message"]  # once, not every round
    assert any("was proven and now fails" in m for m in logs)
    # it recovers: the condition goes back to True, no taint is involved
    provider[0] = OK_PROVIDER
    nc.run_loop(
        fake.api, "gpu-a", root, 1, provider=lambda: provider[0], log=lambda m: None, sleep=lambda s: None, rounds=1
    )
    assert fake.nodes["gpu-a"]["status"]["conditions"][0]["status"] == "True"
    assert len([r for r in fake.requests if r[0] == "POST"]) == 1


def test_the_loop_survives_an_api_outage_and_reads_the_rotated_token(tmp_path, fake):
    root = str(kernel_sysfs(tmp_path))
    token = tmp_path / "token"
    token.write_text("first\n")
    api = nc.Api(fake.api.base, token_file=str(token))
    down = nc.Api("http://127.0.0.1:9", timeout=0.5)  # nothing listens on the discard port
    assert (
        nc.run_loop(
            down, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, sleep=lambda s: None, rounds=2
        )
        == nc.EXIT_API
    )
    nc.run_check(api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None)
    token.write_text("second\n")  # the kubelet rotated the projected token
    nc.run_check(api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None)
    assert fake.tokens == ["Bearer first", "Bearer second"]


def test_the_module_is_read_where_the_agent_mounts_nothing(tmp_path):
    """In the agent the host trees sit under /host/sys, the module under the container's own /sys/module."""
    root = kernel_sysfs(tmp_path / "host", version=None)
    assert failed(nc.decide(str(root), 1, {nc.EFA_RESOURCE: "1"}, OK_PROVIDER)) == ["module"]
    (tmp_path / "own" / "efa").mkdir(parents=True)
    assert failed(nc.decide(str(root), 1, {nc.EFA_RESOURCE: "1"}, OK_PROVIDER, str(tmp_path / "own"))) == []


PROG = "python -m ray_efa_eks.efacheck.node_check"


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--expect-devices", "1"], "--node or $NODE_NAME is required"),
        (["--expect-devices", "1", "--node", "n", "--interval", "0"], "--interval: must be a positive number"),
        (["--expect-devices", "1", "--node", "n", "--interval", "nan"], "--interval: must be a positive number"),
        (
            ["--expect-devices", "1", "--node", "n", "--interval", "-1"],
            "--interval: must be a positive number of seconds, got '-1'",
        ),
        (
            ["--expect-devices", "1", "--node", "n", "--pod-interval", "inf"],
            "--pod-interval: must be a positive number",
        ),
        (["--expect-devices", "1", "--node", "n", "--pod-interval", "soon"], "'soon' is not a number of seconds"),
        (["--expect-devices", "g6", "--node", "n"], "TYPE=COUNT"),
        (["--node", "n"], "--expect-devices"),
        (["--expect-devices", "1", "--node", "n", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_a_usage_error_exits_64_not_the_api_errors_2(monkeypatch, capsys, argv, says):
    """Before: plain argparse exited 2 on a typo, the code that says "the API server refused" (EXIT_API)."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert nc.run_cli(nc.main, argv, PROG) == 64
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err


def test_without_an_api_server_to_ask_it_exits_2_in_one_line(monkeypatch, capsys):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert nc.run_cli(nc.main, ["--expect-devices", "1", "--node", "n", "--once"], PROG) == nc.EXIT_API == 2
    err = capsys.readouterr().err
    assert (
        err == f"{PROG}: error: no Kubernetes API to ask (run it in a pod with a service account token): "
        "$KUBERNETES_SERVICE_HOST is not set\n"
    )
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # in a pod, but no CA file at TOKEN_DIR here
    monkeypatch.setattr(node_api, "TOKEN_DIR", "/nonexistent")
    assert nc.run_cli(nc.main, ["--expect-devices", "1", "--node", "n"], PROG) == 2
    assert "no Kubernetes API to ask" in capsys.readouterr().err


def test_the_cli_hands_its_options_to_the_check_and_the_loop(monkeypatch):
    seen, token_dirs = [], []
    monkeypatch.setattr(
        nc.Api, "in_cluster", classmethod(lambda cls, token_dir=None: token_dirs.append(token_dir) or "api")
    )
    monkeypatch.setattr(nc, "run_check", lambda *a, **k: seen.append(("check", a, k)) or 1)
    monkeypatch.setattr(nc, "run_loop", lambda *a, **k: seen.append(("loop", a, k)) or 2)
    base = ["--node", "n", "--sysfs", "/h", "--expect-devices", "g6.12xlarge=1", "--workers-namespace", "ray"]
    assert nc.run_cli(nc.main, [*base, "--once"], PROG) == 1
    assert nc.run_cli(nc.main, [*base, "--interval", "30", "--pod-interval", "2.5"], PROG) == 2
    (_, a1, k1), (_, a2, k2) = seen
    assert a1 == ("api", "n", "/h", {"g6.12xlarge": 1}) and k1 == {
        "provider": nc.libfabric_lists_efa,
        "module_root": None,
        "workers_namespace": "ray",
    }
    assert a2 == ("api", "n", "/h", {"g6.12xlarge": 1}, 30.0)
    assert (k2["workers_namespace"], k2["pod_interval_s"], k2["module_root"]) == ("ray", 2.5, None)
    assert k2["provider"] is nc.libfabric_lists_efa and token_dirs == [None, None]
    # an image without libfabric (the node agent's slim Python): fi_info is never run, the finding names who checks
    assert nc.run_cli(nc.main, [*base, "--once", "--skip-provider"], PROG) == 1
    ok, said = seen[-1][2]["provider"]()
    assert ok and "efa-provider-check" in said and "fi_info -p efa" in said
    assert nc.run_cli(nc.main, [*base, "--skip-provider", "--token-dir", "/t"], PROG) == 2  # the loop too
    assert seen[-1][2]["provider"]() == (ok, said) and token_dirs[-1] == "/t"


def test_help_ends_with_the_node_check_rows(monkeypatch, capsys):
    from ray_efa_eks.efacheck import exit_codes

    monkeypatch.setenv("COLUMNS", "100")
    assert nc.run_cli(nc.main, ["--help"], PROG) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {PROG}") and out.rstrip().endswith(exit_codes.epilog("node-check", 98))
    monkeypatch.setenv("COLUMNS", "1000")  # each option's help on its line, unwrapped
    assert nc.run_cli(nc.main, ["--help"], PROG) == 0
    said = " ".join(capsys.readouterr().out.split())
    for option, help_text in [
        ("--token-dir TOKEN_DIR", f"where the projected token and ca.crt are (default {node_api.TOKEN_DIR})"),
        (
            "--skip-provider",
            "do not run fi_info -l (an image without libfabric): the Ray workers' efa-provider-check init "
            "containers check the DLC's provider instead",
        ),
    ]:
        assert f"{option} {help_text}" in said, option
    assert exit_codes.command_for(PROG) == "node-check"
    assert set(exit_codes.codes("node-check")) == {0, 1, 2, 64, 70, 130, 141, 143}
    assert (nc.EXIT_PROVEN, nc.EXIT_UNPROVEN, nc.EXIT_API) == (
        exit_codes.ExitStatus.OK,
        exit_codes.ExitStatus.FAILED,
        exit_codes.ExitStatus.NO_ANSWER,
    )


def test_the_expected_count_follows_the_nodes_instance_type(tmp_path, fake):
    assert nc.parse_expected("g6.12xlarge=1,p5.48xlarge=32") == {"g6.12xlarge": 1, "p5.48xlarge": 32}
    for bad in ("g6.12xlarge", "=1", "g6.12xlarge=one"):
        with pytest.raises(ValueError, match="TYPE=COUNT"):
            nc.parse_expected(bad)
    root = str(kernel_sysfs(tmp_path))
    fake.nodes["gpu-a"]["metadata"]["labels"] = {nc.INSTANCE_TYPE_LABEL: "p5.48xlarge"}
    logs = []
    assert (
        nc.run_check(
            fake.api,
            "gpu-a",
            root,
            {"g6.12xlarge": 1, "p5.48xlarge": 32},
            provider=lambda: OK_PROVIDER,
            log=logs.append,
        )
        == nc.EXIT_UNPROVEN
    )
    assert any("1 EFA device(s) (rdmap0s30); the catalogue says 32" in m for m in logs)
    fake.nodes["gpu-a"]["metadata"]["labels"] = {nc.INSTANCE_TYPE_LABEL: "g6.12xlarge"}
    assert (
        nc.run_check(fake.api, "gpu-a", root, {"g6.12xlarge": 1}, provider=lambda: OK_PROVIDER, log=logs.append)
        == nc.EXIT_PROVEN
    )
    fake.nodes["gpu-b"]["metadata"]["labels"] = {nc.INSTANCE_TYPE_LABEL: "x9.huge"}
    assert (
        nc.run_check(fake.api, "gpu-b", root, {"g6.12xlarge": 1}, provider=lambda: OK_PROVIDER, log=logs.append)
        == nc.EXIT_UNPROVEN
    )
    assert any("no count for this node's instance type" in m for m in logs)


# -- a Ray worker's efa-provider-check init container failed on this node (part D) ------------------------

RAY_NS = "ray"


def _worker(name, node, init_status=None, phase="Pending", ns=RAY_NS, node_type="worker"):
    """A KubeRay worker pod as the API server returns it: ``initContainerStatuses`` as the kubelet writes them."""
    pod = {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"ray.io/node-type": node_type, "ray.io/cluster": "ray", "ray.io/group": "gpu"},
        },
        "spec": {"nodeName": node, "restartPolicy": "Never"},
        "status": {"phase": phase},
    }
    if init_status is not None:
        pod["status"]["initContainerStatuses"] = [
            {"name": wp.PROVIDER_CONTAINER, "ready": False, "restartCount": 0, **init_status}
        ]
    return pod


FAILED_INIT = {
    "state": {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "message": "[efa-provider-check] FAIL on node gpu-a: fi_info -p efa -t FI_EP_RDM exited "
            "61\nfi_getinfo: -61 (No data available)",
        }
    }
}
CRASHLOOP_INIT = {
    "restartCount": 3,
    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
    "lastState": {"terminated": {"exitCode": 61, "reason": "Error"}},
}
RUNNING_INIT = {"state": {"running": {"startedAt": "2026-12-05T03:00:00Z"}}}
PASSED_INIT = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
WAITING_INIT = {"state": {"waiting": {"reason": "PodInitializing"}}}


def _proven(fake, root):
    assert (
        nc.run_check(
            fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, workers_namespace=RAY_NS
        )
        == nc.EXIT_PROVEN
    )
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]
    fake.requests.clear()


def _writes(fake):
    return [r for r in fake.requests if r[0] != "GET"]


@pytest.mark.parametrize("init", [FAILED_INIT, CRASHLOOP_INIT], ids=["Failed (restartPolicy Never)", "CrashLoop"])
def test_a_workers_failed_provider_check_puts_the_taint_back_with_a_condition_and_an_event(tmp_path, fake, init):
    root = str(kernel_sysfs(tmp_path))
    _proven(fake, root)
    fake.pods[:] = [_worker("ray-gpu-worker-x1", "gpu-a", init, phase="Failed")]
    logs = []
    assert (
        nc.run_check(
            fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=logs.append, workers_namespace=RAY_NS
        )
        == nc.EXIT_UNPROVEN
    )
    gets = [r[1] for r in fake.requests if r[0] == "GET"]
    assert gets == [
        "/api/v1/nodes/gpu-a",
        "/api/v1/namespaces/ray/pods?fieldSelector=spec.nodeName%3Dgpu-a&labelSelector=ray.io%2Fnode-type%3Dworker",
    ]
    status, event, taint = _writes(fake)
    code = init.get("lastState", init["state"])["terminated"]["exitCode"]
    (cond,) = fake.nodes["gpu-a"]["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (nc.CONDITION, "False", nc.PROVIDER_FAILED)
    assert cond["message"].startswith(
        f"provider: pod ray/ray-gpu-worker-x1: init container efa-provider-check exited {code}"
    )
    assert status[1] == "/api/v1/nodes/gpu-a/status"
    assert event[1] == "/api/v1/namespaces/default/events" and event[3]["message"] == cond["message"]
    assert event[3]["reason"] == nc.PROVIDER_FAILED and event[3]["involvedObject"]["name"] == "gpu-a"
    # exactly one JSON patch, adding only the startup taint, to only its own node
    assert taint == (
        "PATCH",
        "/api/v1/nodes/gpu-a",
        "application/json-patch+json",
        [
            {"op": "test", "path": "/spec/taints", "value": [GPU_TAINT]},
            {"op": "add", "path": "/spec/taints/-", "value": STARTUP},
        ],
    )
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert fake.nodes["gpu-b"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert all("/gpu-b" not in r[1] for r in fake.requests)
    assert any("put back taint" in m for m in logs)


def test_the_record_keeps_the_node_tainted_and_quiet_after_the_pod_is_gone(tmp_path, fake):
    """KubeRay deletes the Failed pod; the sysfs checks all pass; the node does not flip back."""
    root = str(kernel_sysfs(tmp_path))
    _proven(fake, root)
    fake.pods[:] = [_worker("ray-gpu-worker-x1", "gpu-a", FAILED_INIT, phase="Failed")]
    nc.run_check(fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, workers_namespace=RAY_NS)
    fake.pods.clear()
    fake.requests.clear()
    for _ in range(3):
        assert (
            nc.run_check(
                fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, workers_namespace=RAY_NS
            )
            == nc.EXIT_UNPROVEN
        )
    assert _writes(fake) == []  # no removal, no new condition, no new Event
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    # someone removes the taint by hand: the record puts it back, still with one Event in all
    fake.nodes["gpu-a"]["spec"]["taints"] = [GPU_TAINT]
    nc.run_check(fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, workers_namespace=RAY_NS)
    assert [r[0] for r in _writes(fake)] == ["PATCH"] and fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT, STARTUP]


def test_a_pod_on_another_node_is_ignored(tmp_path, fake):
    root = str(kernel_sysfs(tmp_path))
    _proven(fake, root)
    fake.pods[:] = [_worker("ray-gpu-worker-b1", "gpu-b", FAILED_INIT, phase="Failed")]
    assert (
        nc.run_check(
            fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, workers_namespace=RAY_NS
        )
        == nc.EXIT_PROVEN
    )
    assert _writes(fake) == [] and fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]
    # even an API server that ignored the field selector would not make another node's pod count
    assert wp.list_workers(fake.api, "gpu-a", RAY_NS) == []
    assert wp.provider_failures([_worker("w", "gpu-b", FAILED_INIT)]) != []  # the pod itself is a failure


@pytest.mark.parametrize(
    "init", [RUNNING_INIT, PASSED_INIT, WAITING_INIT, None], ids=["running", "exited 0", "waiting", "no status yet"]
)
def test_a_check_still_running_or_passed_changes_nothing(tmp_path, fake, init):
    root = str(kernel_sysfs(tmp_path))
    _proven(fake, root)
    fake.pods[:] = [_worker("ray-gpu-worker-x1", "gpu-a", init, phase="Running" if init is PASSED_INIT else "Pending")]
    assert (
        nc.run_check(
            fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, workers_namespace=RAY_NS
        )
        == nc.EXIT_PROVEN
    )
    assert _writes(fake) == [] and fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]


def test_the_head_pods_and_other_namespaces_are_not_read_as_workers(tmp_path, fake):
    root = str(kernel_sysfs(tmp_path))
    _proven(fake, root)
    fake.pods[:] = [
        _worker("ray-head", "gpu-a", FAILED_INIT, node_type="head"),
        _worker("w", "gpu-a", FAILED_INIT, ns="other"),
    ]
    assert (
        nc.run_check(
            fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, workers_namespace=RAY_NS
        )
        == nc.EXIT_PROVEN
    )
    assert _writes(fake) == []


def test_an_unproven_node_with_a_failed_worker_keeps_the_taint_and_is_recorded(tmp_path, fake):
    """Still tainted (a worker cannot land, but one that landed before a taint came back can fail): recorded, no
    second taint."""
    root = str(kernel_sysfs(tmp_path))
    fake.pods[:] = [_worker("ray-gpu-worker-x1", "gpu-a", CRASHLOOP_INIT)]
    assert (
        nc.run_check(
            fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, workers_namespace=RAY_NS
        )
        == nc.EXIT_UNPROVEN
    )
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert [r[1] for r in _writes(fake)] == ["/api/v1/nodes/gpu-a/status", "/api/v1/namespaces/default/events"]


def test_the_loop_catches_a_failed_pod_between_proofs_and_fails_closed_without_the_list(tmp_path, fake):
    """A Failed worker pod lives until KubeRay's next reconcile: the loop lists the node's workers every
    pod_interval_s between full proofs; a pod list it may not read proves nothing."""
    root = str(kernel_sysfs(tmp_path))
    _proven(fake, root)
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        if len(sleeps) == 2:  # the pod fails 10 s into the minute, and is gone 5 s later
            fake.pods[:] = [_worker("ray-gpu-worker-x1", "gpu-a", FAILED_INIT, phase="Failed")]
        elif len(sleeps) == 3:
            fake.pods.clear()

    nc.run_loop(
        fake.api,
        "gpu-a",
        root,
        1,
        interval_s=60,
        provider=lambda: OK_PROVIDER,
        log=lambda m: None,
        sleep=sleep,
        rounds=2,
        workers_namespace=RAY_NS,
        pod_interval_s=5,
    )
    assert sleeps == [5] * 11 + [5]
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert fake.nodes["gpu-a"]["status"]["conditions"][0]["reason"] == nc.PROVIDER_FAILED
    assert len([r for r in fake.requests if r[0] == "POST"]) == 1
    # without its Role the list is refused: the node is not proven on sysfs alone
    fresh = FakeApi({"gpu-c": _node("gpu-c", [GPU_TAINT, STARTUP])})
    try:
        assert (
            nc.run_check(
                fresh.api,
                "gpu-c",
                root,
                1,
                provider=lambda: OK_PROVIDER,
                log=lambda m: None,
                workers_namespace="missing/x",
            )
            == nc.EXIT_API
        )
        assert fresh.nodes["gpu-c"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    finally:
        fresh.close()


# -- the put-back patch, the pod reads between proofs, and API errors in them ----------------------------------------


class Calls:
    """A stand-in for Api recording each call; ``fail`` (``METHOD path``, the pod list without its query) raises."""

    def __init__(self, node=None, pods=(), fail=None):
        self.node, self.pods, self.fail, self.calls = node, list(pods), fail, []

    def call(self, method, path, body=None, content_type="application/json"):
        self.calls.append((method, path, body, content_type))
        if self.fail == f"{method} {path.split('?')[0]}":
            raise nc.urllib.error.HTTPError(path, 422, "testing value failed", None, None)
        if path.startswith("/api/v1/namespaces/ray/pods"):
            return {"items": self.pods}
        return self.node if method == "GET" else {}


@pytest.mark.parametrize(
    "taints,ops",
    [
        (
            [GPU_TAINT],
            [
                {"op": "test", "path": "/spec/taints", "value": [GPU_TAINT]},
                {"op": "add", "path": "/spec/taints/-", "value": STARTUP},
            ],
        ),
        (
            [GPU_TAINT, {"key": "x", "effect": "NoExecute"}],
            [
                {"op": "test", "path": "/spec/taints", "value": [GPU_TAINT, {"key": "x", "effect": "NoExecute"}]},
                {"op": "add", "path": "/spec/taints/-", "value": STARTUP},
            ],
        ),
        ([], [{"op": "add", "path": "/spec/taints", "value": [STARTUP]}]),
        (None, [{"op": "add", "path": "/spec/taints", "value": [STARTUP]}]),
    ],
)
def test_the_put_back_is_one_json_patch_of_its_own_node(taints, ops):
    node = {"metadata": {"name": "gpu-a"}, "spec": {} if taints is None else {"taints": taints}}
    api = Calls()
    assert nc.add_startup_taint(api, node) is True
    assert api.calls == [("PATCH", "/api/v1/nodes/gpu-a", ops, "application/json-patch+json")]
    assert ops[-1]["value"] is not nc.STARTUP_TAINT and nc.STARTUP_TAINT == STARTUP  # a copy, never the constant


def test_no_patch_when_the_taint_is_already_there():
    api = Calls()
    for taints in ([STARTUP], [GPU_TAINT, {**STARTUP, "timeAdded": "2026-12-05T03:00:00Z"}]):
        assert nc.add_startup_taint(api, {"metadata": {"name": "gpu-a"}, "spec": {"taints": taints}}) is False
    assert nc.add_startup_taint(api, {"metadata": {"name": "gpu-a"}}) is True  # a Node without spec
    assert [c[1] for c in api.calls] == ["/api/v1/nodes/gpu-a"]


FAILED_POD = {
    "metadata": {"name": "w1", "namespace": "ray"},
    "spec": {"nodeName": "gpu-a"},
    "status": {"initContainerStatuses": [{"name": "efa-provider-check", "state": {"terminated": {"exitCode": 1}}}]},
}


@pytest.mark.parametrize(
    "fail",
    [
        "GET /api/v1/namespaces/ray/pods",
        "GET /api/v1/nodes/gpu-a",
        "PATCH /api/v1/nodes/gpu-a/status",
        "POST /api/v1/namespaces/default/events",
        "PATCH /api/v1/nodes/gpu-a",
    ],
)
def test_an_api_error_while_reading_or_recording_a_failure_is_exit_2(fail):
    logs = []
    api = Calls(_node("gpu-a", [GPU_TAINT]), [FAILED_POD], fail=fail)
    assert nc.watch_workers(api, "gpu-a", "ray", logs.append) == nc.EXIT_API
    assert f"{api.calls[-1][0]} {api.calls[-1][1].split('?')[0]}" == fail  # it stopped at the failed call
    reading = fail.startswith("GET")
    assert logs[-1].startswith(
        "[node-check] cannot read node gpu-a or its Ray workers: "
        if reading
        else "[node-check] the API server refused or failed a call for node gpu-a: "
    ), logs
    assert (
        nc.run_check(
            api, "gpu-a", "/nonexistent", 1, provider=lambda: OK_PROVIDER, log=logs.append, workers_namespace="ray"
        )
        == nc.EXIT_API
    )


def test_no_failure_between_proofs_reads_no_node_and_writes_nothing():
    api = Calls(_node("gpu-a", [GPU_TAINT]), [{"metadata": {"name": "w"}, "spec": {"nodeName": "gpu-a"}}])
    assert nc.watch_workers(api, "gpu-a", "ray", lambda m: None) is None
    assert [c[:2] for c in api.calls] == [
        (
            "GET",
            "/api/v1/namespaces/ray/pods?fieldSelector=spec.nodeName%3Dgpu-a&labelSelector=ray.io%2Fnode-type%3Dworker",
        )
    ]


@pytest.mark.parametrize(
    "interval,pod_interval,namespace,sleeps",
    [
        (60, 5, "ray", [5] * 11 + [5]),  # 11 reads, then the last 5 s to the proof
        (12, 5, "ray", [5, 5, 2]),
        (10, 5, "ray", [5, 5]),  # no read at the proof's own second
        (4, 5, "ray", [4]),  # reads slower than proofs: each proof reads the pods itself
        (60, 5, None, [60]),  # no namespace: no read between proofs
    ],
)
def test_the_pod_reads_fill_the_interval_between_proofs(monkeypatch, interval, pod_interval, namespace, sleeps):
    seen, reads = [], []
    monkeypatch.setattr(nc, "run_check", lambda *a, **k: seen.append(("check", len(seen))) or nc.EXIT_PROVEN)
    monkeypatch.setattr(nc, "watch_workers", lambda api, node, ns, log: reads.append((node, ns)))
    slept = []
    nc.run_loop(
        None,
        "gpu-a",
        "/sys",
        1,
        interval_s=interval,
        sleep=slept.append,
        rounds=2,
        workers_namespace=namespace,
        pod_interval_s=pod_interval,
    )
    assert slept == sleeps and sum(slept) == interval
    assert reads == [("gpu-a", namespace)] * (len(sleeps) - 1) and len(seen) == 2


def test_the_loop_goes_on_after_api_errors_between_and_in_proofs(tmp_path, fake):
    """The pod list fails between proofs and at a proof (exit 2 logged), then answers: the failure is still caught."""
    root = str(kernel_sysfs(tmp_path))
    _proven(fake, root)
    fake.pods[:] = [_worker("ray-gpu-worker-x1", "gpu-a", FAILED_INIT, phase="Failed")]
    real, calls = fake.api.call, []

    def flaky(method, path, *a):
        calls.append(path)
        if "/pods?" in path and len([p for p in calls if "/pods?" in p]) <= 3:
            raise nc.urllib.error.URLError("connection refused")
        return real(method, path, *a)

    fake.api.call = flaky
    logs = []
    code = nc.run_loop(
        fake.api,
        "gpu-a",
        root,
        1,
        interval_s=10,
        provider=lambda: OK_PROVIDER,
        log=logs.append,
        sleep=lambda s: None,
        rounds=2,
        workers_namespace=RAY_NS,
        pod_interval_s=5,
    )
    # round 1's own list, the read between the proofs and round 2's own list fail; each is logged, none stops it
    assert sum("cannot read node gpu-a or its Ray workers" in m for m in logs) == 3 and code == nc.EXIT_API
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]  # nothing proven or put back on a failed read
    code = nc.run_loop(
        fake.api,
        "gpu-a",
        root,
        1,
        interval_s=10,
        provider=lambda: OK_PROVIDER,
        log=logs.append,
        sleep=lambda s: None,
        rounds=1,
        workers_namespace=RAY_NS,
        pod_interval_s=5,
    )
    assert code == nc.EXIT_UNPROVEN and fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT, STARTUP]


def test_a_recorded_failure_is_never_re_proven_on_sysfs_alone_whatever_the_loop_sees(tmp_path, fake):
    """Condition reason ProviderCheckFailed on the Node: every later proof keeps the taint, though sysfs passes and
    no pod failed since; only a new Node (a replaced one) starts clean."""
    root = str(kernel_sysfs(tmp_path))
    _proven(fake, root)
    fake.nodes["gpu-a"]["status"]["conditions"] = [
        {"type": nc.CONDITION, "status": "False", "reason": nc.PROVIDER_FAILED, "message": "provider: earlier"}
    ]
    nc.run_loop(
        fake.api,
        "gpu-a",
        root,
        1,
        interval_s=10,
        provider=lambda: OK_PROVIDER,
        log=lambda m: None,
        sleep=lambda s: None,
        rounds=3,
        workers_namespace=RAY_NS,
        pod_interval_s=5,
    )
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert [r[0] for r in _writes(fake)] == ["PATCH"]  # the put-back alone: no new condition, no Event, no removal
    assert fake.nodes["gpu-a"]["status"]["conditions"][0]["message"] == "provider: earlier"
    # a FabricCheckFailed condition (the sysfs checks) is not this record: a passing proof clears it
    fake.nodes["gpu-a"]["status"]["conditions"][0]["reason"] = "FabricCheckFailed"
    assert (
        nc.run_check(
            fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None, workers_namespace=RAY_NS
        )
        == nc.EXIT_PROVEN
    )
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]


def test_on_record_reads_only_a_false_provider_condition():
    assert nc.on_record({"type": nc.CONDITION, "status": "False", "reason": nc.PROVIDER_FAILED}) is True
    for cond in (
        None,
        {},
        {"status": "True", "reason": nc.PROVIDER_FAILED},
        {"status": "False", "reason": "FabricCheckFailed"},
    ):
        assert nc.on_record(cond) is False


def test_an_api_error_while_writing_a_proof_is_exit_2_and_nothing_removed(tmp_path):
    api = Calls(_node("gpu-a", [GPU_TAINT, STARTUP]), fail="PATCH /api/v1/nodes/gpu-a/status")
    logs = []
    assert (
        nc.run_check(api, "gpu-a", str(kernel_sysfs(tmp_path)), 1, provider=lambda: OK_PROVIDER, log=logs.append)
        == nc.EXIT_API
    )
    assert logs[-1].startswith("[node-check] the API server refused or failed a call for node gpu-a: HTTP Error 422")
    assert [c[:2] for c in api.calls] == [("GET", "/api/v1/nodes/gpu-a"), ("PATCH", "/api/v1/nodes/gpu-a/status")]


# -- every output word for word, and each input read as the API server and fi_info give it (mutmut) --------

T = "2026-12-05T06:00:00Z"


def test_the_probe_asks_fi_info_with_a_timeout_and_says_what_it_found():
    seen = []

    def run(cmd, **k):
        seen.append(k)
        return _R(0, FI_INFO_L)

    assert nc.libfabric_lists_efa(run) == (
        True,
        "the image's libfabric has the efa provider (version 201.0); the "
        "device itself is checked by each Ray worker's efa-provider-check "
        "init container",
    )
    assert seen == [{"capture_output": True, "text": True, "timeout": 30}]  # output read, a hung fi_info given up
    # efa: last, or followed by no version line: the version is not known
    for out in ("tcp:\n    version: 1.0\nefa:\n", "efa:\n    type: core\n"):
        ok, detail = nc.libfabric_lists_efa(lambda *a, **k: _R(0, out))
        assert ok and detail.startswith("the image's libfabric has the efa provider (version ?);")
    # no provider listed: what it said on stderr, else its exit code
    assert nc.libfabric_lists_efa(lambda *a, **k: _R(1, "", "  fi_getinfo: -61\n")) == (
        False,
        "fi_info -l does not list efa (fi_getinfo: -61)",
    )
    assert nc.libfabric_lists_efa(lambda *a, **k: _R(3, None, None)) == (False, "fi_info -l does not list efa (exit 3)")


def _dev(errors=None, **ports):
    return {"ports": ports, "errors": errors or {}}


def test_each_finding_says_what_it_saw(monkeypatch, tmp_path):
    roots = []
    devices = {"d0": _dev(**{"1": {"tx_bytes": 1, "rx_bytes": 2}})}
    monkeypatch.setattr(node_findings, "read_ports", lambda root, *a: roots.append(root) or devices)
    (tmp_path / "module" / "efa").mkdir(parents=True)
    got = nc.decide(str(tmp_path), 1, {nc.EFA_RESOURCE: "1"}, (True, "listed"))
    assert roots == [str(tmp_path / "class" / "infiniband")]
    assert got == [
        nc.Finding("devices", True, "1 EFA device(s) (d0); the catalogue says 1"),
        nc.Finding("counters", True, "every port's hw_counters readable"),  # exactly the two it needs
        nc.Finding("module", True, "efa kernel module loaded"),
        nc.Finding(
            "plugin",
            True,
            "the node's allocatable vpc.amazonaws.com/efa is '1'; expected 1 (the "
            "EFA device plugin advertises one per device)",
        ),
        nc.Finding("provider", True, "listed"),
    ]
    devices.clear()
    devices.update(d1=_dev({"/p/tx_bytes": "Permission denied"}, **{"1": {"rx_bytes": 2}}), d0=_dev(**{"1": {}}))
    got = nc.decide(str(tmp_path / "none"), 0, {}, (False, "not listed"))
    assert got == [
        nc.Finding("devices", False, "2 EFA device(s) (d0, d1); the catalogue says 0"),
        nc.Finding(
            "counters", False, "d1: /p/tx_bytes: Permission denied; d1: no tx_bytes/rx_bytes; d0: no tx_bytes/rx_bytes"
        ),
        nc.Finding("module", False, "no /sys/module/efa: the efa kernel module is not loaded"),
        nc.Finding(
            "plugin",
            False,
            "the node's allocatable vpc.amazonaws.com/efa is None; expected 0 (the "
            "EFA device plugin advertises one per device)",
        ),
        nc.Finding("provider", False, "not listed"),
    ]
    devices.clear()
    got = nc.decide(str(tmp_path), -1, {nc.EFA_RESOURCE: "0"}, (True, "listed"))
    assert got[0] == nc.Finding(
        "devices", False, "0 EFA device(s) (none); the catalogue has no count for this node's instance type"
    )
    assert got[1] == nc.Finding("counters", False, "no device to read")


PROVEN = "EFA devices, counters, module, device plugin and libfabric's efa provider checked"
BAD = [nc.Finding("devices", False, "a"), nc.Finding("module", True, "b"), nc.Finding("plugin", False, "c" * 2000)]


def _reported(findings, previous=None, uid=None, name="gpu-a"):
    """What ``report`` wrote: (wrote?, the calls, the time it stamped, which both of its times carry)."""
    api = Calls()
    wrote = node_api.report(api, name, uid, findings, previous)
    conditions = api.calls[0][2]["status"]["conditions"] if api.calls else [{}]
    stamps = {conditions[0].get("lastHeartbeatTime"), conditions[0].get("lastTransitionTime")}
    assert len(stamps) == 1
    return wrote, api.calls, stamps.pop()


@pytest.mark.parametrize(
    "findings, status, reason, message",
    [
        ([nc.Finding("devices", True, "x")], "True", "FabricProven", PROVEN),
        ([], "True", "FabricProven", PROVEN),
        (BAD, "False", "FabricCheckFailed", ("devices: a; plugin: " + "c" * 2000)[:1024]),  # the API's 1024 limit
        (BAD[:1], "False", "FabricCheckFailed", "devices: a"),
    ],
)
def test_the_condition_of_a_set_of_findings(findings, status, reason, message):
    _, calls, _ = _reported(findings)
    (condition,) = calls[0][2]["status"]["conditions"]
    assert (condition["status"], condition["reason"], condition["message"]) == (status, reason, message)
    assert len(condition["message"]) <= 1024


def _condition(status, reason, message, t=T):
    return {
        "status": {
            "conditions": [
                {
                    "type": nc.CONDITION,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": t,
                    "lastTransitionTime": t,
                }
            ]
        }
    }


def _with(node, status, reason, message):
    """``node`` (a copy) whose EfaFabricProven condition is this one."""
    node = json.loads(json.dumps(node))
    node["status"]["conditions"] = _condition(status, reason, message)["status"]["conditions"]
    return node


def _event(name, reason, message, uid=None, t=T):
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.efa-unproven."},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, **({"uid": uid} if uid else {})},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": "ray-efa-eks-node-check", "host": name},
        "firstTimestamp": t,
        "lastTimestamp": t,
        "count": 1,
    }


FAILED_A = [nc.Finding("devices", False, "m")]
SAME = {"status": "False", "reason": "FabricCheckFailed", "message": "devices: m"}


@pytest.mark.parametrize(
    "findings, uid, previous, wrote, writes",
    [
        (FAILED_A, "uid-1", None, True, ["PATCH", "POST"]),  # a failure: the condition and a Warning Event
        (FAILED_A, None, {"status": "True", "reason": "FabricProven", "message": PROVEN}, True, ["PATCH", "POST"]),
        ([nc.Finding("devices", True, "ok")], "u", None, True, ["PATCH"]),  # a proof is no Warning
        (FAILED_A, "u", SAME, False, []),  # nothing new: nothing written
        (FAILED_A, "u", {**SAME, "status": "True"}, True, ["PATCH", "POST"]),
        (FAILED_A, "u", {**SAME, "reason": "X"}, True, ["PATCH", "POST"]),
        (FAILED_A, "u", {**SAME, "message": "n"}, True, ["PATCH", "POST"]),
    ],
)
def test_the_condition_and_the_event_as_written(findings, uid, previous, wrote, writes):
    got, calls, t = _reported(findings, previous, uid)
    assert got is wrote and [c[0] for c in calls] == writes
    if not calls:
        return
    status, reason, message = (calls[0][2]["status"]["conditions"][0][k] for k in ("status", "reason", "message"))
    assert calls[0] == (
        "PATCH",
        "/api/v1/nodes/gpu-a/status",
        _condition(status, reason, message, t),
        "application/strategic-merge-patch+json",
    )
    if "POST" in writes:
        assert calls[1] == (
            "POST",
            "/api/v1/namespaces/default/events",
            _event("gpu-a", reason, message, uid, t),
            "application/json",
        )  # a uid of None: none named


def test_now_is_utc_in_the_apis_format(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # a node whose local time is not UTC still writes UTC
    time.tzset()
    try:
        _, _, now = _reported(FAILED_A)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", now)
    taken = dt.datetime.strptime(now, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    assert abs((dt.datetime.now(dt.timezone.utc) - taken).total_seconds()) < 60


def test_a_node_without_taints_has_nothing_to_remove():
    api = Calls()
    for node in (
        {"metadata": {"name": "n"}},
        {"metadata": {"name": "n"}, "spec": {"taints": None}},
        {"metadata": {"name": "n"}, "spec": {"taints": [GPU_TAINT]}},
    ):
        assert nc.remove_startup_taint(api, node) is False
    assert api.calls == []


def test_a_provider_failure_is_recorded_word_for_word(monkeypatch):
    monkeypatch.setattr(node_api, "_now", lambda: T)
    node, logs = _node("gpu-a", [GPU_TAINT]), []
    api = Calls(node)
    assert nc.fail_provider(api, node, ["pod ray/a: x", "pod ray/b: y"], logs.append) == nc.EXIT_UNPROVEN
    message = (
        f"provider: pod ray/a: x; provider: pod ray/b: y; node tainted with {nc.TAINT_KEY} again until it is replaced"
    )
    assert [c[2] for c in api.calls[:2]] == [
        _condition("False", nc.PROVIDER_FAILED, message),
        _event("gpu-a", nc.PROVIDER_FAILED, message, "uid-gpu-a"),
    ]
    assert logs == [
        "[node-check] FAIL provider: pod ray/a: x",
        "[node-check] FAIL provider: pod ray/b: y",
        f"[node-check] node gpu-a: a Ray worker's provider check failed; put back taint {nc.TAINT_KEY} "
        f"(recorded as {nc.CONDITION}=False reason {nc.PROVIDER_FAILED}: it is not proven again while "
        "that is there)",
    ]
    api, logs = Calls(node), []
    nc.fail_provider(api, node, ["x" * 2000], logs.append)
    assert api.calls[0][2]["status"]["conditions"][0]["message"] == ("provider: " + "x" * 2000)[:1024]
    # on record and tainted: nothing to write, nothing to say
    recorded = _with(_node("gpu-a", [GPU_TAINT, STARTUP]), "False", nc.PROVIDER_FAILED, "earlier")
    api, logs = Calls(recorded), []
    assert nc.fail_provider(api, recorded, [], logs.append) == nc.EXIT_UNPROVEN and api.calls == [] and logs == []


def test_what_a_check_says_in_the_log(tmp_path):
    root = str(kernel_sysfs(tmp_path))
    node, logs = _node("gpu-a", [GPU_TAINT, STARTUP]), []
    assert nc.run_check(Calls(node), "gpu-a", root, 1, provider=lambda: (True, "listed"), log=logs.append) == 0
    assert logs == [
        "[node-check] ok   devices: 1 EFA device(s) (rdmap0s30); the catalogue says 1",
        "[node-check] ok   counters: every port's hw_counters readable",
        "[node-check] ok   module: efa kernel module loaded",
        "[node-check] ok   plugin: the node's allocatable vpc.amazonaws.com/efa is '1'; expected 1 (the "
        "EFA device plugin advertises one per device)",
        "[node-check] ok   provider: listed",
        f"[node-check] node gpu-a proven; removed taint {nc.TAINT_KEY}",
    ]
    # proven before and still proven, untainted: quiet
    proven = _with(_node("gpu-a", [GPU_TAINT]), "True", "FabricProven", "x")
    logs.clear()
    assert nc.run_check(Calls(proven), "gpu-a", root, 1, provider=lambda: (True, "listed"), log=logs.append) == 0
    assert logs == []
    # tainted and failing: the failure, then why the taint stays
    logs.clear()
    assert nc.run_check(Calls(node), "gpu-a", root, 1, provider=lambda: (False, "not listed"), log=logs.append) == 1
    assert logs[-2:] == [
        "[node-check] FAIL provider: not listed",
        f"[node-check] node gpu-a NOT proven: it keeps {nc.TAINT_KEY}; see its {nc.CONDITION} condition",
    ]
    # failing again as before, still tainted: it says so again (the taint is what keeps Ray off)
    failing = _with(node, "False", "FabricCheckFailed", "provider: not listed")
    logs.clear()
    nc.run_check(Calls(failing), "gpu-a", root, 1, provider=lambda: (False, "not listed"), log=logs.append)
    assert "[node-check] FAIL provider: not listed" in logs
    # proven and untainted, but the condition says False (a recovery): the findings are logged
    logs.clear()
    nc.run_check(
        Calls(_with(_node("gpu-a", [GPU_TAINT]), "False", "FabricCheckFailed", "x")),
        "gpu-a",
        root,
        1,
        provider=lambda: (True, "listed"),
        log=logs.append,
    )
    assert len(logs) == 5 and logs[0].startswith("[node-check] ok   devices")
    # proven, condition True, but tainted again (a node group update): the findings are logged before the removal
    logs.clear()
    nc.run_check(
        Calls(_with(node, "True", "FabricProven", "x")),
        "gpu-a",
        root,
        1,
        provider=lambda: (True, "listed"),
        log=logs.append,
    )
    assert len(logs) == 6 and logs[-1] == f"[node-check] node gpu-a proven; removed taint {nc.TAINT_KEY}"


def test_no_round_no_answer():
    assert nc.run_loop(None, "gpu-a", "/sys", 1, rounds=0) == nc.EXIT_API


def test_the_expected_counts_as_written():
    assert nc.parse_expected(" g6.12xlarge=1 , p5.48xlarge=32") == {"g6.12xlarge": 1, "p5.48xlarge": 32}
    with pytest.raises(ValueError) as e:
        nc.parse_expected("a=1=2")
    assert str(e.value) == "--expect-devices 'a=1=2': expected TYPE=COUNT[,TYPE=COUNT...], e.g. g6.12xlarge=1"
    assert nc.expected_for({}, {"g6.12xlarge": 1}) == -1  # a Node without labels is of no known type
    assert nc.expected_for({"metadata": {"labels": None}}, 3) == 3


class _Answer:
    def __init__(self, raw):
        self.raw = raw

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def read(self):
        return self.raw


def test_each_call_is_one_json_request_with_the_token(monkeypatch, tmp_path):
    seen, answers = [], [b'{"kind": "Node"}', b""]

    def urlopen(req, timeout, context):
        seen.append((req.get_method(), req.full_url, dict(req.header_items()), req.data, timeout, context))
        return _Answer(answers.pop(0))

    monkeypatch.setattr(nc.urllib.request, "urlopen", urlopen)
    api = nc.Api("http://h:1/", token="t")
    assert api.call("PATCH", "/p", [{"op": "x"}], "application/json-patch+json") == {"kind": "Node"}
    assert nc.Api("http://h:1").call("GET", "/g") is None  # an empty answer (no token: no Authorization)
    assert seen == [
        (
            "PATCH",
            "http://h:1/p",
            {"Accept": "application/json", "Content-type": "application/json-patch+json", "Authorization": "Bearer t"},
            b'[{"op": "x"}]',
            10.0,
            None,
        ),
        ("GET", "http://h:1/g", {"Accept": "application/json"}, None, 10.0, None),
    ]
    assert isinstance(nc.Api("https://h").ctx, nc.ssl.SSLContext)


def test_in_cluster_is_the_pods_service_account(monkeypatch, tmp_path):
    cafiles = []
    monkeypatch.setattr(nc.ssl, "create_default_context", lambda cafile=None: cafiles.append(cafile) or "ctx")
    monkeypatch.setattr(node_api, "TOKEN_DIR", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    api = nc.Api.in_cluster()
    assert (api.base, api.token, api.token_file, api.ctx, api.timeout) == (
        "https://10.0.0.1:443",
        None,
        str(tmp_path / "token"),
        "ctx",
        10.0,
    )
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    assert nc.Api.in_cluster().base == "https://10.0.0.1:6443"
    assert cafiles == [str(tmp_path / "ca.crt")] * 2


def test_the_help_says_each_option_and_its_default(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "400")
    assert nc.run_cli(nc.main, ["--help"], PROG) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    for said in (
        "Prove this node's EFA path, then remove its startup taint; by default again every --interval seconds, "
        "until stopped (the node agent's fabric-proof container).",
        "--node NODE this node's name (default $NODE_NAME)",
        "--sysfs SYSFS sysfs root holding class/infiniband (default /sys)",
        "where the efa module's directory is (default <sysfs>/module)",
        "EFA devices the catalogue gives the type: COUNT, or TYPE=COUNT[,TYPE=COUNT...] read against the "
        "node's node.kubernetes.io/instance-type label",
        "--interval INTERVAL seconds between proofs (default 60)",
        "namespace of the Ray worker pods to read: a failed efa-provider-check init container in one on this "
        "node puts the startup taint back (default: none, not read)",
        "seconds between two reads of this node's Ray worker pods between proofs (default 5)",
        "--once prove once and stop, answering with the proof's status",
    ):
        assert said in lines


def test_the_loops_defaults_and_its_log_goes_out_at_once(monkeypatch):
    seen, printed = [], []
    monkeypatch.setattr(nc.Api, "in_cluster", classmethod(lambda cls, token_dir=None: "api"))
    monkeypatch.setattr(nc, "run_loop", lambda *a, **k: seen.append((a, k)) or 0)
    monkeypatch.setenv("NODE_NAME", "from-env")
    assert nc.run_cli(nc.main, ["--expect-devices", "2"], PROG) == 0
    ((args, kw),) = seen
    assert args == ("api", "from-env", "/sys", 2, 60)
    assert (kw["module_root"], kw["workers_namespace"], kw["pod_interval_s"]) == (None, None, 5)
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append((a, k)))
    kw["log"]("[node-check] x")
    assert printed == [(("[node-check] x",), {"flush": True})]  # a pipe to the kubelet's log: no line held back


def test_an_unreadable_service_account_is_named_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setattr(node_api, "TOKEN_DIR", "/nonexistent")
    assert nc.run_cli(nc.main, ["--expect-devices", "1", "--node", "n", "--once"], PROG) == nc.EXIT_API
    assert (
        capsys.readouterr().err == f"{PROG}: error: no Kubernetes API to ask (run it in a pod with a service "
        "account token): [Errno 2] No such file or directory\n"
    )


def test_a_node_without_status_or_spec_is_read_as_empty(tmp_path):
    """A Node as bare as the API may answer it: no conditions, no allocatable, no taints: not proven (the plugin
    advertises nothing), with no crash."""
    assert nc.current_condition({}) is None and nc.current_condition({"status": {"conditions": None}}) is None
    assert nc.current_condition({"status": {"conditions": [{"type": "Ready"}]}}) is None
    logs = []
    api = Calls({"metadata": {"name": "gpu-a"}})
    assert (
        nc.run_check(api, "gpu-a", str(kernel_sysfs(tmp_path)), 1, provider=lambda: OK_PROVIDER, log=logs.append)
        == nc.EXIT_UNPROVEN
    )
    assert (
        "[node-check] FAIL plugin: the node's allocatable vpc.amazonaws.com/efa is None; expected 1 (the EFA device "
        "plugin advertises one per device)" in logs
    )
    assert logs[-1].startswith("[node-check] node gpu-a was proven and now fails")  # no taint on it


# --- conditions only a mutation run found unasserted (docs/testing.md, efacheck/node_check.py)


def test_a_module_root_without_efa_is_not_the_module_loaded(tmp_path):
    root = kernel_sysfs(tmp_path / "host", version=None)
    (tmp_path / "own" / "nvidia").mkdir(parents=True)  # a /sys/module with other modules only
    assert failed(nc.decide(str(root), 1, {nc.EFA_RESOURCE: "1"}, OK_PROVIDER, str(tmp_path / "own"))) == ["module"]


def test_the_check_and_the_loop_read_the_module_where_they_are_told(tmp_path, fake):
    """The agent's module root (its own /sys/module) reaches decide() from run_check and from run_loop."""
    root = str(kernel_sysfs(tmp_path / "host", version=None))  # the host tree has no module dir
    (tmp_path / "own" / "efa").mkdir(parents=True)
    own = str(tmp_path / "own")
    quiet = dict(provider=lambda: OK_PROVIDER, log=lambda m: None)
    assert nc.run_check(fake.api, "gpu-a", root, 1, **quiet) == nc.EXIT_UNPROVEN
    assert nc.run_check(fake.api, "gpu-a", root, 1, module_root=own, **quiet) == nc.EXIT_PROVEN
    assert (
        nc.run_loop(fake.api, "gpu-b", root, 1, module_root=own, rounds=1, sleep=lambda s: None, **quiet)
        == nc.EXIT_PROVEN
    )


def test_the_cli_passes_module_root_and_a_sub_second_interval(monkeypatch):
    seen, token_dirs = [], []
    monkeypatch.setattr(
        nc.Api, "in_cluster", classmethod(lambda cls, token_dir=None: token_dirs.append(token_dir) or "api")
    )
    monkeypatch.setattr(nc, "run_check", lambda *a, **k: seen.append(k) or 1)
    monkeypatch.setattr(nc, "run_loop", lambda *a, **k: seen.append((a, k)) or 2)
    base = ["--node", "n", "--expect-devices", "1", "--module-root", "/m"]
    assert nc.run_cli(nc.main, [*base, "--once"], PROG) == 1
    assert nc.run_cli(nc.main, [*base, "--interval", "0.5"], PROG) == 2
    assert seen[0]["module_root"] == "/m"
    (a, k) = seen[1]
    assert a[-1] == 0.5 and k["module_root"] == "/m"


def test_a_missing_node_name_is_said_in_exactly_one_line(monkeypatch, capsys):
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert nc.run_cli(nc.main, ["--expect-devices", "1"], PROG) == 64
    assert capsys.readouterr().err.splitlines()[-1] == f"{PROG}: error: --node or $NODE_NAME is required"


def test_the_api_client_sends_json_over_its_own_tls_context(monkeypatch, tmp_path):
    """The in-cluster CA (the ssl context built from ca.crt) is the one urlopen verifies the API server with, and a
    body goes as application/json unless the call names a patch type."""
    seen = []

    class Reply:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            return b'{"ok": true}'

    def urlopen(req, timeout=None, context=None):
        seen.append(
            (
                req.get_header("Content-type"),
                req.get_header("Accept"),
                req.get_header("Authorization"),
                timeout,
                context,
            )
        )
        return Reply()

    monkeypatch.setattr(nc.urllib.request, "urlopen", urlopen)
    token = tmp_path / "token"
    token.write_text("tok\n")
    api = nc.Api("https://10.0.0.1:443/", token_file=str(token), timeout=3.0)
    assert api.base == "https://10.0.0.1:443"
    assert api.call("POST", "/x", {"a": 1}) == {"ok": True}
    assert api.call("PATCH", "/y", [], "application/json-patch+json") == {"ok": True}
    assert isinstance(api.ctx, nc.ssl.SSLContext)
    assert seen == [
        ("application/json", "application/json", "Bearer tok", 3.0, api.ctx),
        ("application/json-patch+json", "application/json", "Bearer tok", 3.0, api.ctx),
    ]


def test_a_proven_node_that_fails_later_says_why_it_is_not_tainted_again(tmp_path, fake):
    root = kernel_sysfs(tmp_path)
    logs = []
    assert nc.run_check(fake.api, "gpu-a", str(root), 1, provider=lambda: OK_PROVIDER, log=logs.append) == 0
    logs.clear()
    assert nc.run_check(fake.api, "gpu-a", str(root), 1, provider=lambda: (False, "gone"), log=logs.append) == 1
    assert logs[-1] == (
        f"[node-check] node gpu-a was proven and now fails: {nc.CONDITION}=False and an Event; not "
        "tainted again (a running Ray worker would not move; each run's --require-efa judges the "
        "fabric it used)"
    )


@pytest.mark.parametrize(
    "spoil, says",
    [
        # an entry no kernel names, beside the real device: the device is still proven, the node is not
        (lambda root, mp: (root / "class" / "infiniband" / "efa 0;x").mkdir(), "with a name no kernel gives"),
        # the read budget spent before the first file: nothing is vouched for
        (lambda root, mp: mp.setattr(node_findings, "READ_BUDGET_S", -1.0), "the time budget was spent"),
    ],
    ids=["odd-entry", "budget-spent"],
)
def test_what_stopped_the_counter_read_fails_the_counters_check(tmp_path, monkeypatch, spoil, says):
    root = kernel_sysfs(tmp_path)
    spoil(root, monkeypatch)
    findings = {f.check: f for f in nc.decide(str(root), 1, {nc.EFA_RESOURCE: "1"}, OK_PROVIDER)}
    assert findings["devices"].ok and not findings["counters"].ok
    assert says in findings["counters"].detail
