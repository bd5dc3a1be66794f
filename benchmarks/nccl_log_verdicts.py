"""The EFA verdict on every published log, against the conclusion its README gives, with the deciding line.

    python benchmarks/nccl_log_verdicts.py [--dir DIR] [--json]

DIR defaults to ``../shared/nccl-logs`` where it exists, else the copy in ``tests/fixtures/nccl-logs``. The
README there has one table row per log whose last cell starts with the conclusion: ``EFA`` (verdict efa),
``not EFA`` (fallback) or ``undetermined``. A "not EFA ... one host only" row (the older table's wording, before
the undetermined class) must be undetermined: the verdict's first rule, nothing crossed nodes. A file's name is
history, not a verdict (two ``efa_`` excerpts conclude undetermined). Each log is also judged with its lines reversed
and in a fixed shuffle: an excerpt's verdict must not depend on line order. Exit 1 if any log is judged
otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import random

from ray_efa_eks.efacheck.nccl_log import analyze_paths, analyze_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "nccl-logs")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "nccl-logs")


def expected(readme: str) -> dict[str, str]:
    """log file name -> the verdict its README row concludes."""
    out = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].endswith(".log"):
            continue
        concl = cells[-1]
        if concl.startswith("not EFA") and "one host" in concl:
            out[cells[0]] = "undetermined"
            continue
        out[cells[0]] = (
            "fallback"
            if concl.startswith("not EFA")
            else "efa"
            if concl.startswith("EFA")
            else "undetermined"
            if concl.startswith("undetermined")
            else f"? {concl[:30]}"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=SHARED if os.path.isdir(SHARED) else FIXTURES)
    ap.add_argument("--json", action="store_true", help="last stdout line is a JSON summary")
    a = ap.parse_args()
    with open(os.path.join(a.dir, "README.md")) as f:
        want = expected(f.read())
    logs = sorted(n for n in os.listdir(a.dir) if n.endswith(".log"))
    right = 0
    for name in logs:
        rep = analyze_paths([os.path.join(a.dir, name)])
        with open(os.path.join(a.dir, name), errors="replace") as f:
            lines = f.read().splitlines()
        shuffled = random.Random(25).sample(lines, len(lines))
        orders = {
            o: analyze_text("\n".join(x) + "\n").verdict for o, x in (("reversed", lines[::-1]), ("shuffled", shuffled))
        }
        moved = {o: v for o, v in orders.items() if v != rep.verdict}
        ok = rep.verdict == want.get(name) and not moved
        right += ok
        line = rep.evidence[0].removeprefix(os.path.join(a.dir, "")) if rep.evidence else "(no line)"
        print(
            f"{'ok ' if ok else 'BAD'} {name}: {rep.verdict} (README: {want.get(name, 'no row')})"
            + (f" but {', '.join(f'{v} {o}' for o, v in moved.items())}" if moved else "")
            + f"\n      {line[:150]}"
        )
    print(f"{right} of {len(logs)} logs judged as their README concludes")
    if a.json:
        print(json.dumps({"right": right, "total": len(logs), "dir": a.dir}))
    return 0 if right == len(logs) and logs else 1


if __name__ == "__main__":
    sys.exit(main())
