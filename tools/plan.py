"""Offline plan: what the program declares, with no cloud credentials, no Pulumi CLI and no engine.

Runs the real ``__main__.py`` under the Pulumi SDK's mocks (``tools.mockrun``) with the
stack's ``Pulumi.<stack>.yaml`` plus ``--config`` overrides, then prints the resource tree
and the settings that decide whether multi-node EFA training works and what it costs, and
checks the layout rules (``tools.rules``)::

    python -m ray_efa_eks.tools.plan                                   # text plan of the dev stack
    python -m ray_efa_eks.tools.plan --config gpuInstanceType=p5.48xlarge --json
    python -m ray_efa_eks.tools.plan --check                            # only the rules, one line per break
    python -m ray_efa_eks.tools.plan --diff origin/main                 # this tree vs a git ref (markdown)
    python -m ray_efa_eks.tools.plan --diff old.json new.json           # two saved --json plans

Why offline: reviewers without AWS credentials, forks, and CI without a configured role
still see what a change declares, and a broken EFA layout fails here instead of after the
GPU nodes have been billed. What it cannot see: anything AWS decides (capacity, quotas,
real AZ offerings: ``tools.preflight`` checks those) and the children pulumi-eks
creates inside ``ManagedNodeGroup`` (the CrossGuard pack in ``policy/`` checks those during
a real preview).

The stack's ``Pulumi.<stack>.yaml`` must exist beside the program: a mistyped ``--stack`` is refused
(exit 3) instead of planning the defaults; ``--defaults`` plans a stack that has no file on purpose.
Every config key the plan used is printed (``Config``), secret values as ``[secret]``: they cannot be
decrypted offline, so the program runs with that key's default (``--config KEY=VALUE`` plans a value).

Exit codes: 0 every rule passes; 1 a layout rule is broken (with ``--diff``: or the change rolls a GPU node group
that runs in a reservation or Capacity Block, :func:`rollout_risks`); 2 the program itself failed
(e.g. a config error); 3 unreadable input (no ``Pulumi.<stack>.yaml``, bad YAML, a git ref that
cannot be archived, a saved plan that cannot be read); 64 usage error (a ``--diff`` ref that starts with ``-`` is one:
a ref is never read as an option); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import layout, rules
from .cli import EXIT_USAGE, ArgumentParser
from .layout import UNKNOWN, Resource, Stack

PROJECT = "ray-efa-eks"
DEFAULT_REGION = "us-east-1"
RECORDS_MARKER = "@@plan-records@@ "

# Runs in a git archive of the base ref, with *its* code, so the base plan is the base program's.
# Only mockrun (present since the first commit; in ``components`` before the four-package layout, ``tools`` after) is
# used there. The archive gets a ``ray_efa_eks`` package whose subpackages are the archive's own folders, so a program
# importing either spelling (``components.x`` before the namespaced move, ``ray_efa_eks.components.x`` after) runs
# the base ref's code.
_DUMP_RECORDS = r'''
import json, sys
sys.path.insert(0, ".")
try:
    from ray_efa_eks.tools.mockrun import run_program
except ImportError:
    from ray_efa_eks.components.mockrun import run_program
a = json.loads(sys.argv[1])
run = run_program(a["config"], region=a["region"], program=a["program"], stack=a["stack"])
def rid(r):
    # mockrun before issue 6 recorded no ids; these are the fake ids its mocks hand out.
    return getattr(run, "ids", {}).get(r.urn) or (
        f"subnet-{r.name}" if r.type == "aws:ec2/subnet:Subnet" else f"{r.name}-id")
recs = [{"type": r.type, "name": r.name, "urn": r.urn, "parent": r.parent, "id": rid(r), "props": r.inputs}
        for r in run.resources]
print("\n''' + RECORDS_MARKER + r'''" + json.dumps(recs, default=lambda o: "<%s>" % type(o).__name__))
'''


EXIT_UNREADABLE = 3
"""An input the plan needs could not be read (stack file, git ref, saved plan)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as a shell reports it)."""
SECRET = "[secret]"
"""How an encrypted config value is shown: never skipped, never decrypted."""


class PlanError(Exception):
    """A plan could not be made for reasons outside the program (git, files): exit 3."""


class UsageError(PlanError):
    """Bad command-line arguments: exit 64."""


class MissingStack(PlanError):
    """No ``Pulumi.<stack>.yaml`` beside the program: a mistyped stack name must not plan the defaults."""


@dataclass
class StackFile:
    """What ``Pulumi.<stack>.yaml`` says: values the program gets, and every key as shown (secrets ``[secret]``)."""

    values: dict[str, Any]
    region: str
    shown: dict[str, Any]
    secrets: list[str]


@dataclass
class Plan:
    """One offline plan: where it came from, the resource tree, the settings, the rule results."""

    source: str
    stack: str
    region: str
    resources: list[dict[str, Any]] = field(default_factory=list)
    """``{"type", "name", "parent"}`` with the parent as ``type name``."""
    settings: dict[str, Any] = field(default_factory=dict)
    violations: list[dict[str, Any]] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    error: str | None = None
    """The program's own error (a ConfigError...), when it failed."""
    config: dict[str, Any] = field(default_factory=dict)
    """Every config key the plan used (stack file, then --config), secret values as ``[secret]``."""

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "stack": self.stack, "region": self.region, "error": self.error,
                "config": self.config, "resources": self.resources, "settings": self.settings,
                "rules": {"checked": self.checked, "violations": self.violations}}

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str | None = None) -> "Plan":
        try:
            return cls(source or d["source"], d["stack"], d["region"], d["resources"], d["settings"],
                       d["rules"]["violations"], d["rules"]["checked"], d.get("error"), d.get("config", {}))
        except (KeyError, TypeError) as e:
            raise PlanError(f"not a plan made by `python -m ray_efa_eks.tools.plan --json` (missing {e})") from None

    @property
    def exit_code(self) -> int:
        return 2 if self.error else (1 if self.violations else 0)


