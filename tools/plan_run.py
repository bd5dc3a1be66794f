"""Making a plan: run a tree's program under the Pulumi mocks (this tree, or a git ref's archive with its own code)
and read its resources, settings and rule results."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from typing import Any
from pathlib import Path

from . import layout, rules
from .layout import Resource, Stack
from .plan_model import MissingStack, Plan, PlanError, UsageError
from .plan_records import RECORDS_MARKER
from .plan_settings import settings_of
from .stack_file import DEFAULT_REGION, effective_config, read_stack, shown_config

GIT_TIMEOUT_S = 120
"""How long ``git rev-parse`` and ``git archive`` of the base ref may take (a local repository answers in seconds)."""
BASE_PLAN_TIMEOUT_S = 600
"""How long the base ref's program may run under the mocks (a whole stack takes seconds): past it, the base plan is
an error naming the limit, not a traceback."""

BASE_RECORDS = Path(__file__).with_name("plan_records.py")
"""The script that prints the base ref's records, run by path in the base ref's archive (tools/plan_records.py)."""


def make_plan(resources: list[Resource], *, source: str, stack: str, region: str) -> Plan:
    """The plan of a list of resources (from the mocks, a base ref, or a preview)."""
    st = Stack(resources)
    labels = {r.urn: r.label for r in st.resources}
    tree = [
        {"type": r.type, "name": r.name, "parent": labels.get(r.parent) or layout.urn_label(r.parent)}
        for r in sorted(st.resources, key=lambda r: (r.type, r.name))
    ]
    violations = rules.check(st)
    hooked = {f"{r.type} {r.name}": layout.plain(r.props) for r in st.resources if r.type in HOOKED_TYPES}
    return Plan(
        source,
        stack,
        region,
        tree,
        settings_of(st, region),
        [v.to_json() for v in violations],
        list(rules.RULE_IDS),
        hooked=hooked,
    )


HOOKED_TYPES = ("aws:ec2/launchTemplate:LaunchTemplate", "kubernetes:ray.io/v1:RayCluster")
"""Resources the program guards with ``before_update`` hooks (components/nodes/rollout_guards.py, raycluster.py)."""


def plan_tree(
    root: Path | None = None,
    *,
    stack: str = "dev",
    overrides: dict[str, str] | None = None,
    region: str | None = None,
    program: Path | None = None,
    source: str = "working tree",
    defaults: bool = False,
) -> Plan:
    """Plan ``program`` (default ``root/__main__.py``) in this process, with the code imported here.

    Config comes from ``Pulumi.<stack>.yaml`` beside the program (:class:`MissingStack` without one,
    unless ``defaults``), then ``overrides``.
    """
    from . import mockrun

    program = program or (root or Path.cwd()) / "__main__.py"
    sf = read_stack(program.parent, stack, defaults=defaults)  # a program's stack files sit next to it
    config = {**sf.values, **(overrides or {})}
    region = region or sf.region
    shown = shown_config(sf, overrides, region)
    effective = effective_config(sf, overrides, region, stack)
    pulumi_config = os.environ.pop("PULUMI_CONFIG", None)  # `pulumi up` replaces it with the stack's config too
    try:
        run = mockrun.run_program(config, region=region, program=program, stack=stack)
    except Exception as e:  # noqa: BLE001 - any program failure is the plan's answer, not a crash
        return Plan(
            source,
            stack,
            region,
            error=f"{type(e).__name__}: {e}{_where_offered(e)}",
            config=shown,
            effective=effective,
        )
    finally:
        if pulumi_config is not None:
            os.environ["PULUMI_CONFIG"] = pulumi_config
    plan = make_plan(layout.from_mockrun(run), source=source, stack=stack, region=region)
    plan.config = shown
    plan.effective = effective
    if any(r["type"] == "ray-efa-eks:index:EfaRayCluster" for r in plan.resources):  # the stack, not any program
        plan.settings["coldStart"] = cold_start_lines(config, region)
    return plan


def cold_start_lines(config: dict[str, Any], region: str) -> list[str]:
    """The cold-start model's path for the planned stack's GPU type and image size (components/nodes/cold_start.py)."""
    from ..components.nodes import cold_start
    from ..components.config.config import NAMESPACE, StackConfig

    prefix = NAMESPACE + ":"
    cfg = StackConfig.from_mapping({k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}, region)
    return cold_start.plan_lines(cfg.cold_start_layout, cfg.efaCheckWaitSeconds)


def _where_offered(error: Exception) -> str:
    """For "gpuInstanceType ... is not offered in any AZ of REGION": the regions EC2's offerings data lists for it."""
    from . import mockrun

    itype = getattr(error, "value", None)
    if (
        getattr(error, "key", None) != "gpuInstanceType"
        or "is not offered in any AZ" not in str(error)
        or not isinstance(itype, str)
    ):
        return ""
    regions = [r for r in mockrun.OFFERINGS if mockrun.offered_azs(r, itype)]
    return (
        f" (EC2's offerings data, tools/offerings.json, lists it in: {', '.join(regions)})"
        if regions
        else " (EC2's offerings data, tools/offerings.json, lists it in no region)"
    )


