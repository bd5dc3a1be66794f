"""The component provider as the Pulumi engine runs it: a plugin process, then gRPC against an engine and a monitor.

What the engine does, read in pulumi/pulumi (not guessed):
- ``pulumi package add <repo>`` finds ``PulumiPlugin.yaml`` at the repository root; the engine runs that *directory*
  through the Python language host: ``<root>/.venv/bin/python <root> <engine address>``, working directory = the
  consuming program's (sdk/go/common/resource/plugin/plugin.go ``execPlugin`` + ``buildPluginArguments``;
  sdk/python/cmd/pulumi-language-python/main.go ``RunPlugin``), with ``PULUMI_PROJECT``/``PULUMI_CONFIG`` in its
  environment (pkg/resource/plugin/provider_plugin.go ``NewProvider``). It reads the port from the first stdout line.
- then ``Handshake`` (unimplemented by the Python SDK: the engine falls back), ``GetPluginInfo``, ``GetSchema``
  (``pulumi package add`` generates the SDKs from it), ``Configure`` and ``Construct`` with the program's inputs as a
  protobuf ``Struct`` (every number a double), secrets and output values kept (``provider.Construct``).

Here the engine and the resource monitor are fakes served over gRPC in this process; the monitor is the SDK's
``MockMonitor`` with this repo's recording mocks (tools/mockrun.py), so what the plugin registers is compared with
what the Python program registers for the same settings. One plugin process serves the whole module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from google.protobuf.json_format import MessageToDict
from pulumi.runtime import rpc
from pulumi.runtime.proto import (
    engine_pb2,
    engine_pb2_grpc,
    errors_pb2,
    provider_pb2,
    provider_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
    status_pb2,
)

from ray_efa_eks.components.stack import TOKEN
from ray_efa_eks.tools import mockrun
from ray_efa_eks.tools.mockrun import MockRun, RecordingMocks, run_program
from tests.helpers.examples import typescript_example_inputs, yaml_example_inputs

ROOT = Path(__file__).resolve().parents[2]
PROJECT, STACK = "ray-efa-eks-consumer", "dev"
STACK_URN = f"urn:pulumi:{STACK}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{STACK}"
SECRET = {rpc._special_sig_key: rpc._special_secret_sig}
INTEGER_INPUTS = (
    "gpuNodeCount",
    "gpuRootVolumeGiB",
    "efaCheckWaitSeconds",
    "imdsHopLimit",
    "checkpointNoncurrentVersionDays",
)


class FakeEngine(engine_pb2_grpc.EngineServicer):
    """The engine service a provider talks to: logs and the root resource."""

    def __init__(self) -> None:
        self.logs: list[tuple[int, str]] = []
        self.root = STACK_URN

    def Log(self, request, context):  # noqa: N802 - gRPC names
        self.logs.append((request.severity, request.message))
        return empty_pb2.Empty()

    def GetRootResource(self, request, context):  # noqa: N802
        return engine_pb2.GetRootResourceResponse(urn=self.root)

    def SetRootResource(self, request, context):  # noqa: N802
        self.root = request.urn
        return engine_pb2.SetRootResourceResponse()


class _Monitor(mockrun.ParentAwareMonitor):
    """mockrun's parent-aware MockMonitor, with URNs of the consuming stack (not this process's settings)."""

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        if parent and parent != STACK_URN:
            type_ = parent.split("::")[2].split("$")[-1] + "$" + type_
        return f"urn:pulumi:{STACK}::{PROJECT}::{type_}::{name}"


class FakeMonitor(resource_pb2_grpc.ResourceMonitorServicer):
    """The SDK's MockMonitor behind a real gRPC ResourceMonitor service; ``run`` records one Construct."""

    def __init__(self) -> None:
        self.run = MockRun()
        self.mocks = RecordingMocks(self.run, "us-east-1")
        self.mon = _Monitor(self.mocks)
        self.mocks.monitor = self.mon

    def reset(self) -> MockRun:
        self.run = self.mocks.run = MockRun()
        self.mon.resources.clear()
        return self.run

    def SupportsFeature(self, request, context):  # noqa: N802
        return resource_pb2.SupportsFeatureResponse(hasSupport=self.mon.SupportsFeature(request).hasSupport)

    def GetDeploymentInfo(self, request, context):  # noqa: N802
        return self.mon.GetDeploymentInfo(request)

    def RegisterResource(self, request, context):  # noqa: N802
        return self.mon.RegisterResource(request)

    def ReadResource(self, request, context):  # noqa: N802
        return self.mon.ReadResource(request)

    def Invoke(self, request, context):  # noqa: N802
        return self.mon.Invoke(request)

    def RegisterResourceOutputs(self, request, context):  # noqa: N802
        return self.mon.RegisterResourceOutputs(request)

    def RegisterPackage(self, request, context):  # noqa: N802
        return self.mon.RegisterPackage(request)

    def RegisterResourceHook(self, request, context):  # noqa: N802
        """The engine's resmon serves it to component providers too (the plugin's ``Construct`` gets the same
        monitor address as the program): pkg/resource/deploy/source_eval.go ``resmon.RegisterResourceHook``."""
        return self.mon.RegisterResourceHook(request)

    def RegisterErrorHook(self, request, context):  # noqa: N802
        return self.mon.RegisterErrorHook(request)


