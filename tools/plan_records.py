"""The base plan's resources, printed as one JSON line: run by tools/plan_run.py in a git archive of the base ref.

It runs as a script (``python -P tools/plan_records.py ARGS``, ``-P``: its own folder stays off ``sys.path``) with
the archive as working directory and ``PYTHONPATH``, where plan_run lays the archive's folders out as the
``ray_efa_eks`` package: every ``ray_efa_eks.*`` the base program imports is the base ref's code, never this tree's.
Only the archive's mockrun is used (in ``components`` before the four-package layout, ``tools`` after), chosen by the
archive's own files, not by trying the import: an installed ``ray_efa_eks`` would answer ``ray_efa_eks.tools`` for an
archive that has no ``tools/``.
"""

from __future__ import annotations

import json
import os
import sys

RECORDS_MARKER = "@@plan-records@@ "
"""Starts the output line that holds the records (the base program may print anything before it)."""


def _fake_id(r) -> str:
    """An older mockrun recorded no ids; these are the fake ids its mocks hand out."""
    return f"subnet-{r.name}" if r.type == "aws:ec2/subnet:Subnet" else f"{r.name}-id"


def main(argv: list[str]) -> int:
    """``argv[0]``: JSON with the stack's ``config``, ``region``, ``program`` and ``stack``."""
    if os.path.exists(os.path.join("components", "mockrun.py")) and not os.path.exists(
        os.path.join("tools", "mockrun.py")
    ):
        from ray_efa_eks.components.mockrun import run_program
    else:
        from ray_efa_eks.tools.mockrun import run_program
    a = json.loads(argv[0])
    run = run_program(a["config"], region=a["region"], program=a["program"], stack=a["stack"])
    ids = getattr(run, "ids", {})
    recs = [
        {
            "type": r.type,
            "name": r.name,
            "urn": r.urn,
            "parent": r.parent,
            "id": ids.get(r.urn) or _fake_id(r),
            "props": r.inputs,
        }
        for r in run.resources
    ]
    print("\n" + RECORDS_MARKER + json.dumps(recs, default=lambda o: f"<{type(o).__name__}>"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
