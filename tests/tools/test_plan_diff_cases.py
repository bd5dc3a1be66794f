"""The plan diff's decisions (tools/plan_diff.py): each exit code's condition, what EKS and the update hooks refuse,
what changed, and every branch of the PR comment, asserted on hand-made plans. No Pulumi engine.

Exit codes (docs/cli.md, tools/dev/exit_status.py): 2 when the change is refused (EKS, or a before_update hook) or the
new program fails; else 1 when the new plan breaks a rule or a GPU group would roll inside a reservation; else 0.
"""

from __future__ import annotations

from html import escape

import pytest

from ray_efa_eks.components.nodes import rollout_guards
from ray_efa_eks.components.ray.raycluster import CHART_ANNOTATION
from ray_efa_eks.tools import plan_diff as pd
from ray_efa_eks.tools.plan_model import Plan

LT = pd.LAUNCH_TEMPLATE
RC = pd.RAY_CLUSTER


def plan(
    source="a",
    settings=None,
    violations=(),
    resources=(),
    error=None,
    hooked=None,
    config=None,
    checked=("r",),
    absent=False,
):
    return Plan(
        source,
        "dev",
        "us-east-1",
        [{"type": t, "name": n, "parent": None} for t, n in resources],
        settings or {},
        list(violations),
        list(checked),
        error,
        config or {},
        {},
        hooked or {},
        absent,
    )


def v(rule="efa-sg", problem="p", severity=None):
    d = {"rule": rule, "resource": "aws:ec2/securityGroup:SecurityGroup sg", "problem": problem, "fix": "f"}
    if severity:
        d["severity"] = severity
    return d


GPU = {
    "nodeGroups": {
        "gpu": {"instanceTypes": "g6.12xlarge", "gpusPerNode": 4, "nodes": 2, "capacity": "reservation cr-1"}
    }
}


def gpu_with(**fields):
    return {"nodeGroups": {"gpu": {**GPU["nodeGroups"]["gpu"], **fields}}}


# -- flatten ---------------------------------------------------------------------------------------------------------


def test_flatten_labels_sections_items_and_fields():
    got = pd.flatten(
        {
            "nodeGroups": {"gpu": {"nodes": 2, "odd": 1}},
            "gpuSubnets": {"a": "us-east-1a"},
            "kubernetesVersion": "1.34",
            "other": 3,
            "pods": "not a section",
        }
    )
    assert got == {
        "node group `gpu` nodes": 2,
        "node group `gpu` odd": 1,
        "GPU subnet `a`": "us-east-1a",
        "Kubernetes version": "1.34",
        "other": 3,
        "pods": "not a section",
    }
    assert list(got) == [
        "node group `gpu` nodes",
        "node group `gpu` odd",
        "GPU subnet `a`",
        "Kubernetes version",
        "other",
        "pods",
    ]


# -- eks_refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, refused",
    [
        ("1.33", "1.34", False),
        ("1.34", "1.34", False),
        ("1.33", "1.35", True),
        ("1.34", "1.33", True),
        ("", "1.35", False),
        ("1.33", None, False),
        ("1.33,1.34", "1.35", False),
        ("1.33", "1.35,1.34", False),
        ("1.33", "latest", False),
        ("1.33.1", "1.35", False),
        ("1", "1.35", False),
        ("1.33", "1.x", False),
    ],
)
def test_eks_refusals_judge_one_declared_version_each(a, b, refused):
    got = pd.eks_refusals({"kubernetesVersion": a}, {"kubernetesVersion": b})
    assert bool(got) == refused
    if refused:
        assert got[0].startswith(f"kubernetesVersion {a} -> {b}: the cluster runs Kubernetes {a}: EKS")


def test_eks_refusals_with_no_version_key():
    assert pd.eks_refusals({}, {"kubernetesVersion": "1.35"}) == []


# -- hook_verdicts ---------------------------------------------------------------------------------------------------