class Plugin:
    """The provider process and a client, as the engine holds them."""

    def __init__(
        self,
        proc: subprocess.Popen,
        client: provider_pb2_grpc.ResourceProviderStub,
        stderr: Path,
        monitor: FakeMonitor,
        monitor_address: str,
        engine: FakeEngine,
    ) -> None:
        self.proc, self.client, self.stderr_path = proc, client, stderr
        self.monitor, self.monitor_address, self.engine = monitor, monitor_address, engine
        self.lock = threading.Lock()

    def stderr(self) -> str:
        return self.stderr_path.read_text()[-4000:]

    def construct(
        self,
        inputs: struct_pb2.Struct | dict,
        name: str = "training",
        config: dict[str, str] | None = None,
        dry_run: bool = False,
        input_dependencies: dict[str, list[str]] | None = None,
    ) -> tuple[provider_pb2.ConstructResponse, MockRun]:
        """Construct as provider.Construct sends it (pkg/resource/plugin/provider_plugin.go)."""
        if isinstance(inputs, dict):
            inputs = to_struct(inputs)
        with self.lock:
            run = self.monitor.reset()
            request = provider_pb2.ConstructRequest(
                project=PROJECT,
                stack=STACK,
                organization="organization",
                config=config if config is not None else {"aws:region": "us-east-1"},
                dryRun=dry_run,
                parallel=16,
                monitorEndpoint=self.monitor_address,
                type=TOKEN,
                name=name,
                parent=STACK_URN,
                inputs=inputs,
                accepts_output_values=True,
                inputDependencies={
                    k: provider_pb2.ConstructRequest.PropertyDependencies(urns=v)
                    for k, v in (input_dependencies or {}).items()
                },
            )
            return self.client.Construct(request, timeout=180), run


def to_struct(values: dict[str, Any]) -> struct_pb2.Struct:
    """A protobuf Struct as the engine marshals plain values: every number a double."""
    s = struct_pb2.Struct()
    s.update(values)
    return s


def _plain(value: struct_pb2.Value) -> Any:
    return MessageToDict(value)


def input_errors(err: grpc.RpcError) -> dict[str, str]:
    """property path -> reason, from the InputPropertiesError detail the engine reads (rpcerror.go)."""
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            out = {}
            for detail in status.details:
                errors = errors_pb2.InputPropertiesError()
                if detail.Unpack(errors):
                    out.update({e.property_path: e.reason for e in errors.errors})
            return out
    return {}


