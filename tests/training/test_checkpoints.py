"""A run owns its checkpoints: damage to a checkpoint (truncate, delete, zero, wrong rank count) is found before the
checkpoint is used, the damaged file is named and the newest good checkpoint is resumed from, loudly; a run whose
checkpoints all fail stops with 65; a missing snapshot never restarts from step 0 over existing checkpoints, and a
resumed run deletes none of the checkpoints it did not write.

One real local run writes step_000005 and step_000010 (module fixture); each damage case works on a copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.tools import command
from ray_efa_eks.training import checkpoints, lifecycle

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "ray-efa-eks"
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def train(storage: Path, steps: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(BIN),
            "train",
            "--json",
            "--steps",
            str(steps),
            "--checkpoint-every",
            "5",
            "--report-every",
            "5",
            "--storage-path",
            str(storage),
            "--name",
            "dmg",
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    storage = tmp_path_factory.mktemp("ckpt")
    r = train(storage, 10)
    assert r.returncode == 0, r.stderr[-3000:]
    run = storage / "dmg"
    assert (run / "step_000005").is_dir() and (run / "step_000010").is_dir(), sorted(os.listdir(run))
    return storage


def truncate(d: Path) -> None:
    os.truncate(d / "__0_0.distcp", 100)


def delete(d: Path) -> None:
    (d / "__1_0.distcp").unlink()


def zero(d: Path) -> None:
    f = d / "__0_0.distcp"
    f.write_bytes(bytes(f.stat().st_size))


def rank_missing(d: Path) -> None:
    (d / checkpoints.MANIFEST.format(rank=1)).unlink()


def rank_extra(d: Path) -> None:
    shutil.copy(d / "__1_0.distcp", d / "__2_0.distcp")


def meta_missing(d: Path) -> None:
    (d / "meta.pt").unlink()


DAMAGE = [
    (truncate, "__0_0.distcp", "100 bytes"),
    (delete, "__1_0.distcp", "missing"),
    (zero, "__0_0.distcp", "sha-256"),
    (rank_missing, "ranks [0]", "rank count"),
    (rank_extra, "__2_0.distcp", "rank 2"),
    (meta_missing, "meta.pt", "missing"),
]


@pytest.mark.parametrize("damage,names,why", DAMAGE, ids=[d[0].__name__ for d in DAMAGE])
def test_damaged_newest_is_skipped_for_the_newest_good(written, tmp_path, damage, names, why):
    shutil.copytree(written, tmp_path / "s")
    damage(tmp_path / "s" / "dmg" / "step_000010")
    choice = checkpoints.choose(str(tmp_path / "s"), "dmg")
    assert choice.resume_from == f"{tmp_path}/s/dmg/step_000005" and choice.step == 5, choice
    said = " ".join(choice.notes).lower()
    assert "step_000010" in said and names.lower() in said and why in said and "resuming from step_000005" in said


def test_all_damaged_stops_with_65_and_starts_nothing(written, tmp_path, capsys, monkeypatch):
    shutil.copytree(written, tmp_path / "s")
    for step in ("step_000005", "step_000010"):
        truncate(tmp_path / "s" / "dmg" / step)
    monkeypatch.setattr(lifecycle, "supervise", lambda *a, **k: pytest.fail("the run started"))
    code = command.main(["train", "--storage-path", str(tmp_path / "s"), "--name", "dmg", "--json"])
    text = capsys.readouterr()
    assert code == 65, text.err
    assert "__0_0.distcp" in text.err and "nothing was started" in text.err and "--name" in text.err, text.err
    assert json.loads(text.out.strip().splitlines()[-1])["exit_code"] == 65


def test_missing_snapshot_resumes_from_newest_and_deletes_nothing_it_did_not_write(written, tmp_path):
    """The snapshot gone and step_000010 truncated: the resumed run names the file, resumes from step 5, writes its
    step 10 beside the damaged one (never into it) and leaves both old checkpoints in place."""
    shutil.copytree(written, tmp_path / "s")
    run = tmp_path / "s" / "dmg"
    (run / checkpoints.SNAPSHOT).unlink()
    truncate(run / "step_000010")
    r = train(tmp_path / "s", 20)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["resumed_from_step"] == 5, summary
    assert "step_000010 is damaged: __0_0.distcp" in r.stderr, r.stderr[-3000:]
    assert f"{checkpoints.SNAPSHOT} is missing" in r.stderr, r.stderr[-3000:]
    dirs = sorted(p.name for p in run.iterdir() if p.name.startswith("step_"))
    assert "step_000005" in dirs and "step_000010" in dirs, dirs
    assert os.path.getsize(run / "step_000010" / "__0_0.distcp") == 100, "the damaged checkpoint was written into"
    assert "step_000020" in dirs, dirs