def tpl(role=None, nodes="2", capacity="reservation", image="ami-1", k8s="1.34"):
    tags = {rollout_guards.TAG_NODES: nodes, rollout_guards.TAG_CAPACITY: capacity, rollout_guards.TAG_KUBERNETES: k8s}
    if role:
        tags[rollout_guards.TAG_ROLE] = role
    return {"imageId": image, "tags": tags}


def test_hook_verdicts_gpu_template_refused_in_a_reservation_and_warned_on_demand():
    refusals, warnings = pd.hook_verdicts({f"{LT} gpu": tpl("gpu")}, {f"{LT} gpu": tpl("gpu", image="ami-2")})
    assert len(refusals) == 1 and refusals[0].startswith(
        "gpu: GPU node group (reservation) would roll onto a new launch template (imageId) while it runs 2 node(s)"
    )
    refusals, warnings = pd.hook_verdicts(
        {f"{LT} gpu": tpl("gpu", capacity="on-demand")}, {f"{LT} gpu": tpl("gpu", capacity="on-demand", image="ami-2")}
    )
    assert refusals == [] and all(w.startswith("gpu: ") for w in warnings)
    # scaled to zero first: nothing runs, nothing to refuse
    refusals, _ = pd.hook_verdicts(
        {f"{LT} gpu": tpl("gpu", nodes="0")}, {f"{LT} gpu": tpl("gpu", nodes="0", image="ami-2")}
    )
    assert refusals == []


def test_hook_verdicts_system_template_warns_only():
    refusals, warnings = pd.hook_verdicts({f"{LT} sys": tpl("system")}, {f"{LT} sys": tpl("system", image="ami-2")})
    assert refusals == [] and len(warnings) == 1
    assert warnings[0].startswith("sys: system launch template changes (imageId): EKS replaces the system node")


def test_hook_verdicts_skip_what_the_hooks_do_not_guard():
    same = {f"{LT} gpu": tpl("gpu")}
    assert pd.hook_verdicts(same, dict(same)) == ([], [])  # unchanged
    assert pd.hook_verdicts({}, {f"{LT} gpu": tpl("gpu", image="ami-2")}) == ([], [])  # created, not updated
    assert pd.hook_verdicts({f"{LT} x": tpl()}, {f"{LT} x": tpl(image="ami-2")}) == ([], [])  # no role tag
    assert pd.hook_verdicts({f"{LT} x": tpl("other")}, {f"{LT} x": tpl("other", image="ami-2")}) == ([], [])
    assert pd.hook_verdicts({"aws:s3/bucket:Bucket b": {"a": 1}}, {"aws:s3/bucket:Bucket b": {"a": 2}}) == ([], [])
    # a template recorded with no inputs at all (null in a saved plan)
    assert pd.hook_verdicts({f"{LT} x": {"a": 1}}, {f"{LT} x": None}) == ([], [])


def rc(chart, spec):
    return {"metadata": {"annotations": {CHART_ANNOTATION: chart}}, "spec": spec}


def test_hook_verdicts_ray_cluster_chart_bump_with_a_spec_change_is_refused():
    refusals, warnings = pd.hook_verdicts({f"{RC} ray": rc("1.5.1", {"a": 1})}, {f"{RC} ray": rc("1.6.0", {"a": 2})})
    assert len(refusals) == 1 and refusals[0].startswith("ray: ") and warnings == []
    assert pd.hook_verdicts({f"{RC} ray": rc("1.5.1", {"a": 1})}, {f"{RC} ray": rc("1.5.1", {"a": 2})}) == ([], [])


# -- diff_plans and the exit code ------------------------------------------------------------------------------------


def test_diff_plans_changed_added_removed_violations():
    before = plan(
        "main",
        {"kubernetesVersion": "1.34", "gone": 1},
        [v(problem="old"), v(problem="both")],
        [("t", "a"), ("t", "b")],
        config={"gpuNodeCount": "2"},
    )
    after = plan(
        "tree",
        {"kubernetesVersion": "1.35", "new": 2},
        [v(problem="both"), v(problem="new")],
        [("t", "b"), ("t", "c")],
        config={"gpuNodeCount": "4"},
    )
    d = pd.diff_plans(before, after)
    assert d.changed == [
        ("Kubernetes version", "1.34", "1.35"),
        ("gone", 1, "—"),
        ("config `gpuNodeCount`", "2", "4"),
        ("new", "—", 2),
    ]
    assert (d.added, d.removed) == (["t c"], ["t a"])
    assert [x["problem"] for x in d.new_violations] == ["new"] and [x["problem"] for x in d.fixed_violations] == ["old"]
    assert d.refusals == [] and d.rollouts == [] and d.notes == []
    assert d.exit_code == 1  # the new plan breaks a rule