@pytest.fixture(scope="module")
def plugin():
    engine, monitor = FakeEngine(), FakeMonitor()
    rpc.deserialize_resource = mockrun.resource_ref  # refs in registrations stay URNs (as in run_program)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    engine_pb2_grpc.add_EngineServicer_to_server(engine, server)
    resource_pb2_grpc.add_ResourceMonitorServicer_to_server(monitor, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    address = f"127.0.0.1:{port}"
    program_dir = ROOT / "examples" / "yaml"  # the engine's working directory: the consuming program's
    stderr = Path(tempfile.mkstemp(prefix="ray-efa-eks-plugin-", suffix=".log")[1])
    env = {**os.environ, "PULUMI_PROJECT": PROJECT, "PULUMI_CONFIG": json.dumps({"aws:region": "us-east-1"})}
    with stderr.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT), address], cwd=program_dir, env=env, stdout=subprocess.PIPE, stderr=err_file
        )
    try:
        line = proc.stdout.readline().decode().strip()  # the engine reads one line: the port
        assert line.isdigit(), f"the plugin printed {line!r}, not a port:\n{stderr.read_text()[-4000:]}"
        channel = grpc.insecure_channel(f"127.0.0.1:{line}")
        grpc.channel_ready_future(channel).result(timeout=60)
        yield Plugin(proc, provider_pb2_grpc.ResourceProviderStub(channel), stderr, monitor, address, engine)
        channel.close()
    finally:
        proc.kill()
        proc.wait(timeout=30)
        server.stop(grace=None)
        stderr.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def schema(plugin) -> dict:
    return json.loads(plugin.client.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=60).schema)


@pytest.fixture(scope="module")
def configured(plugin) -> provider_pb2.ConfigureResponse:
    return plugin.client.Configure(
        provider_pb2.ConfigureRequest(variables={}, args=struct_pb2.Struct(), acceptSecrets=True, acceptResources=True),
        timeout=60,
    )


def python_program(inputs: dict[str, Any]) -> MockRun:
    """What the Python program registers for the same settings (stack config; region as aws:region)."""
    config = {k: v for k, v in inputs.items() if k != "region"}
    return run_program(config, region=inputs.get("region", "us-east-1"))


def _construct_ok(plugin, inputs, **kw):
    try:
        return plugin.construct(inputs, **kw)
    except grpc.RpcError as err:
        pytest.fail(f"Construct failed: {err.code()} {err.details()}\n{input_errors(err)}\n{plugin.stderr()}")


def test_plugin_answers_like_a_provider(plugin, schema, configured):
    """Started as the engine starts it, the plugin serves GetPluginInfo, GetSchema and Configure."""
    with pytest.raises(grpc.RpcError) as err:  # the engine falls back to Configure when Handshake is unimplemented
        plugin.client.Handshake(provider_pb2.ProviderHandshakeRequest(engine_address=plugin.monitor_address))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    info = plugin.client.GetPluginInfo(empty_pb2.Empty(), timeout=60)
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", info.version), info.version
    assert schema["name"] == "ray-efa-eks" and TOKEN in schema["resources"]
    assert schema["resources"][TOKEN]["isComponent"] is True
    assert configured.acceptSecrets and configured.acceptOutputs and configured.acceptResources


@pytest.mark.parametrize("example", ["yaml", "typescript"])
def test_construct_registers_what_the_python_program_registers(plugin, schema, configured, example):
    """The acceptance check: an example's inputs (numbers as doubles) -> the whole stack and every output."""
    inputs = yaml_example_inputs() if example == "yaml" else typescript_example_inputs()
    assert isinstance(to_struct(inputs).fields["gpuNodeCount"].number_value, float)  # 2 travels as 2.0
    # Named as the Python program names it for stack dev, so names and output values compare one to one.
    response, run = _construct_ok(plugin, inputs, name="ray-efa-dev")
    expected = python_program(inputs)
    assert len(run.resources) >= 50
    assert Counter(r.type for r in run.resources) == Counter(r.type for r in expected.resources)
    assert sorted((r.type, r.name) for r in run.resources) == sorted((r.type, r.name) for r in expected.resources)
    assert inputs_by_resource(run) == inputs_by_resource(expected)
    assert response.urn == f"urn:pulumi:{STACK}::{PROJECT}::{TOKEN}::ray-efa-dev"
    outputs = schema["resources"][TOKEN]["properties"]
    state = {k: _plain(v) for k, v in response.state.fields.items()}
    assert set(state) == set(expected.outputs) and set(state) <= set(outputs)
    assert {"clusterName", "estimatedHourlyUsd", "kubeconfig", "rayAuthToken"} <= set(state)
    assert set(schema["resources"][TOKEN]["required"]) <= set(state)
    for key in ("kubeconfig", "rayAuthToken"):  # secrets stay secret on the way back to the program
        assert {k: state[key].get(k) for k in SECRET} == SECRET, (key, state[key])
    for key in set(state) - {"kubeconfig", "rayAuthToken"}:
        assert not (isinstance(state[key], dict) and rpc._special_sig_key in state[key]), key
        assert state[key] == expected.outputs[key], key
    assert state["gpuNodeCount"] == 2 and state["estimatedHourlyUsd"] == pytest.approx(
        expected.outputs["estimatedHourlyUsd"]
    )
    # The component hangs under the program's stack; its children under the component.
    component = run.one(TOKEN, "ray-efa-dev")
    assert component.parent == STACK_URN
    assert {r.parent for r in run.resources if r is not component} >= {component.urn}


