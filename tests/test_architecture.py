"""The four packages and which way they lean: the library imports none of the others, config flows one way,
the gate ships a self-contained EFA proof, and one command reaches every tool."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa_eks.components.efa_check import check_files
from ray_efa_eks.tools.command import SUBCOMMANDS, _positionals_last, main

ROOT = Path(__file__).resolve().parents[1]
SIBLINGS = ("efacheck", "training", "tools")


def modules(package: str) -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text()) for p in sorted((ROOT / package).glob("*.py"))}


def imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(level, dotted name) of every import in the module, nested ones included."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is None:  # `from . import values`
            out += [(node.level, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module))
    return out


def test_each_package_holds_only_its_own_concern():
    components, training = set(modules("components")), set(modules("training"))
    assert not components & {"plan", "layout", "rules", "mockrun", "preflight", "config_schema", "cli"}
    assert not training & {"nccl_log", "efa_check", "sweep", "efa_counters", "stack_probe", "report"}
    assert {"efa_check", "nccl_log", "sweep", "efa_counters", "stack_probe", "report"} <= set(modules("efacheck"))
    assert {"plan", "layout", "rules", "mockrun", "preflight", "config_schema", "command"} <= set(modules("tools"))


@pytest.mark.parametrize("package", ["components", "efacheck", "training"])
def test_no_module_imports_a_package_beside_its_own(package):
    """components: the library others import; efacheck and training: shipped alone as a Ray job's working_dir."""
    for name, tree in modules(package).items():
        for level, mod in imports(tree):
            top = mod.split(".")[0]
            assert level <= 1, f"{package}/{name}.py: relative import beyond its package ({'.' * level}{mod})"
            assert not (level == 0 and (top in (*SIBLINGS, "components") or mod.startswith("ray_efa_eks"))), \
                f"{package}/{name}.py imports {mod}"


def sibling_names(tree: ast.Module) -> set[str]:
    """Module names built from the package's parent, e.g. ``f"{__package__.rpartition('.')[0]}.efacheck.nccl_log"``:
    each as '<package>.<module>' (the lazy, by-name sibling imports the AST import rules cannot see)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = ast.unparse(node)
            if "__package__" in text or "_PARENT" in text:
                out.update(re.findall(rf"\.((?:{'|'.join(SIBLINGS)})\.[a-z_]+)", text))
    return out


def test_the_declared_sibling_edges_only():
    """training -> efacheck.{nccl_log, efa_counters} (training/fabric.py: a run's fabric is judged by the gate's own
    code, imported lazily by name) and efacheck -> training.model (efacheck/sweep.py; plus efa_check --local's
    local cluster), nothing else, in either direction. Both are shipped alongside: the gate's ConfigMap carries training/model.py, ``submit`` carries
    ``EFACHECK_FILES``, closed under their own imports."""
    edges = {(f"{pkg}.{name}", target) for pkg in ("training", "efacheck", "components", "tools")
             for name, tree in modules(pkg).items() for target in sibling_names(tree)}
    assert edges == {("training.fabric", "efacheck.nccl_log"), ("training.fabric", "efacheck.efa_counters"),
                     # a run's verdict as a metric on the head (efacheck/verdict_metrics.py, shipped by submit)
                     ("training.__main__", "efacheck.verdict_metrics"),
                     ("efacheck.sweep", "training.model"),
                     # --preset checked against the model presets before Ray starts (skipped when not shipped)
                     ("efacheck.check_args", "training.model"),
                     # `efa_check --local` only: a CPU rehearsal from the repo, never run from the gate's ConfigMap
                     ("efacheck.efa_check", "training.local_cluster")}, edges
    import_module_users = {f"{pkg}.{name}" for pkg in ("training", "efacheck") for name, tree in modules(pkg).items()
                           if "import_module(" in ast.unparse(tree)}
    assert import_module_users == {"training.fabric", "efacheck.sweep", "efacheck.check_args",
                                   "efacheck.efa_check"}, import_module_users

    from ray_efa_eks.training import fabric
    from ray_efa_eks.training.__main__ import EFACHECK_FILES

    assert fabric.NCCL_LOG_MODULE == "ray_efa_eks.efacheck.nccl_log"
    shipped = {f.removesuffix(".py") for f in EFACHECK_FILES}
    assert {"nccl_log", "efa_counters", "__init__"} <= shipped
    efacheck = modules("efacheck")
    for name in shipped:  # the shipped modules import only each other (and the standard library)
        for level, mod in imports(efacheck[name]):
            if level == 1:
                assert mod.split(".")[0] in shipped, f"efacheck/{name}.py imports .{mod}, which submit does not ship"


def test_config_flows_one_way():
    """Only the umbrella turns StackConfig into component args; config.py imports no component."""
    readers = {name for name, tree in modules("components").items()
               if any(isinstance(n, ast.Name) and n.id == "StackConfig" for n in ast.walk(tree))}
    assert readers <= {"stack", "config"} and "stack" in readers  # config.py defines it (a ClassDef, not a Name)
    config_imports = {mod for level, mod in imports(modules("components")["config"]) if level == 1}
    assert config_imports <= {"capacity", "instances", "storage_rules", "eks_versions", "config_fields", "values",
                              "kuberay_versions"}, \
        config_imports
    # values.py (the value grammars every key, component and CLI option uses) is a leaf: it imports no component
    assert not [mod for level, mod in imports(modules("components")["values"]) if level], "values.py is a leaf"


def test_the_gate_ships_a_self_contained_efa_proof(tmp_path):
    """The ConfigMap's files alone (efacheck + the training model) import and size FSDP messages."""
    files = check_files()
    assert {p.split("/")[0] for p in files} == {"efacheck", "training"}
    assert {p for p in files if p.startswith("training/")} == {"training/__init__.py", "training/model.py"}
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text)
    code = ("import efacheck.efa_check, efacheck.sweep as s; print(s.__file__); print(s.TRAINING_MODEL); "
            "print(len(s.fsdp_units('tiny', 2)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    where, model, units = out.stdout.split()
    assert where.startswith(str(tmp_path)) and model == "training.model" and int(units) == 3


def test_one_command_lists_every_subcommand():
    exe = Path(sys.executable).with_name("ray-efa-eks")
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for name in ("plan", "diff", "check-rules", "preflight", "train", "submit", "efa-check", "nccl-verdict",
                 "config-schema"):
        assert f"\n  {name} " in out.stdout, name
    assert set(SUBCOMMANDS) >= {"plan", "preflight", "train"}


def test_command_usage_errors_are_64(capsys):
    assert main([]) == 64
    assert main(["deploy"]) == 64 and "unknown subcommand 'deploy'" in capsys.readouterr().err
    assert main(["plan", "--no-such-flag"]) == 64  # run_cli returns argparse's code instead of raising SystemExit
    assert "ray-efa-eks plan" in capsys.readouterr().err


def test_diff_takes_options_before_or_after_the_ref():
    assert _positionals_last(["--stack", "prod", "origin/main"], "--diff") == ["--stack", "prod", "--diff", "origin/main"]
    assert _positionals_last(["a.json", "b.json", "--json"], "--diff") == ["--json", "--diff", "a.json", "b.json"]