# -- making a plan -------------------------------------------------------------------------------------------------

def read_stack(root: Path, stack: str, *, defaults: bool = False) -> StackFile:
    """``Pulumi.<stack>.yaml`` in ``root``: :class:`MissingStack` when absent (unless ``defaults``).

    A secret (``secure:``) cannot be decrypted offline: it is shown as ``[secret]`` and left out of the
    program's config, so the program uses that key's default.
    """
    path = root / f"Pulumi.{stack}.yaml"
    if not path.exists():
        if defaults:
            return StackFile({}, DEFAULT_REGION, {}, [])
        have = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        raise MissingStack(f"stack {stack!r} has no {path.name} in {root} (stacks here: {', '.join(have) or 'none'}); "
                           f"check --stack, or pass --defaults to plan a stack without config")
    data = _load_stack_yaml(path)
    values, shown, secrets, region = {}, {}, [], DEFAULT_REGION
    for key, value in data.items():
        if isinstance(value, dict) and "secure" in value:
            shown[key] = SECRET
            secrets.append(key)
            continue
        if isinstance(value, dict) and "value" in value:
            value = value["value"]
        shown[key] = value
        if key == "aws:region":
            region = str(value)
        elif ":" not in key or key.startswith(f"{PROJECT}:"):
            values[key] = value if isinstance(value, str) else json.dumps(value)
    return StackFile(values, region, shown, secrets)


def _load_stack_yaml(path: Path) -> dict[str, Any]:
    """The ``config:`` mapping of a stack file; :class:`PlanError` (exit 3) naming the file and the problem.

    Pulumi's own reader needs the same shape: a mapping whose ``config`` is a mapping of ``namespace:key`` to a
    value (pulumi/sdk/go/common/workspace/project.go, ``ProjectStack.Config``).
    """
    import yaml

    fix = "it should look like: config:\n  ray-efa-eks:gpuNodeCount: 2"
    if path.is_dir():
        raise PlanError(f"{path}: is a directory, not a stack file; {fix}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlanError(f"{path}: not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r}); save it as "
                        "UTF-8") from None
    except OSError as e:
        raise PlanError(f"{path}: cannot be read ({e.strerror or e})") from None
    if "\x00" in text:
        raise PlanError(f"{path}: binary data (NUL bytes), not YAML; {fix}")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise PlanError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PlanError(f"{path}: the top level is a {type(data).__name__}, not a mapping; {fix}")
    config = data.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise PlanError(f"{path}: config is {config!r} (a {type(config).__name__}), not a mapping of keys to "
                        f"values; {fix}")
    return config


def stack_config(root: Path, stack: str, *, defaults: bool = False) -> tuple[dict[str, Any], str]:
    """(config, region) for the program from ``Pulumi.<stack>.yaml`` in ``root`` (see :func:`read_stack`)."""
    sf = read_stack(root, stack, defaults=defaults)
    return sf.values, sf.region


def _shown_config(sf: StackFile, overrides: dict[str, str] | None, region: str) -> dict[str, Any]:
    shown = {**sf.shown, **(overrides or {}), "aws:region": region}
    return dict(sorted(shown.items()))


def parse_overrides(pairs: list[str]) -> tuple[dict[str, str], str | None]:
    """``KEY=VALUE`` pairs -> (config, region override); ``aws:region=...`` sets the region."""
    config, region = {}, None
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--config {pair!r}: expected KEY=VALUE, e.g. gpuInstanceType=p5.48xlarge")
        if key == "aws:region":
            region = value
        else:
            config[key if ":" in key else f"{PROJECT}:{key}"] = value
    return config, region