def test_exit_code_zero_when_nothing_is_broken_or_rolled():
    d = pd.diff_plans(plan(settings=GPU), plan(settings=gpu_with(nodes=3)))  # scaling rolls nothing
    assert d.rollouts == [] and d.exit_code == 0


def test_exit_code_one_for_a_reserved_rollout_alone():
    d = pd.diff_plans(plan(settings=GPU), plan(settings=gpu_with(instanceTypes="g6.48xlarge")))
    assert len(d.rollouts) == 1 and d.refusals == [] and d.after.exit_code == 0 and d.exit_code == 1


def test_exit_code_one_for_a_warning_rule_is_not_raised():
    d = pd.diff_plans(plan(), plan(violations=[v(severity="warning")]))
    assert d.exit_code == 0  # a preference AWS accepts does not fail the diff


def test_exit_code_two_for_a_refusal_over_everything_else():
    d = pd.diff_plans(
        plan(settings={"kubernetesVersion": "1.33"}), plan(settings={"kubernetesVersion": "1.35"}, violations=[v()])
    )
    assert len(d.refusals) == 1 and d.exit_code == 2
    hooked = pd.diff_plans(
        plan(hooked={f"{RC} ray": rc("1.5.1", {"a": 1})}), plan(hooked={f"{RC} ray": rc("1.6.0", {"a": 2})})
    )
    assert hooked.refusals[0].startswith("ray: ") and hooked.exit_code == 2


def test_exit_code_two_when_a_program_fails_and_not_for_a_stack_the_change_adds():
    assert pd.diff_plans(plan(), plan(error="ConfigError: x")).exit_code == 2
    assert pd.diff_plans(plan(error="Pulumi.dev.yaml does not exist at main", absent=True), plan()).exit_code == 0
    assert pd.diff_plans(plan(error="ConfigError: x"), plan()).exit_code == 2


def test_hook_warnings_are_notes_not_a_failure():
    d = pd.diff_plans(plan(hooked={f"{LT} sys": tpl("system")}), plan(hooked={f"{LT} sys": tpl("system", image="b")}))
    assert len(d.notes) == 1 and d.refusals == [] and d.exit_code == 0


# -- render_diff -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, after, row",
    [
        (1234.5, 2, "| x | 1,234.50 | 2 |"),  # a float: thousands and cents
        ("a|b\nc", "d", "| x | a\\|b c | d |"),  # a pipe and a newline would break the table
        (None, 1, "| x | None | 1 |"),
        ("<b> & </b>", "", "| x | &lt;b&gt; &amp; &lt;/b&gt; |  |"),  # GitHub would drop an unknown tag
        ("1.33", "<1.35>", "| x | 1.33 | &lt;1.35&gt; |"),
    ],
    ids=["float", "pipe-newline", "none", "markup-before", "markup-after"],
)
def test_render_diff_table_cells_show_the_value_as_written(before, after, row):
    text = pd.render_diff(pd.diff_plans(plan(settings={"x": before}), plan(settings={"x": after})))
    assert f"| setting | before | after |\n|---|---|---|\n{row}\n" in text