def test_every_integer_input_as_a_double_booleans_lists_and_omitted_inputs(plugin, configured):
    """Integer keys arrive as doubles from every non-Python SDK; omitted inputs take the reference defaults."""
    inputs = {
        "gpuNodeCount": 3.0,
        "gpuRootVolumeGiB": 250.0,
        "efaCheckWaitSeconds": 900.0,
        "imdsHopLimit": 2.0,
        "checkpointNoncurrentVersionDays": 7.0,
        "efa": True,
        "s3GatewayEndpoint": False,
        "efaCheckBlocking": False,
        "endpointPublicAccessCidrs": ["203.0.113.0/24", "198.51.100.0/24"],
        "efaCheckMinBusbwGbps": 12.5,
    }
    assert set(INTEGER_INPUTS) <= set(inputs)
    response, run = _construct_ok(plugin, inputs, name="ray-efa-dev")
    expected = python_program(inputs)
    assert sorted((r.type, r.name) for r in run.resources) == sorted((r.type, r.name) for r in expected.resources)
    state = {k: _plain(v) for k, v in response.state.fields.items()}
    assert len(run.resources) >= 50 and {"clusterName", "estimatedHourlyUsd", "kubeconfig", "rayAuthToken"} <= set(
        state
    )
    assert state["gpuNodeCount"] == 3 and not [
        e for e in run.of_type("aws:ec2/vpcEndpoint:VpcEndpoint") if e["vpcEndpointType"] == "Gateway"
    ]  # false stays false
    # on demand, gpuScaleToZero defaults to true: 0..gpuNodeCount nodes, the Cluster Autoscaler sets desired
    assert run.one("eks:index:ManagedNodeGroup", "gpu-mng")["scalingConfig"] == {
        "desiredSize": 0,
        "minSize": 0,
        "maxSize": 3,
    }
    assert inputs_by_resource(run) == inputs_by_resource(expected)  # every input of every resource, not only its type


def inputs_by_resource(run: MockRun) -> dict[tuple[str, str], str]:
    """(type, name) -> its inputs as text, URNs without their project (the consuming program's or this repo's)."""

    def text(value: Any) -> str:
        out = json.dumps(value, sort_keys=True, default=repr)
        return re.sub(r"urn:pulumi:[^:]+::[^:]+::(pulumi:pulumi:Stack\$)?", "urn:", out)

    return {(r.type, r.name): text(r.inputs) for r in run.resources}


BAD = [
    ({"gpuNodeCount": 2.5}, "gpuNodeCount", "must be a whole number"),
    ({"gpuInstanceType": "g9.mega"}, "gpuInstanceType", "unknown instance type"),
    ({"efa": "maybe"}, "efa", "must be true or false"),
    ({"imdsHopLimit": 0.0}, "imdsHopLimit", "1..64"),
]


