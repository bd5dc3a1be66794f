"""The importable, multi-language package: namespaced install, inferred schema, YAML example, typed project config."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import typing
import zipfile
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from pulumi.provider.experimental.component import ComponentProvider

from ray_efa_eks.tools.dev import config_schema
from ray_efa_eks.components.config.config import ConfigError, StackConfig
from ray_efa_eks.tools.mockrun import run_program
from ray_efa_eks.components.stack import TOKEN, EfaRayCluster, stack_config

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}


@pytest.fixture(scope="module")
def provider() -> ComponentProvider:
    return ComponentProvider([EfaRayCluster], "ray-efa-eks", version="0.1.0")


@pytest.fixture(scope="module")
def schema(provider) -> dict:
    return json.loads(provider.schema)


def test_schema_token_inputs_and_outputs(schema):
    """Every StackConfig key is a plain, optional, described input of the right type; outputs = stack outputs."""
    assert schema["name"] == "ray-efa-eks"
    res = schema["resources"][TOKEN]
    assert res["isComponent"] is True and res["description"].startswith("VPC, EKS")
    inputs = res["inputProperties"]
    keys = config_schema.keys()
    assert set(inputs) == {k["name"] for k in keys}
    assert not res.get("requiredInputs"), "every key has a default: none may be required"
    for k in keys:
        prop = inputs[k["name"]]
        base = typing.get_origin(k["type"]) or k["type"]  # list[str] is a list
        assert prop["type"] == SCHEMA_TYPES[base], k["name"]
        assert prop.get("plain") is True, f"{k['name']} decides which resources exist: it must be plain"
        assert prop["description"] == k["description"], k["name"]
        if base is list:
            assert prop["items"]["type"] == "string"
    outputs = res["properties"]
    expected = {
        **run_program().outputs,
        **run_program(  # a Capacity Block stack adds gpuCapacityBlockEnd
            {
                "gpuInstanceType": "p5.48xlarge",
                "gpuCapacity": "capacity-block",
                "efaCheck": "false",
                "gpuCapacityReservationId": "cr-0123456789abcdef0",
                "availabilityZone": "us-east-1a",
            }
        ).outputs,
    }
    assert set(outputs) == set(expected)
    assert {k: outputs[k].get("type", outputs[k].get("$ref")) for k in outputs} == {
        "clusterName": "string",
        "kubeconfig": "pulumi.json#/Any",
        "gpuAvailabilityZone": "string",
        "gpuNodeCount": "integer",
        "gpuInstanceType": "string",
        "efaInterfacesPerNode": "integer",
        "estimatedHourlyUsd": "number",
        "estimatedIdleHourlyUsd": "number",
        "costNotes": "array",
        "teardownOrder": "array",
        "headServiceName": "string",
        "rayDashboard": "string",
        "checkpointBucket": "string",
        "checkpointStorageUri": "string",
        "efaCheckLogsCommand": "string",
        "gpuCapacityBlockEnd": "string",
        "rayAuthToken": "string",
    }
    assert all(outputs[k].get("description") for k in outputs)
    optional = {
        "checkpointBucket",
        "checkpointStorageUri",
        "efaCheckLogsCommand",
        "gpuCapacityBlockEnd",
        "estimatedHourlyUsd",
        "estimatedIdleHourlyUsd",
        "rayAuthToken",
    }
    assert set(res["required"]) == set(outputs) - optional


def test_generated_copies_match_stack_config():
    """Pulumi.yaml's config block and EfaRayClusterArgs are what StackConfig says (one source of truth)."""
    assert config_schema.stale() == [], "run: python -m ray_efa_eks.tools.dev.config_schema --write"


def test_pulumi_yaml_declares_every_key_with_type_default_and_description():
    declared = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    ours = {k: v for k, v in declared.items() if ":" not in k}
    cfg_fields = {f.name for f in fields(StackConfig)} - set(config_schema.NOT_IN_PROJECT_CONFIG)
    assert set(ours) == cfg_fields
    defaults = StackConfig()
    for name, decl in ours.items():
        assert decl["type"] in ("string", "integer", "boolean", "array")  # Pulumi's project config types
        assert decl["description"]
        value = getattr(defaults, name)
        if value is None:
            assert "default" not in decl
        elif isinstance(value, float):
            assert decl["type"] == "string" and float(decl["default"]) == value
        else:
            assert decl["default"] == value, name
        # The declared default, read back as stack config, is the same setting.
        if "default" in decl:
            assert getattr(StackConfig.from_mapping({name: decl["default"]}), name) == value