@pytest.mark.parametrize("where", ["before error", "after error", "violation", "refusal", "note", "rollout"])
def test_render_diff_escapes_markup_in_every_line_it_quotes(where):
    tag = "<img src=x>"
    before, after = plan(), plan()
    if where == "before error":
        before = plan(error=f"boom {tag}")
    elif where == "after error":
        after = plan(error=f"boom {tag}")
    elif where == "violation":
        after = plan(violations=[v(problem=tag)])
    elif where == "refusal":
        before, after = plan(hooked={f"{LT} {tag}": tpl("gpu")}), plan(hooked={f"{LT} {tag}": tpl("gpu", image="b")})
    elif where == "note":
        before, after = (
            plan(hooked={f"{LT} {tag}": tpl("system")}),
            plan(hooked={f"{LT} {tag}": tpl("system", image="b")}),
        )
    else:
        before, after = (
            plan(settings={"nodeGroups": {tag: GPU["nodeGroups"]["gpu"]}}),
            plan(settings={"nodeGroups": {tag: {**GPU["nodeGroups"]["gpu"], "instanceTypes": "g6.48xlarge"}}}),
        )
    text = pd.render_diff(pd.diff_plans(before, after))
    assert tag not in text and "&lt;img src=x&gt;" in text


def test_render_diff_of_a_change_with_everything():
    before = plan(
        "git main",
        {"kubernetesVersion": "1.33", **GPU},
        [v(problem="fixed one")],
        [("t", "a")],
        hooked={f"{LT} sys": tpl("system")},
    )
    after = plan(
        "working tree",
        {"kubernetesVersion": "1.35", **gpu_with(instanceTypes="g6.48xlarge")},
        [v(problem="new <one>"), v(rule="pref", severity="warning")],
        [("t", "b")],
        hooked={f"{LT} sys": tpl("system", image="b")},
    )
    text = pd.render_diff(pd.diff_plans(before, after))
    assert text.startswith("### Offline plan: `git main` → `working tree` (stack `dev`, us-east-1)\n")
    assert "| Kubernetes version | 1.33 | 1.35 |" in text
    assert "<details><summary>Resources: 1 added, 1 removed</summary>" in text and "+ t b\n- t a\n" in text
    assert "**EKS would refuse this change, or carry it out destructively (1); `pulumi up` stops before it:**" in text
    assert "**What this update replaces or stops (1); `pulumi up` warns the same:**\n- ⚠️ sys: system launch" in text
    assert "**Layout rules broken (1), warnings (1):**" in text
    assert "- ❌ [efa-sg] aws:ec2/securityGroup:SecurityGroup sg: new &lt;one&gt;. Fix: f _(new)_\n" in text
    assert "- ✅ fixed: [efa-sg] aws:ec2/securityGroup:SecurityGroup sg: fixed one. Fix: f" in text
    assert "**GPU node group rollouts in a reservation (1):**\n- ⚠️ GPU node group `gpu`" in text
    assert text.endswith("\n") and "No setting changed." not in text


def test_render_diff_of_no_change():
    same = plan(resources=[("t", "a"), ("t", "b")], checked=("r1", "r2", "r3"))
    text = pd.render_diff(pd.diff_plans(same, same))
    assert "No setting changed." in text and "Resources: none added or removed (2 in all)." in text
    assert "Layout rules: ✅ all 3 pass." in text
    for absent in ("EKS would refuse", "What this update replaces", "Layout rules broken", "fixed:", "rollouts"):
        assert absent not in text


def test_render_diff_when_a_program_failed():
    text = pd.render_diff(pd.diff_plans(plan(error="boom <x>"), plan()))
    assert "**The before program failed:** boom &lt;x&gt;" in text and "No setting changed." not in text
    assert "Layout rules: ✅ all 1 pass." in text
    text = pd.render_diff(pd.diff_plans(plan(), plan(error="ConfigError: y")))
    assert "**The after program failed:** ConfigError: y" in text
    assert "No setting changed." not in text and "Layout rules: ✅" not in text
    only_errors = pd.render_diff(pd.diff_plans(plan(), plan(violations=[v()])))
    assert "**Layout rules broken (1):**" in only_errors and "warnings" not in only_errors
    kept = pd.render_diff(pd.diff_plans(plan(violations=[v()]), plan(violations=[v()])))
    assert "- ❌ [efa-sg] aws:ec2/securityGroup:SecurityGroup sg: p. Fix: f\n" in kept and "_(new)_" not in kept