def resolve_ref(ref: str, root: Path | None = None) -> str:
    """The commit id of git ``ref``; a ref is never read as an option.

    A ref that starts with ``-`` is refused (git's own rule: check-ref-format refuses a component that starts with
    ``-``; git-check-ref-format(1)), and the lookup passes ``--end-of-options`` (git >= 2.24, gitcli(7)) so nothing
    after it is an option. :class:`UsageError` for an option-looking ref, :class:`PlanError` for an unknown one.
    """
    if not ref or ref.startswith("-") or "\x00" in ref or any(c.isspace() for c in ref):
        raise UsageError(
            f"--diff {ref!r}: not a git ref (a ref never starts with '-' or holds spaces, so it "
            "cannot be read as an option); name a branch, tag or commit, e.g. --diff origin/main, or a "
            "saved plan: --diff old.json new.json"
        )
    try:
        found = subprocess.run(
            ["git", "-C", str(root or Path.cwd()), "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise PlanError(f"--diff {ref!r}: git rev-parse did not answer within {GIT_TIMEOUT_S} s") from None
    if found.returncode != 0:  # git's own message (stderr) is not shown: ours says what to do
        raise PlanError(
            f"--diff {ref!r}: no such commit in this repository (fetch the ref first: git fetch origin "
            f"{ref}; in CI use actions/checkout with fetch-depth: 0)"
        )
    return found.stdout.strip()


def plan_git_ref(
    ref: str,
    root: Path | None = None,
    *,
    stack: str = "dev",
    overrides: dict[str, str] | None = None,
    region: str | None = None,
    program: str = "__main__.py",
    defaults: bool = False,
) -> Plan:
    """Plan the program as it is at git ``ref``: its own code, its own ``Pulumi.<stack>.yaml``, in a subprocess.

    A stack file missing at ``ref`` (a stack the change adds) makes the base plan an error, not the defaults.
    """
    commit = resolve_ref(ref, root)
    try:
        archive = subprocess.run(
            ["git", "-C", str(root or Path.cwd()), "archive", "--format=tar", "--end-of-options", commit],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise PlanError(f"git archive {ref!r} did not finish within {GIT_TIMEOUT_S} s") from None
    if archive.returncode != 0:
        raise PlanError(
            f"git archive {ref!r} failed: {archive.stderr.decode(errors='replace').strip()} "
            "(fetch the ref first; in CI use actions/checkout with fetch-depth: 0)"
        )
    with tempfile.TemporaryDirectory(prefix="plan-base-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter=_inside_tree)
        base = Path(tmp)
        source = f"git {ref}"
        try:
            sf = read_stack((base / program).parent, stack, defaults=defaults)
        except MissingStack:
            return Plan(
                source,
                stack,
                region or DEFAULT_REGION,
                error=f"Pulumi.{stack}.yaml does not exist at {ref} (a stack this change adds?)",
                absent=True,
            )
        config = {**sf.values, **(overrides or {})}
        region = region or sf.region
        if not (base / program).exists():
            return Plan(source, stack, region, error=f"{program} does not exist at {ref}", absent=True)
        _namespace_shim(base)
        args = json.dumps({"config": config, "region": region, "program": program, "stack": stack})
        # PYTHONPATH (replacing ours): a process the base program starts imports the base code as well
        env = {**{k: v for k, v in os.environ.items() if k != "PULUMI_CONFIG"}, "PYTHONPATH": tmp}
        try:
            proc = subprocess.run(
                [sys.executable, "-P", str(BASE_RECORDS), args],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=BASE_PLAN_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return Plan(
                source,
                stack,
                region,
                error=f"the program at {ref} ran past {BASE_PLAN_TIMEOUT_S} s under "
                "the mocks and was stopped (a whole stack plans in seconds: it waits on something)",
            )
        marker = [ln for ln in proc.stdout.splitlines() if ln.startswith(RECORDS_MARKER)]
        if proc.returncode != 0 or not marker:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return Plan(source, stack, region, error=last)
        records = json.loads(marker[-1][len(RECORDS_MARKER) :])
    plan = make_plan([Resource.from_json(r) for r in records], source=source, stack=stack, region=region)
    plan.config = shown_config(sf, overrides, region)
    return plan


def _inside_tree(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter, leaving out what it refuses instead of failing: git stores a symlink as it is, so a
    ref may hold one to an absolute path or out of the repository, which the base plan must neither follow nor write
    (Python docs, tarfile "Extraction filters": data_filter refuses links outside the destination). The rest is
    planned; a program that needs such a file fails with its own error, the base plan's."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def _namespace_shim(base: Path) -> None:
    """Make ``base``'s packages (components, training, efacheck, tools) importable as ``ray_efa_eks.*`` ahead of any
    installed copy."""
    shim = base / "ray_efa_eks"
    shim.mkdir(exist_ok=True)
    (shim / "__init__.py").write_text("")
    for pkg in ("components", "training", "efacheck", "tools"):
        if (base / pkg).is_dir() and not (shim / pkg).exists():
            (shim / pkg).symlink_to(base / pkg, target_is_directory=True)