def test_generator_notices_a_drift(tmp_path):
    """The check can fail: a key added to StackConfig but not to the copies is reported."""
    for rel in config_schema.TARGETS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    text = (tmp_path / "Pulumi.yaml").read_text()
    (tmp_path / "Pulumi.yaml").write_text(
        text.replace(
            "  gpuNodeCount:\n    type: integer\n    default: 2\n",
            "  gpuNodeCount:\n    type: integer\n    default: 3\n",
        )
    )
    assert config_schema.stale(tmp_path) == ["Pulumi.yaml"]
    assert config_schema.write(tmp_path) == ["Pulumi.yaml"] and config_schema.stale(tmp_path) == []


def test_unknown_key_is_refused_with_the_nearest_valid_key():
    """A typo in a stack file used to be ignored silently (the program read only the keys it knew)."""
    with pytest.raises(ConfigError, match=r"gpuNodeCont = '2' is invalid: unknown key; did you mean gpuNodeCount\?"):
        run_program({"gpuNodeCont": "2"})


def test_yaml_example_sets_only_schema_properties_with_the_right_types(schema, provider):
    program = yaml.safe_load((ROOT / "examples/yaml/Pulumi.yaml").read_text())
    assert program["runtime"] == "yaml" and "ray-efa-eks" in program["packages"]
    res = next(r for r in program["resources"].values() if r["type"] == TOKEN)
    inputs = schema["resources"][TOKEN]["inputProperties"]
    py_types = {"string": str, "integer": int, "boolean": bool, "array": list, "number": (int, float)}
    for key, value in res["properties"].items():
        assert key in inputs, f"examples/yaml sets {key}, which the schema does not have"
        assert isinstance(value, py_types[inputs[key]["type"]]), key
    outputs = schema["resources"][TOKEN]["properties"]
    for expr in program["outputs"].values():
        assert expr.split(".", 1)[1].rstrip("}") in outputs
    # What the provider hands the component for these properties is a valid stack config.
    mapped = provider.map_inputs(res["properties"], provider._component_defs["EfaRayCluster"])
    cfg = stack_config(mapped)
    assert (cfg.gpuInstanceType, cfg.gpuNodeCount, cfg.endpointPublicAccessCidrs) == (
        "g6.12xlarge",
        2,
        ["203.0.113.0/24"],
    )


def test_component_built_from_a_dict_as_the_provider_passes_it(tmp_path):
    """The multi-language path (args as a plain dict) registers the same stack as the Python program."""
    program = tmp_path / "__main__.py"
    program.write_text(
        "import pulumi\nfrom ray_efa_eks.components.stack import EfaRayCluster\n"
        "c = EfaRayCluster('ray-efa-dev', {'gpuNodeCount': 2, 'region': 'us-east-1'})\n"
        "for k, v in c.outputs().items():\n    pulumi.export(k, v)\n"
    )
    from_dict = run_program(program=program)
    from_config = run_program()
    assert sorted((r.type, r.name) for r in from_dict.resources) == sorted(
        (r.type, r.name) for r in from_config.resources
    )
    assert from_dict.outputs["estimatedHourlyUsd"] == from_config.outputs["estimatedHourlyUsd"]
    with pytest.raises(ConfigError, match="gpuInstanceType"):
        stack_config({"gpuInstanceType": "g6.13xlarge"})


def test_children_keep_their_urns_through_aliases(default_run):
    """Stacks created by the earlier root-level program must not replace their VPC and cluster."""
    top = [r for r in default_run.resources if r.parent and r.parent.endswith(f"{TOKEN}::ray-efa-dev")]
    assert {r.name for r in top} >= {"net", "ray-efa-dev", "system", "gpu", "device-plugins", "kuberay", "ray"}


def test_installed_wheel_is_namespaced_and_not_shadowed(tmp_path):
    """Built by the project's own backend: only ray_efa_eks/ in the wheel, importable beside a user's components/."""
    src, wheels = tmp_path / "src", tmp_path / "wheels"
    src.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", src)
    for pkg in (
        "components",
        "efacheck",
        "training",
        "tools",
    ):  # a copy, so the build leaves no build/ or egg-info in the checkout
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(wheels.glob("ray_efa_eks-*.whl"))
    tops = {n.split("/", 1)[0] for n in zipfile.ZipFile(wheel).namelist()}
    # the generated data the library and the mock runner read at run time (pyproject package-data)
    assert {"ray_efa_eks/components/nodes/catalogue.json", "ray_efa_eks/tools/offerings.json"} <= set(
        zipfile.ZipFile(wheel).namelist()
    )
    assert {t for t in tops if not t.endswith(".dist-info")} == {"ray_efa_eks"}
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    assert not (site / "components").exists() and not (site / "training").exists()
    user_repo = tmp_path / "user-infra"
    (user_repo / "components").mkdir(parents=True)
    (user_repo / "components" / "__init__.py").write_text("MINE = True\n")
    code = (
        "import components, ray_efa_eks.components.stack as s, ray_efa_eks.components.addons.efa_check as e\n"
        "assert components.MINE\n"
        "print(s.__file__); print(sorted(e.check_files()))"
    )
    env = {**os.environ, "PYTHONPATH": f"{user_repo}{os.pathsep}{site}", "PYTHONNOUSERSITE": "1"}
    # -S drops the venv's editable finder, so only the unpacked wheel can answer for ray_efa_eks.
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; print([p for p in sys.path if 'site-packages' in p])"],
        capture_output=True,
        text=True,
        check=True,
    )
    venv_site = json.loads(probe.stdout.replace("'", '"'))
    env["PYTHONPATH"] += os.pathsep + os.pathsep.join(venv_site)
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=user_repo, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    first, files = out.stdout.splitlines()[:2]
    assert first.startswith(str(site)), first
    assert "efacheck/efa_check.py" in files and "efacheck/nccl_log.py" in files and "efacheck/fsdp_shapes.py" in files
    assert "training/" not in files  # the gate ships the EFA proof alone (its printed file list)