# -- the whole comment, line by line: the Markdown GitHub renders (blank lines, fences, the note) is the contract ---

NOTE = (
    "_Pulumi mocks, no cloud credentials: what the program declares, not what AWS will do. `ray-efa-eks diff` "
    "reproduces this locally._"
)


def test_render_diff_of_a_change_with_everything_is_exactly_this_comment():
    before = plan(
        "git main",
        {"kubernetesVersion": "1.33", **GPU},
        [v(problem="fixed one")],
        [("t", "a")],
        hooked={f"{LT} sys": tpl("system")},
    )
    after = plan(
        "working tree",
        {"kubernetesVersion": "1.35", **gpu_with(instanceTypes="g6.48xlarge")},
        [v(problem="new <one>"), v(rule="pref", severity="warning")],
        [("t", "b")],
        hooked={f"{LT} sys": tpl("system", image="b")},
    )
    d = pd.diff_plans(before, after)
    assert len(d.refusals) == len(d.notes) == len(d.rollouts) == 1
    assert (
        pd.render_diff(d)
        == "\n".join(
            [
                "### Offline plan: `git main` → `working tree` (stack `dev`, us-east-1)",
                "",
                NOTE,
                "",
                "| setting | before | after |",
                "|---|---|---|",
                "| Kubernetes version | 1.33 | 1.35 |",
                "| node group `gpu` instance type | g6.12xlarge | g6.48xlarge |",
                "",
                "<details><summary>Resources: 1 added, 1 removed</summary>",
                "",
                "```diff",
                "+ t b",
                "- t a",
                "```",
                "</details>",
                "",
                "**EKS would refuse this change, or carry it out destructively (1); `pulumi up` stops before it:**",
                f"- ⛔ {escape(d.refusals[0], quote=False)}",
                "",
                "**What this update replaces or stops (1); `pulumi up` warns the same:**",
                f"- ⚠️ {escape(d.notes[0], quote=False)}",
                "",
                "**Layout rules broken (1), warnings (1):**",
                "- ❌ [efa-sg] aws:ec2/securityGroup:SecurityGroup sg: new &lt;one&gt;. Fix: f _(new)_",
                "- ❌ [pref (warning)] aws:ec2/securityGroup:SecurityGroup sg: p. Fix: f _(new)_",
                "- ✅ fixed: [efa-sg] aws:ec2/securityGroup:SecurityGroup sg: fixed one. Fix: f",
                "",
                "**GPU node group rollouts in a reservation (1):**",
                f"- ⚠️ {escape(d.rollouts[0], quote=False)}",
            ]
        )
        + "\n"
    )
    assert d.refusals[0].startswith("kubernetesVersion 1.33 -> 1.35: ")
    assert "- ⛔ kubernetesVersion 1.33 -&gt; 1.35: " in pd.render_diff(d)


def test_render_diff_of_no_change_is_exactly_this_comment():
    same = plan(resources=[("t", "a"), ("t", "b")], checked=("r1", "r2", "r3"))
    assert (
        pd.render_diff(pd.diff_plans(same, same))
        == "\n".join(
            [
                "### Offline plan: `a` → `a` (stack `dev`, us-east-1)",
                "",
                NOTE,
                "",
                "No setting changed.",
                "",
                "Resources: none added or removed (2 in all).",
                "",
                "Layout rules: ✅ all 3 pass.",
            ]
        )
        + "\n"
    )


def test_render_diff_of_failed_programs_is_exactly_this_comment():
    head = ["### Offline plan: `a` → `a` (stack `dev`, us-east-1)", "", NOTE, ""]
    assert (
        pd.render_diff(pd.diff_plans(plan(error="boom <x>"), plan()))
        == "\n".join(
            [
                *head,
                "**The before program failed:** boom &lt;x&gt;",
                "",
                "Resources: none added or removed (0 in all).",
                "",
                "Layout rules: ✅ all 1 pass.",
            ]
        )
        + "\n"
    )
    assert (
        pd.render_diff(pd.diff_plans(plan(), plan(error="ConfigError: y")))
        == "\n".join(
            [
                *head,
                "**The after program failed:** ConfigError: y",
                "",
                "Resources: none added or removed (0 in all).",
                "",
            ]
        )
        + "\n"
    )


