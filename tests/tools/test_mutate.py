"""The mutation check itself (tools/dev/mutate.py), fast: a tiny tree with one module and one test, the real list's
shape, and the copy of this tree importing as ``ray_efa_eks`` from the copy. The mutations themselves run by hand
(``ray-efa-eks mutate``), not here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ray_efa_eks.tools.dev import mutate
from ray_efa_eks.tools.dev.mutate import ERROR, KILLED, SURVIVED, Mutation, MutationFileError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny(tmp_path) -> Path:
    (tmp_path / "pkg.py").write_text("# the answer\nANSWER = 42\n")
    (tmp_path / "test_tiny.py").write_text("import pkg\n\n\ndef test_answer():\n    assert pkg.ANSWER == 42\n")
    return tmp_path


def _m(old: str, new: str, tests: tuple[str, ...] = ("test_tiny.py",), name: str = "m") -> Mutation:
    return Mutation(name, "pkg.py", old, new, tests)


def test_a_mutation_the_test_notices_is_killed_and_the_file_restored(tiny):
    o = mutate.run_one(_m("ANSWER = 42", "ANSWER = 43"), tiny, timeout_s=120)
    assert o.status == KILLED and "test_tiny.py::test_answer" in o.detail, o.output
    assert (tiny / "pkg.py").read_text() == "# the answer\nANSWER = 42\n"


def test_a_mutation_no_test_notices_survives(tiny):
    o = mutate.run_one(_m("# the answer", "# an answer"), tiny, timeout_s=120)
    assert o.status == SURVIVED, o.output
    assert mutate.exit_code([o]) == mutate.EXIT_SURVIVED and "0/1 killed" in mutate.score_line([o])


@pytest.mark.parametrize(
    "m, why",
    [
        (_m("ANSWER = 41", "ANSWER = 43"), "old text not found in pkg.py"),
        (_m("ANSWER", "QUESTION"), None),
        (_m("ANSWER = 42", "ANSWER = 43", tests=("test_gone.py",)), "test file test_gone.py not found"),
        (Mutation("m", "nope.py", "a", "b", ("test_tiny.py",)), "file nope.py not found"),
    ],
)
def test_what_cannot_be_applied_is_an_error_not_a_crash(tiny, m, why):
    if why is None:
        (tiny / "pkg.py").write_text("ANSWER = 42\nANSWER = 42\n")
        why = "occurs 2 times"
    o = mutate.run_one(m, tiny, timeout_s=120)
    assert o.status == ERROR and why in o.detail, o.detail
    assert mutate.exit_code([o]) == mutate.EXIT_ERROR


def test_a_test_that_already_fails_is_deselected_not_counted_as_a_kill(tiny):
    (tiny / "test_broken.py").write_text("def test_broken():\n    assert False\n")
    (tiny / "test_nocollect.py").write_text("import no_such_module\n")
    noop = _m("# the answer", "# an answer", tests=("test_broken.py", "test_tiny.py"))
    already = mutate.baseline([noop], tiny, timeout_s=120)
    assert already == ["test_broken.py::test_broken"]
    assert mutate.run_one(noop, tiny, 120).status == KILLED  # what a run without the baseline would have said
    assert mutate.run_one(noop, tiny, 120, already_failing=already).status == SURVIVED
    real = _m("ANSWER = 42", "ANSWER = 43", tests=("test_broken.py", "test_tiny.py"))
    o = mutate.run_one(real, tiny, 120, already_failing=already)
    assert o.status == KILLED and "test_tiny.py::test_answer" in o.detail
    nocollect = _m("ANSWER = 42", "ANSWER = 43", tests=("test_nocollect.py",))
    already = mutate.baseline([nocollect], tiny, timeout_s=120)
    o = mutate.run_one(nocollect, tiny, 120, already_failing=already)
    assert o.status == ERROR and "test_nocollect.py fails to collect" in o.detail, (already, o.detail)


def test_tests_that_hang_are_an_error_and_are_ended(tiny):
    (tiny / "test_slow.py").write_text("import time\n\n\ndef test_slow():\n    time.sleep(120)\n")
    start = time.monotonic()
    o = mutate.run_one(_m("ANSWER = 42", "ANSWER = 43", tests=("test_slow.py",)), tiny, timeout_s=3)
    assert o.status == ERROR and "ran past 3 s" in o.detail
    assert time.monotonic() - start < 60 and (tiny / "pkg.py").read_text().endswith("ANSWER = 42\n")


def test_check_names_a_drifted_entry(tiny, tmp_path_factory, capsys):
    listing = tmp_path_factory.mktemp("list") / "m.toml"
    listing.write_text(
        '[[mutation]]\nname = "moved"\nfile = "pkg.py"\nold = "ANSWER = 41"\nnew = "ANSWER = 0"\n'
        'tests = ["test_tiny.py"]\n'
    )
    assert mutate.main(["--check", "--file", str(listing), "--root", str(tiny)]) == mutate.EXIT_ERROR
    assert "moved  error: old text not found in pkg.py" in capsys.readouterr().out


@pytest.mark.parametrize(
    "text, msg",
    [
        ('[[mutation]]\nname = "a"\nfile = "f"\nold = "x"\nnew = "y"\n', "missing key 'tests'"),
        ('[[mutation]]\nname = "a"\nfile = "f"\nold = "x"\nnew = "x"\ntests = ["t"]\n', "old and new are the same"),
        ('[[mutation]]\nname = "a"\nfile = "f"\nold = "x"\nnew = "y"\ntests = []\n', "non-empty list"),
        ('[[mutation]]\nname = "a"\nfile = "f"\nold = "x"\nnew = "y"\ntests = ["t"]\n' * 2, "duplicate mutation name"),
        ("[[mutation]\n", "cannot read"),
        # malformed, empty and escaping lists are usage errors too (before: a traceback, exit 0, a write
        # outside the copy)
        ("mutation = 5\n", "array of tables"),
        ("mutation = [1, 2]\n", "array of tables"),
        ('[[mutation]]\nname = 7\nfile = "f"\nold = "x"\nnew = "y"\ntests = ["t"]\n', "name must be a string"),
        ("", "an empty list would prove nothing"),
        ("mutation = []\n", "an empty list would prove nothing"),
        ('[[mutation]]\nname = "a"\nfile = "../../../etc/x"\nold = "x"\nnew = "y"\ntests = ["t"]\n', "outside"),
        ('[[mutation]]\nname = "a"\nfile = "/etc/x"\nold = "x"\nnew = "y"\ntests = ["t"]\n', "absolute"),
        ('[[mutation]]\nname = "a"\nfile = "f"\nold = "x"\nnew = "y"\ntests = ["../../t.py"]\n', "outside"),
    ],
)
def test_a_bad_mutation_file_is_a_usage_error_naming_the_problem(tmp_path, capsys, text, msg):
    bad = tmp_path / "m.toml"
    bad.write_text(text)
    with pytest.raises(MutationFileError, match=msg):
        mutate.load(bad)
    assert mutate.main(["--list", "--file", str(bad)]) == 64
    assert msg in capsys.readouterr().err


def test_a_file_that_escapes_the_copy_is_never_written(tmp_path):
    """problem() and run_one resolve the target inside the copy: a symlink out of it is refused, nothing written."""
    outside = tmp_path / "outside.py"
    outside.write_text("ANSWER = 41\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link.py").symlink_to(outside)
    m = Mutation("escape", "link.py", "ANSWER = 41", "ANSWER = 0", ("t.py",))
    assert "outside" in mutate.problem(m, tree)
    assert mutate.run_one(m, tree, 5).status == ERROR
    assert outside.read_text() == "ANSWER = 41\n"


def test_the_list_names_existing_files_and_tests():
    """Shape only; whether each old text is still found is `ray-efa-eks mutate --check` (code moves)."""
    ms = mutate.load()
    assert len(ms) >= 18
    for m in ms:
        assert (ROOT / m.file).is_file(), m.name
        for t in m.tests:
            assert (ROOT / t.split("::", 1)[0]).is_file(), (m.name, t)
    survivors = {"hardening-imds-hop-limit-default", "gate-job-expect-gdrdma", "gate-timeout-leaves-the-job-running"}
    assert survivors <= {m.name for m in ms}


def test_the_copy_imports_as_ray_efa_eks_from_the_copy(tmp_path):
    """The editable install points at this tree; under the copy's environment the copy's packages win."""
    copy = tmp_path / "tree"
    mutate.copy_tree(ROOT, copy)
    assert not (copy / ".git").exists() and not (copy / ".venv").exists()
    where = Path(mutate.imports_from(copy))
    assert where.resolve() == (copy / "components" / "__init__.py").resolve(), where