def make_plan(resources: list[Resource], *, source: str, stack: str, region: str) -> Plan:
    """The plan of a list of resources (from the mocks, a base ref, or a preview)."""
    st = Stack(resources)
    labels = {r.urn: r.label for r in st.resources}
    tree = [{"type": r.type, "name": r.name, "parent": labels.get(r.parent) or layout.urn_label(r.parent)}
            for r in sorted(st.resources, key=lambda r: (r.type, r.name))]
    violations = rules.check(st)
    return Plan(source, stack, region, tree, settings_of(st, region), [v.to_json() for v in violations],
                list(rules.RULE_IDS))


def plan_tree(root: Path | None = None, *, stack: str = "dev", overrides: dict[str, str] | None = None,
              region: str | None = None, program: Path | None = None, source: str = "working tree",
              defaults: bool = False) -> Plan:
    """Plan ``program`` (default ``root/__main__.py``) in this process, with the code imported here.

    Config comes from ``Pulumi.<stack>.yaml`` beside the program (:class:`MissingStack` without one,
    unless ``defaults``), then ``overrides``.
    """
    from . import mockrun

    program = program or (root or Path.cwd()) / "__main__.py"
    sf = read_stack(program.parent, stack, defaults=defaults)  # a program's stack files sit next to it
    config = {**sf.values, **(overrides or {})}
    region = region or sf.region
    shown = _shown_config(sf, overrides, region)
    try:
        run = mockrun.run_program(config, region=region, program=program, stack=stack)
    except Exception as e:  # noqa: BLE001 - any program failure is the plan's answer, not a crash
        return Plan(source, stack, region, error=f"{type(e).__name__}: {e}{_where_offered(e)}", config=shown)
    plan = make_plan(layout.from_mockrun(run), source=source, stack=stack, region=region)
    plan.config = shown
    return plan


def _where_offered(error: Exception) -> str:
    """For "gpuInstanceType ... is not offered in any AZ of REGION": the regions EC2's offerings data lists for it."""
    from . import mockrun

    itype = getattr(error, "value", None)
    if getattr(error, "key", None) != "gpuInstanceType" or "is not offered in any AZ" not in str(error) \
            or not isinstance(itype, str):
        return ""
    regions = [r for r in mockrun.OFFERINGS if mockrun.offered_azs(r, itype)]
    return (f" (EC2's offerings data, tools/offerings.json, lists it in: {', '.join(regions)})" if regions
            else " (EC2's offerings data, tools/offerings.json, lists it in no region)")