def test_plugin_manifest_and_entry_point_are_what_the_engine_runs():
    """The engine runs the plugin directory, ``python <root> <engine address>``: no ``main`` can redirect it
    (PluginProject has none: pulumi/pulumi sdk/go/common/workspace/project.go), so the root __main__.py serves."""
    manifest = yaml.safe_load((ROOT / "PulumiPlugin.yaml").read_text())
    assert manifest["runtime"]["name"] == "python" and manifest["runtime"]["options"]["virtualenv"] == ".venv"
    assert set(manifest) <= {"runtime", "packages", "requiredPulumiVersion", "template"}, "keys the CLI ignores"
    text = (ROOT / "__main__.py").read_text()
    assert "if started_as_plugin():\n    serve()" in text
    assert not (ROOT / "provider").exists()


def test_typescript_example_sets_only_schema_properties_with_the_right_types(schema, provider):
    """examples/typescript, checked as the YAML example is: inputs exist with their types, exports are outputs."""
    from tests.helpers.examples import typescript_example_inputs, typescript_example_outputs

    inputs = schema["resources"][TOKEN]["inputProperties"]
    py_types = {"string": str, "integer": int, "boolean": bool, "array": list, "number": (int, float)}
    values = typescript_example_inputs()
    assert values, "no EfaRayCluster arguments found in examples/typescript/index.ts"
    for key, value in values.items():
        assert key in inputs, f"examples/typescript sets {key}, which the schema does not have"
        kind = inputs[key]["type"]
        assert isinstance(value, py_types[kind]) and isinstance(value, bool) == (kind == "boolean"), key
    exported = typescript_example_outputs()
    assert {"clusterName", "kubeconfig", "rayAuthToken"} <= set(exported)
    assert set(exported) <= set(schema["resources"][TOKEN]["properties"])
    package = json.loads((ROOT / "examples/typescript/package.json").read_text())
    assert package["main"] == "index.ts" and "@pulumi/pulumi" in package["dependencies"]
    project = yaml.safe_load((ROOT / "examples/typescript/Pulumi.yaml").read_text())
    assert project["runtime"]["name"] == "nodejs" and project["packages"] == {"ray-efa-eks": "../.."}
    mapped = provider.map_inputs(values, provider._component_defs["EfaRayCluster"])
    cfg = stack_config(mapped)
    assert (cfg.gpuInstanceType, cfg.gpuNodeCount, cfg.efaCheckWaitSeconds) == ("g6.12xlarge", 2, 1800)


def test_every_component_is_exported_from_the_package():
    """``from ray_efa_eks.components import X`` is the stable path: each exported name is its layer module's own
    object, every ComponentResource and ``*Args`` class of the library is exported, and a leaf (a config grammar)
    still imports without the Pulumi SDKs."""
    import ray_efa_eks.components as pkg
    from importlib import import_module

    assert sorted(pkg.__all__) == sorted(n for names in pkg.EXPORTS.values() for n in names)
    for module, names in pkg.EXPORTS.items():
        for name in names:
            assert getattr(pkg, name) is getattr(import_module(f"ray_efa_eks.components.{module}"), name), name
    public = {p.stem: p for p in (ROOT / "components").rglob("*.py")}
    declared = {
        line.split("class ", 1)[1].split("(")[0].split(":")[0]
        for p in public.values()
        for line in p.read_text().splitlines()
        if line.startswith("class ") and ("ComponentResource" in line or line.split("(")[0].endswith("Args"))
    }
    declared -= {"NodeLaunchTemplateArgs", "RayJobArgs"}  # plain data the components above build from, not inputs
    assert declared <= set(pkg.__all__), sorted(declared - set(pkg.__all__))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        pkg.Nope  # noqa: B018
    code = (
        "import sys, ray_efa_eks.components.config.values as v, ray_efa_eks.components as c; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pulumi', 'pulumi_aws')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]
