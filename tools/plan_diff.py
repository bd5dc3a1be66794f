"""Two plans compared: settings changed, resources added and removed, rules newly broken or fixed, GPU node group
rollouts; rendered as markdown for a pull request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .plan_model import Plan
from .plan_render import violation_line
from .plan_settings import FIELD_NAMES, SECTION_NAMES, rollout_risks


def flatten(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as ``(section, item, field)`` labels -> value, in a stable order."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in SECTION_NAMES and isinstance(value, dict):
            for item, fields in value.items():
                if isinstance(fields, dict):
                    for f, v in fields.items():
                        out[f"{SECTION_NAMES[key]} `{item}` {FIELD_NAMES.get(f, f)}"] = v
                else:
                    out[f"{SECTION_NAMES[key]} `{item}`"] = fields
        else:
            out[FIELD_NAMES.get(key, key)] = value
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
    refusals: list[str] = field(default_factory=list)
    """:func:`eks_refusals` and :func:`hook_verdicts`: what EKS refuses, or ``pulumi up`` refuses before EKS or KubeRay
    would do it destructively, in going from the before plan to the after one (exit 2)."""
    notes: list[str] = field(default_factory=list)
    """:func:`hook_verdicts`' warnings: what the update replaces or stops (``pulumi up`` warns the same)."""

    @property
    def exit_code(self) -> int:
        """2 when EKS would refuse the change or either side's program failed (a pull request's check must not pass
        on a broken base); a stack or program the change adds (absent at the base) is not a failure."""
        failed = bool(self.before.error and not self.before.absent)
        return 2 if self.refusals or failed else (self.after.exit_code or (1 if self.rollouts else 0))


def eks_refusals(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The change EKS refuses between two plans' settings, worded as ``pulumi up`` refuses it: a Kubernetes version
    that skips a minor or goes down (components/live_cluster.upgrade_problem, the same check the program makes
    against the live cluster). Plans of a program that declared no version, or several, are not judged."""
    from ..components.cluster.live_cluster import upgrade_problem

    a, b = (str(s.get("kubernetesVersion")) for s in (before, after))
    if not all(v.replace(".", "").isdigit() and v.count(".") == 1 for v in (a, b)):
        return []  # none declared ("None"), several ("1.33,1.34"), or not MAJOR.MINOR
    problem = upgrade_problem(a, b)
    return [f"kubernetesVersion {a} -> {b}: {problem}"] if problem else []


LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"


def hook_verdicts(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(refusals, warnings) of the program's ``before_update`` resource hooks for every resource both plans hold
    with other inputs: the same functions on the same recorded inputs as ``pulumi up`` runs them
    (components/nodes/rollout_guards.py on the launch templates, components/ray/raycluster.py ``chart_bump_problem`` on the
    RayCluster), so the diff and the update refuse alike."""
    from ..components.nodes import rollout_guards
    from ..components.ray.raycluster import chart_bump_problem

    refusals: list[str] = []
    warnings: list[str] = []
    for label, new in after.items():
        old = before.get(label)
        if old is None or old == new:
            continue
        typ, _, name = label.partition(" ")
        a, b = dict(old or {}), dict(new or {})
        if typ == LAUNCH_TEMPLATE:
            role = dict(b.get("tags") or {}).get(rollout_guards.TAG_ROLE)
            if role == "gpu":
                no, warn = rollout_guards.gpu_update(a, b)
                refusals += [f"{name}: {x}" for x in no]
                warnings += [f"{name}: {x}" for x in warn]
            elif role == "system":
                warnings += [f"{name}: {x}" for x in rollout_guards.system_update(a, b)]
        elif typ == RAY_CLUSTER:
            problem = chart_bump_problem(a, b)
            if problem:
                refusals.append(f"{name}: {problem}")
    return refusals, warnings


def diff_plans(before: Plan, after: Plan) -> PlanDiff:
    a, b = ({**flatten(p.settings), **{f"config `{k}`": v for k, v in p.config.items()}} for p in (before, after))
    changed = [
        (k, a.get(k, "—"), b.get(k, "—")) for k in list(a) + [k for k in b if k not in a] if a.get(k) != b.get(k)
    ]
    ra = {f"{r['type']} {r['name']}" for r in before.resources}
    rb = {f"{r['type']} {r['name']}" for r in after.resources}
    lines_a = {violation_line(v): v for v in before.violations}
    lines_b = {violation_line(v): v for v in after.violations}
    hooked, notes = hook_verdicts(before.hooked, after.hooked)
    return PlanDiff(
        before,
        after,
        changed,
        sorted(rb - ra),
        sorted(ra - rb),
        [v for k, v in lines_b.items() if k not in lines_a],
        [v for k, v in lines_a.items() if k not in lines_b],
        rollout_risks(before.settings, after.settings),
        eks_refusals(before.settings, after.settings) + hooked,
        notes,
    )


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
    out = [
        f"### Offline plan: `{d.before.source}` → `{after.source}` (stack `{after.stack}`, {after.region})",
        "",
        "_Pulumi mocks, no cloud credentials: what the program declares, not what AWS will do. "
        "`ray-efa-eks diff` reproduces this locally._",
        "",
    ]
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
        out += [f"<details><summary>Resources: {len(d.added)} added, {len(d.removed)} removed</summary>", "", "```diff"]
        out += [f"+ {r}" for r in d.added] + [f"- {r}" for r in d.removed] + ["```", "</details>", ""]
    else:
        out += [f"Resources: none added or removed ({len(after.resources)} in all).", ""]
    if d.refusals:
        out += [
            f"**EKS would refuse this change, or carry it out destructively ({len(d.refusals)}); `pulumi up` "
            "stops before it:**"
        ]
        out += [f"- ⛔ {_md(r)}" for r in d.refusals] + [""]
    if d.notes:
        out += [f"**What this update replaces or stops ({len(d.notes)}); `pulumi up` warns the same:**"]
        out += [f"- ⚠️ {_md(r)}" for r in d.notes] + [""]
    if after.violations:
        warned = len(after.violations) - len(after.errors)
        out.append(
            f"**Layout rules broken ({len(after.errors)}):**"
            if not warned
            else f"**Layout rules broken ({len(after.errors)}), warnings ({warned}):**"
        )
        out += [
            f"- ❌ {_md(violation_line(v))}" + (" _(new)_" if v in d.new_violations else "") for v in after.violations
        ]
    elif not after.error:
        out.append(f"Layout rules: ✅ all {len(after.checked)} pass.")
    out += [f"- ✅ fixed: {_md(violation_line(v))}" for v in d.fixed_violations]
    if d.rollouts:
        out += ["", f"**GPU node group rollouts in a reservation ({len(d.rollouts)}):**"]
        out += [f"- ⚠️ {_md(r)}" for r in d.rollouts]
    return "\n".join(out) + "\n"
