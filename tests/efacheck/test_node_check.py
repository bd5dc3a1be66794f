"""The per-node fabric proof (issue 35): its decisions on kernel-shaped sysfs trees, and its taint removal against a
Kubernetes API fake on loopback that records every request (only its own node, only the startup taint)."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ray_efa_eks.efacheck import node_check as nc
from tests.helpers.sysfs import G6_12XLARGE, P5_48XLARGE, kernel_sysfs

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
        "provider"]


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

    def __init__(self, nodes: dict[str, dict]):
        self.nodes, self.requests, self.tokens = nodes, [], []
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
                taints = node["spec"]["taints"]
                for op in body:
                    i = int(op["path"].rsplit("/", 1)[-1])
                    if op["op"] == "test" and (i >= len(taints) or taints[i] != op["value"]):
                        return self._send(422, {"message": "testing value failed"})
                for op in body:
                    if op["op"] == "remove":
                        del taints[int(op["path"].rsplit("/", 1)[-1])]
                self._send(200, node)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.api = nc.Api(f"http://127.0.0.1:{self.server.server_address[1]}", token="t0k3n")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _node(name, taints, efa="1"):
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": {"taints": [dict(t) for t in taints]},
            "status": {"allocatable": {nc.EFA_RESOURCE: efa, "nvidia.com/gpu": "4"}}}


@pytest.fixture
def fake():
    f = FakeApi({"gpu-a": _node("gpu-a", [GPU_TAINT, STARTUP]), "gpu-b": _node("gpu-b", [GPU_TAINT, STARTUP])})
    yield f
    f.close()


def test_a_proven_node_removes_only_its_startup_taint(tmp_path, fake):
    root = str(kernel_sysfs(tmp_path))
    assert nc.run_check(fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None) == nc.EXIT_PROVEN
    patches = [r for r in fake.requests if r[0] == "PATCH" and not r[1].endswith("/status")]
    assert patches == [("PATCH", "/api/v1/nodes/gpu-a", "application/json-patch+json",
                        [{"op": "test", "path": "/spec/taints/1", "value": STARTUP},
                         {"op": "remove", "path": "/spec/taints/1"}])]
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]  # the GPU taint stays
    assert fake.nodes["gpu-b"]["spec"]["taints"] == [GPU_TAINT, STARTUP]  # another node is never touched
    assert all("/gpu-b" not in r[1] for r in fake.requests)
    (cond,) = fake.nodes["gpu-a"]["status"]["conditions"]
    assert (cond["type"], cond["status"]) == (nc.CONDITION, "True")
    assert not [r for r in fake.requests if r[0] == "POST"]


def test_a_failing_node_keeps_the_taint_with_a_condition_and_an_event(tmp_path, fake):
    fake.nodes["gpu-a"]["status"]["allocatable"][nc.EFA_RESOURCE] = "0"
    root = str(kernel_sysfs(tmp_path))
    assert nc.run_check(fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None) == nc.EXIT_UNPROVEN
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
    code = nc.run_loop(fake.api, "gpu-a", root, 1, interval_s=7, provider=lambda: OK_PROVIDER, log=lambda m: None,
                       sleep=sleeps.append, rounds=3)
    assert code == nc.EXIT_PROVEN and sleeps == [7, 7]
    assert len(_taint_patches(fake)) == 1
    assert [r[0] for r in fake.requests] == ["GET", "PATCH", "PATCH", "GET", "GET"]  # one status write, once
    fake.nodes["gpu-a"]["spec"]["taints"].insert(0, dict(STARTUP))  # put back, now first in the list
    assert nc.run_loop(fake.api, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None,
                       sleep=lambda s: None, rounds=1) == nc.EXIT_PROVEN
    assert _taint_patches(fake)[-1] == ("PATCH", "/api/v1/nodes/gpu-a", "application/json-patch+json",
                                        [{"op": "test", "path": "/spec/taints/0", "value": STARTUP},
                                         {"op": "remove", "path": "/spec/taints/0"}])
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]
    assert fake.nodes["gpu-b"]["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert all("/gpu-b" not in r[1] for r in fake.requests)


def test_a_proof_that_fails_later_writes_the_condition_and_one_event_and_does_not_taint_again(tmp_path, fake):
    root = str(kernel_sysfs(tmp_path))
    provider = [OK_PROVIDER]
    nc.run_loop(fake.api, "gpu-a", root, 1, provider=lambda: provider[0], log=lambda m: None, sleep=lambda s: None,
                rounds=1)
    assert fake.nodes["gpu-a"]["spec"]["taints"] == [GPU_TAINT]
    provider[0] = (False, "fi_info -l does not list efa (providers tcp;ofi_rxm)")
    logs = []
    assert nc.run_loop(fake.api, "gpu-a", root, 1, provider=lambda: provider[0], log=logs.append,
                       sleep=lambda s: None, rounds=3) == nc.EXIT_UNPROVEN
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
    nc.run_loop(fake.api, "gpu-a", root, 1, provider=lambda: provider[0], log=lambda m: None, sleep=lambda s: None,
                rounds=1)
    assert fake.nodes["gpu-a"]["status"]["conditions"][0]["status"] == "True"
    assert len([r for r in fake.requests if r[0] == "POST"]) == 1


def test_the_loop_survives_an_api_outage_and_reads_the_rotated_token(tmp_path, fake):
    root = str(kernel_sysfs(tmp_path))
    token = tmp_path / "token"
    token.write_text("first\n")
    api = nc.Api(fake.api.base, token_file=str(token))
    down = nc.Api("http://127.0.0.1:9", timeout=0.5)  # nothing listens on the discard port
    assert nc.run_loop(down, "gpu-a", root, 1, provider=lambda: OK_PROVIDER, log=lambda m: None,
                       sleep=lambda s: None, rounds=2) == nc.EXIT_API
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


def test_the_cli_refuses_a_bad_interval_and_a_missing_node(monkeypatch, capsys):
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SystemExit) as e:
        nc.main(["--expect-devices", "1"])
    assert e.value.code == 2 and "--node or $NODE_NAME is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        nc.main(["--expect-devices", "1", "--node", "n", "--interval", "0"])
    assert e.value.code == 2 and "--interval must be > 0" in capsys.readouterr().err


def test_the_expected_count_follows_the_nodes_instance_type(tmp_path, fake):
    assert nc.parse_expected("g6.12xlarge=1,p5.48xlarge=32") == {"g6.12xlarge": 1, "p5.48xlarge": 32}
    for bad in ("g6.12xlarge", "=1", "g6.12xlarge=one"):
        with pytest.raises(ValueError, match="TYPE=COUNT"):
            nc.parse_expected(bad)
    root = str(kernel_sysfs(tmp_path))
    fake.nodes["gpu-a"]["metadata"]["labels"] = {nc.INSTANCE_TYPE_LABEL: "p5.48xlarge"}
    logs = []
    assert nc.run_check(fake.api, "gpu-a", root, {"g6.12xlarge": 1, "p5.48xlarge": 32}, provider=lambda: OK_PROVIDER,
                        log=logs.append) == nc.EXIT_UNPROVEN
    assert any("1 EFA device(s) (rdmap0s30); the catalogue says 32" in m for m in logs)
    fake.nodes["gpu-a"]["metadata"]["labels"] = {nc.INSTANCE_TYPE_LABEL: "g6.12xlarge"}
    assert nc.run_check(fake.api, "gpu-a", root, {"g6.12xlarge": 1}, provider=lambda: OK_PROVIDER,
                        log=logs.append) == nc.EXIT_PROVEN
    fake.nodes["gpu-b"]["metadata"]["labels"] = {nc.INSTANCE_TYPE_LABEL: "x9.huge"}
    assert nc.run_check(fake.api, "gpu-b", root, {"g6.12xlarge": 1}, provider=lambda: OK_PROVIDER,
                        log=logs.append) == nc.EXIT_UNPROVEN
    assert any("no count for this node's instance type" in m for m in logs)