@pytest.mark.parametrize("inputs,key,fragment", BAD)
def test_bad_value_is_an_input_error_not_a_traceback(plugin, configured, inputs, key, fragment):
    """The engine shows it as 'property KEY with value V has a problem: ...' (source_eval.go errorToMessage)."""
    with pytest.raises(grpc.RpcError) as err:
        plugin.construct(inputs)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    errors = input_errors(err.value)
    assert list(errors) == [key] and fragment in errors[key], errors
    assert "Traceback" not in errors[key] and 'File "' not in errors[key] and 'File "' not in err.value.details()
    assert plugin.monitor.run.of_type(TOKEN) == []  # refused before anything was registered


def output_value(value: Any, deps: list[str], secret: bool = False) -> dict[str, Any]:
    """An output value as the engine marshals one (KeepOutputValues; sdk/go/common/resource/plugin/rpc.go)."""
    out = {rpc._special_sig_key: rpc._special_output_value_sig, "value": value, "dependencies": deps}
    if secret:
        out["secret"] = True
    return out


@pytest.mark.parametrize(
    "key,value",
    [
        ("gpuNodeCount", output_value(2, ["urn:pulumi:dev::p::aws:ssm/parameter:Parameter::nodes"])),
        ("gpuInstanceType", output_value("g6.12xlarge", [], secret=True)),
        (
            "endpointPublicAccessCidrs",
            ["10.0.0.0/8", output_value("203.0.113.0/24", ["urn:pulumi:dev::p::x:y:Z::cidr"])],
        ),
        ("clusterAdminArns", {**SECRET, "value": ["arn:aws:iam::123456789012:role/admin"]}),
        ("gpuRootVolumeGiB", rpc.UNKNOWN),  # a preview's unknown, as a plain sentinel
        (
            "gpuInstanceType",
            {rpc._special_sig_key: rpc._special_output_value_sig, "dependencies": ["urn:a"]},
        ),  # unknown output
    ],
)
def test_inputs_sent_as_output_values_are_refused_by_name(plugin, configured, key, value):
    """An SDK Output, a secret or a value with dependencies cannot decide which resources exist: refused, named."""
    with pytest.raises(grpc.RpcError) as err:
        plugin.construct({"gpuNodeCount": 2, key: value}, dry_run=True)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    errors = input_errors(err.value)
    assert list(errors) == [key] and "plain value known at preview" in errors[key], errors
    assert plugin.monitor.run.of_type(TOKEN) == []


def test_the_plugin_survives_its_errors(plugin, configured):
    """The engine keeps one plugin process per deployment: a refused Construct leaves it serving."""
    _construct_ok(plugin, yaml_example_inputs(), dry_run=True)
    assert plugin.proc.poll() is None


def test_sdk_limits_the_provider_works_around():
    """pulumi 3.272 ``map_input_properties``: int(2.0) is computed then overwritten by 2.0, and int(Output) raises
    TypeError (docs/components.md "Known limits"). When this fails, upstream fixed it: drop the workaround in provider.py."""
    import pulumi
    from pulumi.provider.experimental.component import ComponentProvider

    from ray_efa_eks.components.stack import EfaRayCluster

    sdk = ComponentProvider([EfaRayCluster], "ray-efa-eks", version="0.0.0")
    definition = sdk._component_defs["EfaRayCluster"]
    assert sdk.map_inputs({"gpuNodeCount": 2.0}, definition) == {"gpuNodeCount": 2.0}
    assert type(sdk.map_inputs({"gpuNodeCount": 2.0}, definition)["gpuNodeCount"]) is float
    with pytest.raises(TypeError, match="not 'Output'"):
        sdk.map_inputs({"gpuNodeCount": pulumi.Output.from_input(2.0)}, definition)


def test_a_known_value_with_dependencies_is_refused(plugin, configured):
    """Engines that send a resolved output as a plain value plus inputDependencies: still another resource's output."""
    with pytest.raises(grpc.RpcError) as err:
        plugin.construct(
            {"gpuNodeCount": 2, "gpuInstanceType": "g6.12xlarge"},
            input_dependencies={"gpuInstanceType": ["urn:pulumi:dev::p::aws:ssm/parameter:Parameter::t"]},
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert list(input_errors(err.value)) == ["gpuInstanceType"]