def resolve_ref(ref: str, root: Path | None = None) -> str:
    """The commit id of git ``ref``; a ref is never read as an option.

    A ref that starts with ``-`` is refused (git's own rule: check-ref-format refuses a component that starts with
    ``-``; git-check-ref-format(1)), and the lookup passes ``--end-of-options`` (git >= 2.24, gitcli(7)) so nothing
    after it is an option. :class:`UsageError` for an option-looking ref, :class:`PlanError` for an unknown one.
    """
    if not ref or ref.startswith("-") or "\x00" in ref or any(c.isspace() for c in ref):
        raise UsageError(f"--diff {ref!r}: not a git ref (a ref never starts with '-' or holds spaces, so it "
                         "cannot be read as an option); name a branch, tag or commit, e.g. --diff origin/main, or a "
                         "saved plan: --diff old.json new.json")
    found = subprocess.run(["git", "-C", str(root or Path.cwd()), "rev-parse", "--verify", "--quiet",
                            "--end-of-options", f"{ref}^{{commit}}"], capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.strip():
        raise PlanError(f"--diff {ref!r}: no such commit in this repository (fetch the ref first: git fetch origin "
                        f"{ref}; in CI use actions/checkout with fetch-depth: 0)")
    return found.stdout.strip()


def plan_git_ref(ref: str, root: Path | None = None, *, stack: str = "dev", overrides: dict[str, str] | None = None,
                 region: str | None = None, program: str = "__main__.py", defaults: bool = False) -> Plan:
    """Plan the program as it is at git ``ref``: its own code, its own ``Pulumi.<stack>.yaml``, in a subprocess.

    A stack file missing at ``ref`` (a stack the change adds) makes the base plan an error, not the defaults.
    """
    commit = resolve_ref(ref, root)
    archive = subprocess.run(["git", "-C", str(root or Path.cwd()), "archive", "--format=tar", "--end-of-options",
                              commit], capture_output=True)
    if archive.returncode != 0:
        raise PlanError(f"git archive {ref!r} failed: {archive.stderr.decode(errors='replace').strip()} "
                        "(fetch the ref first; in CI use actions/checkout with fetch-depth: 0)")
    with tempfile.TemporaryDirectory(prefix="plan-base-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        base = Path(tmp)
        source = f"git {ref}"
        try:
            sf = read_stack((base / program).parent, stack, defaults=defaults)
        except MissingStack:
            return Plan(source, stack, region or DEFAULT_REGION,
                        error=f"Pulumi.{stack}.yaml does not exist at {ref} (a stack this change adds?)")
        config = {**sf.values, **(overrides or {})}
        region = region or sf.region
        if not (base / program).exists():
            return Plan(source, stack, region, error=f"{program} does not exist at {ref}")
        _namespace_shim(base)
        args = json.dumps({"config": config, "region": region, "program": program, "stack": stack})
        env = {**os.environ, "PYTHONPATH": tmp}
        proc = subprocess.run([sys.executable, "-c", _DUMP_RECORDS, args], cwd=tmp, env=env,
                              capture_output=True, text=True, timeout=600)
        marker = [ln for ln in proc.stdout.splitlines() if ln.startswith(RECORDS_MARKER)]
        if proc.returncode != 0 or not marker:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return Plan(source, stack, region, error=last)
        records = json.loads(marker[-1][len(RECORDS_MARKER):])
    plan = make_plan([Resource.from_json(r) for r in records], source=source, stack=stack, region=region)
    plan.config = _shown_config(sf, overrides, region)
    return plan


def _namespace_shim(base: Path) -> None:
    """Make ``base``'s packages (components, training, efacheck, tools) importable as ``ray_efa_eks.*`` ahead of any
    installed copy."""
    shim = base / "ray_efa_eks"
    shim.mkdir(exist_ok=True)
    (shim / "__init__.py").write_text("")
    for pkg in ("components", "training", "efacheck", "tools"):
        if (base / pkg).is_dir() and not (shim / pkg).exists():
            (shim / pkg).symlink_to(base / pkg, target_is_directory=True)


def load_plan(path: str) -> Plan:
    """A saved ``--json`` plan; :class:`PlanError` naming the file and the problem."""
    made_by = "save one with: ray-efa-eks plan --json > plan.json"
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise PlanError(f"{path}: not UTF-8 text (byte {e.start}), so not a saved plan; {made_by}") from None
    except OSError as e:
        raise PlanError(f"{path}: cannot read a plan ({e.strerror or e}); {made_by}") from None
    except json.JSONDecodeError as e:
        raise PlanError(f"{path}: not JSON ({e}), so not a saved plan; {made_by}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: holds a JSON {type(data).__name__}, not a plan object; {made_by}")
    try:
        return Plan.from_json(data, source=path)
    except PlanError as e:
        raise PlanError(f"{path}: {e}") from None


# -- settings ------------------------------------------------------------------------------------------------------

def _show(value: Any) -> Any:
    if value is UNKNOWN:
        return "(known after up)"
    return value


def _capacity(g: layout.NodeGroup) -> str:
    """``on-demand``, ``reservation cr-...`` or ``capacity-block cr-...``: what the nodes launch into."""
    if g.market_type == "capacity-block" or g.capacity_type == "CAPACITY_BLOCK":
        mode = "capacity-block"
    elif g.reservation is not None:
        mode = "reservation"
    elif g.capacity_type in (None, "ON_DEMAND"):
        return "on-demand"
    else:
        return str(_show(g.capacity_type)).lower().replace("_", "-")
    return f"{mode} {_show(g.reservation)}" if g.reservation is not None else mode


_GATE_FLAGS = {"--expect-nodes": "nodes", "--expect-gpus-per-node": "gpusPerNode", "--expect-nics": "efaInterfaces",
               "--efa-gbps": "lineRateGbps"}


def efa_gate(st: Stack) -> dict[str, Any] | str:
    """What the EFA check Job will demand (its ``efacheck.efa_check`` arguments, from the catalogue), or "(none)"."""
    import shlex

    for job in st.of_type("kubernetes:batch/v1:Job"):
        containers = layout.dig(job.props, "spec", "template", "spec", "containers", default=[])
        for c in containers if isinstance(containers, list) else []:
            command = c.get("command") if isinstance(c, dict) else None
            script = next((a for a in (command if isinstance(command, list) else [])
                           if isinstance(a, str) and "efacheck.efa_check" in a), "")
            line = next((ln for ln in script.splitlines() if "efacheck.efa_check" in ln and " -- " in ln), "")
            if not line:
                continue
            argv = shlex.split(line.split(" -- ", 1)[1])
            out: dict[str, Any] = {k: argv[argv.index(f) + 1] for f, k in _GATE_FLAGS.items() if f in argv[:-1]}
            out["gpudirectRdma"] = "required" if "--expect-gdrdma" in argv else "not required"
            return out
    return "(none)"


def _template_fingerprint(st: Stack, g: layout.NodeGroup) -> str:
    """Short hash of the node group's launch template inputs: a change is a new template version, which the node
    group follows (``latestVersion``), and EKS rolls every node onto it."""
    import hashlib

    template = layout._template_of(st, g.resource)
    if template is None:
        return "(none)"
    blob = json.dumps(layout.plain(template.props), sort_keys=True, default=lambda o: f"<{type(o).__name__}>")
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


RESERVED = ("reservation", "capacity-block")
ROLLOUT_FIX = ("set gpuNodeCount 0 and `pulumi up` first (the group parks, nothing to roll), then apply this change "
               "with gpuNodeCount 0, then raise gpuNodeCount again (README: Getting GPUs)")


def rollout_risks(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """GPU node groups that a change would roll while they run in a reservation or Capacity Block.

    A new launch template version (or another node group setting) makes EKS replace every node: it first raises
    the Auto Scaling group by the larger of twice its AZ count and maxUnavailable and launches the new nodes there
    (EKS user guide, "managed node update behavior", scale up phase); a fully used ODCR or a Capacity Block has no
    room for them, so the update fails. For Capacity Blocks the EKS guide says to set the desired size to 0 first.
    Scaling alone (``nodes``) rolls nothing and is not flagged.
    """
    out = []
    for name, a in (before.get("nodeGroups") or {}).items():
        b = (after.get("nodeGroups") or {}).get(name)
        if not b or not (a.get("gpusPerNode") or b.get("gpusPerNode")):
            continue
        reserved = [c for c in (a.get("capacity"), b.get("capacity")) if str(c).split(" ")[0] in RESERVED]
        running = a.get("nodes") not in (0, "0")
        changed = [k for k in sorted(set(a) & set(b)) if k != "nodes" and a[k] != b[k]]  # keys both plans know
        if reserved and running and changed:
            what = ", ".join(_FIELD.get(k, k) for k in changed)
            out.append(f"GPU node group `{name}` ({reserved[0]}) changes its {what} while {a.get('nodes')} node(s) "
                       "run: EKS rolls the group by launching new nodes first, which the reservation cannot hold, "
                       f"so the update fails. Fix: {ROLLOUT_FIX}")
    return out


def settings_of(st: Stack, region: str) -> dict[str, Any]:
    """The settings that matter for this stack, as plain data (the ``settings`` of ``--json``)."""
    node_groups = {}
    gpu_subnets: dict[str, Any] = {}
    for g in sorted(layout.node_groups(st), key=lambda g: g.resource.name):
        azs = g.azs
        node_groups[g.resource.name] = {
            "instanceTypes": ", ".join(g.instance_types) or "(unset)",
            "nodes": _show(g.nodes),
            "gpusPerNode": g.gpus_per_node if g.gpus_per_node is not None else ("?" if g.gpu else 0),
            "subnetAzs": ", ".join(azs) if azs is not UNKNOWN else _show(UNKNOWN),
            "efaInterfacesPerNode": _show(g.efa_interfaces),
            "placement": _show(g.placement_strategy) or "none",
            "capacity": _capacity(g),
            "launchTemplate": _template_fingerprint(st, g),
        }
        if g.gpu:
            subnets = g.subnets if g.subnets is not UNKNOWN else []
            gpu_subnets.update({s.name: _show(layout.dig(s.props, "availabilityZone")) for s in subnets})
    charts = {r["chart"]: r["version"] for r in layout.helm_releases(st)}
    pods = {}
    for p in sorted(layout.pods(st), key=lambda p: (p.resource.name, p.role != "head", p.role)):
        main = p.main_container or {}
        pods[p.label] = {
            "replicas": _show(p.replicas),
            "image": _show(main.get("image")),
            "cpu": _show(layout.pod_amount(p, "cpu")),
            "memory": _show(layout.pod_amount(p, "memory")),
            "gpu": layout.pod_count(p, layout.GPU_RESOURCE),
            "efa": layout.efa_requested(p),
            "guaranteedQoS": "yes" if all(layout.qos_problem(c) is None for c in p.containers) else "no",
        }
    from ..components.config import image_tag

    images = sorted({v["image"] for v in pods.values() if isinstance(v["image"], str)})
    cost, missing = layout.hourly_cost(st, region)
    return {
        "nodeGroups": node_groups,
        "gpuSubnets": gpu_subnets,
        "kuberayChartVersion": charts.get(layout.KUBERAY_CHART, "(not installed)"),
        "helmCharts": charts,
        "imageTags": ", ".join(sorted({image_tag(i) or i.rsplit("@", 1)[-1] for i in images})) or "(none)",
        "pods": pods,
        "efaGate": efa_gate(st),
        "estimatedHourlyUsd": cost if cost is not None else "unknown: " + "; ".join(missing),
        "kubernetesVersion": ", ".join(v or "(default)" for v in layout.cluster_versions(st)) or "(no cluster)",
        "costNotes": layout.cost_notes(st, region),
    }


# -- text ----------------------------------------------------------------------------------------------------------

def render_text(plan: Plan) -> str:
    """The human plan: resource tree, layout settings, rule results."""
    lines = [f"Offline plan of {plan.source}: stack {plan.stack}, region {plan.region} "
             "(Pulumi mocks: what the program declares, nothing read from AWS)"]
    lines += _config_lines(plan)
    if plan.error:
        return "\n".join(lines + ["", f"The program failed before the plan was complete: {plan.error}"])
    lines += ["", f"Resources ({len(plan.resources)})"] + _tree_lines(plan.resources)
    s = plan.settings
    lines += ["", "Layout"]
    for name, g in s["nodeGroups"].items():
        lines.append(f"  node group {name}: {g['nodes']} x {g['instanceTypes']} ({g['gpusPerNode']} GPU each), "
                     f"subnets in {g['subnetAzs']}, EFA interfaces/node {g['efaInterfacesPerNode']}, "
                     f"placement {g['placement']}, capacity {g.get('capacity', 'on-demand')}")
    gpu_subnets = ", ".join(f"{n} ({az})" for n, az in s["gpuSubnets"].items()) or "(none)"
    lines.append(f"  GPU subnets: {gpu_subnets}")
    lines.append(f"  KubeRay chart: {s['kuberayChartVersion']}   Helm charts: "
                 + (", ".join(f"{c} {v}" for c, v in s["helmCharts"].items()) or "(none)"))
    lines.append(f"  image tags: {s['imageTags']}")
    lines.append("  pods:")
    width = max((len(k) for k in s["pods"]), default=4)
    lines.append(f"    {'pod':<{width}}  replicas  cpu    memory  GPU  EFA  Guaranteed  image")
    for name, p in s["pods"].items():
        lines.append(f"    {name:<{width}}  {str(p['replicas']):<8}  {str(p['cpu']):<5}  {str(p['memory']):<6}  "
                     f"{str(p['gpu']):<3}  {str(p['efa']):<3}  {p['guaranteedQoS']:<10}  {p['image']}")
    gate = s.get("efaGate")
    if isinstance(gate, dict):
        lines.append(f"  EFA gate expects: {gate.get('nodes', '?')} nodes x {gate.get('gpusPerNode', '?')} GPUs, "
                     f"{gate.get('efaInterfaces', 0)} EFA interfaces/node, line rate "
                     f"{gate.get('lineRateGbps', '?')} Gbit/s, GPUDirect RDMA {gate['gpudirectRdma']}")
    cost = s["estimatedHourlyUsd"]
    lines.append("  estimated cost: " + (f"${cost:,.2f}/hour (nodes as their capacity bills them + EKS control plane "
                                          "at its version's rate today + NAT gateways, before storage and data "
                                          "transfer)" if isinstance(cost, (int, float)) else cost))
    lines.append(f"  Kubernetes version: {s.get('kubernetesVersion', '(unknown)')}")
    lines += [f"    {note}" for note in s.get("costNotes", [])]
    lines += ["", _rules_summary(plan)]
    lines += [_violation_line(v) for v in plan.violations]
    return "\n".join(lines)


def _config_lines(plan: Plan) -> list[str]:
    if not plan.config:
        return []
    out = ["", f"Config (Pulumi.{plan.stack}.yaml, then --config)"]
    for key, value in plan.config.items():
        text = value if isinstance(value, str) else json.dumps(value)
        if value == SECRET:
            text += "  (encrypted: not readable offline, planned with the key's default; --config KEY=VALUE plans a value)"
        out.append(f"  {key}: {text}")
    return out


def _tree_lines(resources: list[dict[str, Any]]) -> list[str]:
    labels = {f"{r['type']} {r['name']}" for r in resources}
    children: dict[str | None, list[dict]] = {}
    roots = []
    for r in resources:
        if r["parent"] in labels:
            children.setdefault(r["parent"], []).append(r)
        else:
            roots.append(r)
    out: list[str] = []

    def walk(items: list[dict], prefix: str) -> None:
        for i, r in enumerate(items):
            last = i == len(items) - 1
            out.append(f"{prefix}{'└─ ' if last else '├─ '}{r['type']}  {r['name']}")
            walk(children.get(f"{r['type']} {r['name']}", []), prefix + ("   " if last else "│  "))

    stack_roots = sorted({r["parent"] or "(stack)" for r in roots})
    out.append(stack_roots[0] if len(stack_roots) == 1 else "(stack)")
    walk(roots, "")
    return out


def _violation_line(v: dict[str, Any]) -> str:
    return rules.Violation(v["rule"], v["resource"], v["problem"], v["fix"]).line()


def aws_rules_summary(plan: Plan) -> str:
    """The AWS API rules the offline runner enforces (tools/aws_rules.py), each with its source document."""
    from .aws_rules import RULES

    broken = next((r.id for r in RULES if plan.error and f"[aws-rule {r.id};" in plan.error), None)
    head = "AWS API rules (the runner refuses the request at its resource, as AWS would: exit 2): "
    head += (f"{broken} broken" if broken else "not all reached (the program failed first)" if plan.error
             else f"all {len(RULES)} pass")
    return "\n".join([head, *(f"  {r.line()}" for r in RULES)])


def _rules_summary(plan: Plan) -> str:
    n = len(plan.checked)
    if not plan.violations:
        return f"Layout rules: all {n} pass ({', '.join(plan.checked)})"
    broken = sorted({v["rule"] for v in plan.violations})
    return f"Layout rules: {len(broken)} of {n} broken ({', '.join(broken)}):"


# -- diff ----------------------------------------------------------------------------------------------------------

_SECTION = {"nodeGroups": "node group", "pods": "pod", "gpuSubnets": "GPU subnet", "helmCharts": "Helm chart"}
_FIELD = {"instanceTypes": "instance type", "nodes": "nodes", "gpusPerNode": "GPUs/node", "subnetAzs": "subnet AZs",
          "efaInterfacesPerNode": "EFA interfaces/node", "placement": "placement strategy", "capacity": "capacity",
          "launchTemplate": "launch template", "replicas": "replicas",
          "image": "image", "cpu": "CPU", "memory": "memory", "gpu": "GPU", "efa": "EFA interfaces",
          "guaranteedQoS": "Guaranteed QoS", "kuberayChartVersion": "KubeRay chart version",
          "imageTags": "image tags", "estimatedHourlyUsd": "estimated $/hour", "kubernetesVersion": "Kubernetes version",
          "costNotes": "cost notes"}


def flatten(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as ``(section, item, field)`` labels -> value, in a stable order."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in _SECTION and isinstance(value, dict):
            for item, fields in value.items():
                if isinstance(fields, dict):
                    for f, v in fields.items():
                        out[f"{_SECTION[key]} `{item}` {_FIELD.get(f, f)}"] = v
                else:
                    out[f"{_SECTION[key]} `{item}`"] = fields
        else:
            out[_FIELD.get(key, key)] = value
    return out


@dataclass
class PlanDiff:
    before: Plan
    after: Plan
    changed: list[tuple[str, Any, Any]]
    added: list[str]
    removed: list[str]
    new_violations: list[dict[str, Any]]
    fixed_violations: list[dict[str, Any]]
    rollouts: list[str] = field(default_factory=list)
    """:func:`rollout_risks`: GPU node groups the change would roll inside a reservation or Capacity Block."""

    @property
    def exit_code(self) -> int:
        return self.after.exit_code or (1 if self.rollouts else 0)


def diff_plans(before: Plan, after: Plan) -> PlanDiff:
    a, b = ({**flatten(p.settings), **{f"config `{k}`": v for k, v in p.config.items()}} for p in (before, after))
    changed = [(k, a.get(k, "—"), b.get(k, "—")) for k in list(a) + [k for k in b if k not in a] if a.get(k) != b.get(k)]
    ra = {f"{r['type']} {r['name']}" for r in before.resources}
    rb = {f"{r['type']} {r['name']}" for r in after.resources}
    lines_a = {_violation_line(v): v for v in before.violations}
    lines_b = {_violation_line(v): v for v in after.violations}
    return PlanDiff(before, after, changed, sorted(rb - ra), sorted(ra - rb),
                    [v for k, v in lines_b.items() if k not in lines_a], [v for k, v in lines_a.items() if k not in lines_b],
                    rollout_risks(before.settings, after.settings))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        value = f"{value:,.2f}"
    return _md(str(value)).replace("|", "\\|").replace("\n", " ")


def _md(text: str) -> str:
    """Text that GitHub markdown shows as written (an unknown <tag> would be dropped)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_diff(d: PlanDiff) -> str:
    """Markdown for a PR comment: changed settings, added/removed resources, rules broken and fixed."""
    after = d.after
    out = [f"### Offline plan: `{d.before.source}` → `{after.source}` (stack `{after.stack}`, {after.region})", "",
           "_Pulumi mocks, no cloud credentials: what the program declares, not what AWS will do. "
           "`ray-efa-eks diff` reproduces this locally._", ""]
    for label, plan in (("before", d.before), ("after", after)):
        if plan.error:
            out += [f"**The {label} program failed:** {_md(plan.error)}", ""]
    if d.changed:
        out += ["| setting | before | after |", "|---|---|---|"]
        out += [f"| {_cell(k)} | {_cell(a)} | {_cell(b)} |" for k, a, b in d.changed]
        out.append("")
    elif not (d.before.error or after.error):
        out += ["No setting changed.", ""]
    if d.added or d.removed:
        out += ["<details><summary>Resources: " f"{len(d.added)} added, {len(d.removed)} removed</summary>", "", "```diff"]
        out += [f"+ {r}" for r in d.added] + [f"- {r}" for r in d.removed] + ["```", "</details>", ""]
    else:
        out += [f"Resources: none added or removed ({len(after.resources)} in all).", ""]
    if after.violations:
        out.append(f"**Layout rules broken ({len(after.violations)}):**")
        out += [f"- ❌ {_md(_violation_line(v))}" + (" _(new)_" if v in d.new_violations else "") for v in after.violations]
    elif not after.error:
        out.append(f"Layout rules: ✅ all {len(after.checked)} pass.")
    out += [f"- ✅ fixed: {_md(_violation_line(v))}" for v in d.fixed_violations]
    if d.rollouts:
        out += ["", f"**GPU node group rollouts in a reservation ({len(d.rollouts)}):**"]
        out += [f"- ⚠️ {_md(r)}" for r in d.rollouts]
    return "\n".join(out) + "\n"


# -- CLI -----------------------------------------------------------------------------------------------------------

def _side(spec: str, args: argparse.Namespace, overrides: dict[str, str], region: str | None) -> Plan:
    """A ``--diff`` operand: a saved ``--json`` plan, or a git ref."""
    if spec.endswith(".json") or Path(spec).is_file():
        return load_plan(spec)
    program = os.path.relpath(Path(args.program_rel).resolve(), Path.cwd())  # the same file inside the ref's tree
    return plan_git_ref(spec, stack=args.stack, overrides=overrides, region=region, program=program,
                        defaults=args.defaults)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    p = ArgumentParser(prog=prog or "python -m ray_efa_eks.tools.plan", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="exit codes: 0 rules pass, 1 a rule is broken, 2 the program failed, 3 unreadable input "
                              "(no Pulumi.<stack>.yaml, git ref, saved plan), 64 usage error, 130 interrupted")
    p.add_argument("--stack", default="dev", help="stack whose Pulumi.<stack>.yaml is read (default dev; must exist)")
    p.add_argument("--defaults", action="store_true",
                   help="plan a stack that has no Pulumi.<stack>.yaml: every key at its default")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="override a ray-efa-eks: key (or aws:region); repeatable")
    p.add_argument("--program", default="__main__.py", dest="program_rel",
                   help="program file (default ./__main__.py: run from the project root, like pulumi)")
    p.add_argument("--json", action="store_true", help="print the plan (or the diff) as one JSON object")
    p.add_argument("--check", action="store_true", help="print only the rule results: one line per broken rule")
    p.add_argument("--diff", nargs="+", metavar="REF_OR_JSON",
                   help="BASE_REF (this tree vs a git ref) or OLD.json NEW.json (two saved --json plans)")
    args = p.parse_args(argv)
    try:
        return _run(p, args)
    except KeyboardInterrupt:
        print("plan: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _check_program(path: str) -> None:
    program = Path(path)
    if program.is_dir():
        raise PlanError(f"--program {path}: is a directory; name the program file, e.g. --program {program / '__main__.py'}")
    if program.exists() and not program.is_file():
        raise PlanError(f"--program {path}: not a regular file; name the program file, e.g. --program __main__.py")
    if not program.is_file():
        raise PlanError(f"--program {path}: no such file; run from the project root (where __main__.py and "
                        "Pulumi.<stack>.yaml are) or name the program with --program")


def _run(p: ArgumentParser, args: argparse.Namespace) -> int:
    try:
        overrides, region = parse_overrides(args.config)
        if args.diff:
            if len(args.diff) > 2:
                raise UsageError("--diff takes BASE_REF or OLD.json NEW.json")
            for spec in args.diff:
                if spec.startswith("-"):
                    resolve_ref(spec)  # raises: an option-looking ref is a usage error
            _check_program(args.program_rel)
            before = _side(args.diff[0], args, overrides, region)
            if len(args.diff) == 2:
                after = _side(args.diff[1], args, overrides, region)
            else:
                after = plan_tree(stack=args.stack, overrides=overrides, region=region,
                                  program=Path(args.program_rel).resolve(), defaults=args.defaults)
            d = diff_plans(before, after)
            if args.json:
                print(json.dumps({"before": before.to_json(), "after": after.to_json(),
                                  "changed": [{"setting": k, "before": a, "after": b} for k, a, b in d.changed],
                                  "added": d.added, "removed": d.removed}, indent=2))
            else:
                print(render_diff(d), end="")
            return d.exit_code
        _check_program(args.program_rel)
        plan = plan_tree(stack=args.stack, overrides=overrides, region=region, program=Path(args.program_rel).resolve(),
                         defaults=args.defaults)
    except UsageError as e:
        p.print_usage(sys.stderr)
        print(f"plan: {e}", file=sys.stderr)
        return EXIT_USAGE
    except PlanError as e:
        print(f"plan: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    elif args.check:
        if plan.error:
            print(f"program failed: {plan.error}")
        else:
            print(_rules_summary(plan))
            for v in plan.violations:
                print(_violation_line(v))
        print(aws_rules_summary(plan))
    else:
        print(render_text(plan))
    return plan.exit_code


if __name__ == "__main__":
    sys.exit(main())