def test_flatten_names_the_fields_of_a_section():
    assert pd.flatten({"nodeGroups": {"gpu": {"instanceTypes": "g6.12xlarge", "gpusPerNode": 4}}}) == {
        "node group `gpu` instance type": "g6.12xlarge",
        "node group `gpu` GPUs/node": 4,
    }


def test_hook_verdicts_list_every_template_they_judge():
    before = {
        f"{LT} gpu-a": tpl("gpu"),
        f"{LT} gpu-b": tpl("gpu"),
        f"{LT} sys-a": tpl("system"),
        f"{LT} sys-b": tpl("system"),
    }
    after = {k: tpl(t["tags"][rollout_guards.TAG_ROLE], image="ami-2") for k, t in before.items()}
    refusals, warnings = pd.hook_verdicts(before, after)
    assert [r.split(":")[0] for r in refusals] == ["gpu-a", "gpu-b"]
    assert [w.split(":")[0] for w in warnings] == ["sys-a", "sys-b"]
    od_before = {f"{LT} gpu-a": tpl("gpu", capacity="on-demand"), f"{LT} gpu-b": tpl("gpu", capacity="on-demand")}
    od_after = {k: tpl("gpu", capacity="on-demand", image="ami-2") for k in od_before}
    refusals, warnings = pd.hook_verdicts(od_before, od_after)
    assert refusals == [] and {w.split(":")[0] for w in warnings} == {"gpu-a", "gpu-b"}


def test_hook_verdicts_name_a_resource_whose_name_holds_a_space():
    refusals, _ = pd.hook_verdicts({f"{LT} gpu nodes": tpl("gpu")}, {f"{LT} gpu nodes": tpl("gpu", image="ami-2")})
    assert len(refusals) == 1 and refusals[0].startswith("gpu nodes: GPU node group (reservation) would roll")


def test_render_diff_lists_resources_only_added_or_only_removed():
    a, b = plan(resources=[("t", "a")]), plan(resources=[("t", "a"), ("t", "b")])
    assert "<details><summary>Resources: 1 added, 0 removed</summary>" in pd.render_diff(pd.diff_plans(a, b))
    assert "<details><summary>Resources: 0 added, 1 removed</summary>" in pd.render_diff(pd.diff_plans(b, a))


def test_hook_verdicts_are_the_hooks_own_words_on_both_inputs():
    """The diff runs the very functions `pulumi up` runs, on the old and the new inputs: every line is theirs."""
    old, new = tpl("gpu", capacity="on-demand"), tpl("gpu", capacity="on-demand", image="ami-2", k8s="1.35")
    no, warn = rollout_guards.gpu_update(old, new)
    assert pd.hook_verdicts({f"{LT} gpu": old}, {f"{LT} gpu": new}) == (
        [f"gpu: {x}" for x in no],
        [f"gpu: {x}" for x in warn],
    )
    assert warn and "Kubernetes version 1.34 -> 1.35" in warn[0]
    old, new = tpl("system"), tpl("system", image="ami-2", k8s="1.35")
    assert pd.hook_verdicts({f"{LT} sys": old}, {f"{LT} sys": new}) == (
        [],
        [f"sys: {x}" for x in rollout_guards.system_update(old, new)],
    )
    assert "(imageId, Kubernetes version 1.34 -> 1.35)" in rollout_guards.system_update(old, new)[0]


def test_hook_verdicts_read_on_past_a_created_or_unchanged_resource():
    same = tpl("system")
    refusals, warnings = pd.hook_verdicts(
        {f"{LT} a": same, f"{LT} sys": tpl("system")},
        {f"{LT} new": tpl("gpu"), f"{LT} a": same, f"{LT} sys": tpl("system", image="ami-2")},
    )
    assert refusals == [] and len(warnings) == 1 and warnings[0].startswith("sys: system launch template changes")
