"""The four packages and which way they lean, edge by edge: the library imports none of the others, the EFA proof
imports nothing outside itself (the gate ships it alone), training may use the proof's verdict code, tools may use
all three; inside the library, config flows one way and only the umbrella speaks in stack keys. Every import is one
the AST can see: none hides in a string."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_efa_eks.components.addons.efa_check import check_files
from ray_efa_eks.tools.command import SUBCOMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("components", "efacheck", "training", "tools")

PACKAGE_EDGES = {
    "components": set(),  # the Pulumi library other repos import: nothing of ours
    "efacheck": {"components"},  # the EFA proof, shipped to the Ray head with the gate's typed options (one leaf)
    "training": {"efacheck", "components"},  # the gate's verdict code, the local Ray cluster; the payload builder
    "tools": {"components", "efacheck", "training"},  # the top layer: plan, rules, preflight, the one command
}
"""Which package may import which. Nothing imports tools; no package imports one that imports it back."""

CROSS_EDGES = {
    ("training.fabric", "efacheck.nccl_log"): "a run's fabric verdict is judged by the gate's NCCL log rules",
    ("training.fabric", "efacheck.efa_counters"): "the second witness: EFA hardware counters, read as the gate does",
    ("training.__main__", "efacheck.cli"): "one entry point (run_cli) for every command",
    ("training.parser", "efacheck.cli"): "one ArgumentParser: usage errors exit 64 in every command",
    ("training.run", "efacheck.cli"): "one reading of Ctrl-C and SIGTERM (interrupted_code) for every command",
    ("training.__main__", "efacheck.exit_codes"): "the one exit-code table (its codes by name)",
    ("training.reach", "efacheck.exit_codes"): "the one exit-code table (its codes by name)",
    ("training.request", "efacheck.exit_codes"): "the one exit-code table (its codes by name)",
    ("training.submit", "efacheck.exit_codes"): "the one exit-code table (its codes by name)",
    ("training.submit", "components.payload"): "submit ships its code with the one payload builder (stdlib only)",
    (
        "training.cli",
        "components.config.url_rule",
    ): "the URL rule remoteWriteUrl keeps (a stdlib-only leaf submit ships)",
    ("training.run", "efacheck.local_cluster"): "a run without --address starts the shared local Ray cluster",
    ("training.run", "efacheck.verdict_metrics"): "a run's fabric verdict as a metric on the head, as the gate's",
    ("training.request", "efacheck.storage_uri"): "one storage-path grammar for train, submit and the gate's proof",
    ("training.errors", "efacheck.exit_codes"): "the one exit-code table (its codes by name)",
    ("training.checkpoints", "efacheck.exit_codes"): "the one exit-code table (its codes by name)",
    ("training.lease", "efacheck.exit_codes"): "the one exit-code table (its codes by name)",
    ("training.lifecycle", "efacheck.exit_codes"): "the one exit-code table (its codes by name)",
    ("training.storage_check", "efacheck.exit_codes"): "the one exit-code table (its codes by name)",
    ("efacheck.check_args", "components.gate_request"): "the check parses the typed options the gate renders "
    "(a stdlib-only leaf the gate's payload ships)",
}
"""Every module edge from training into efacheck or components, and from efacheck into components, with its reason (tools' edges follow PACKAGE_EDGES
alone: tools is the top layer, and nothing it imports can import it back)."""

COMPONENT_FOLDERS = ("config", "network", "cluster", "nodes", "ray", "addons", "observability", "storage", "queues")
"""components/ by layer, the way pulumi-eks keeps cluster/, nodes/ and addons/ (each folder's __init__ says what it
holds); stack.py and provider.py, the umbrella, stay at the top."""
COMPONENT_LAYERS = {
    "leaf": {
        "kube",
        "payload",
        "gate_request",
        "config.values",
        "config.url_rule",
        "config.config_fields",
        "config.errors",
        "nodes.instances",
        "nodes.node_allocatable",
        "cluster.eks_versions",
        "ray.kuberay_versions",
        "nodes.capacity",
        "storage.storage_rules",
        "nodes.cost",
        "cluster.live_cluster",
        "observability.metrics_rules",
        "ray.ray_autoscaler",
        "nodes.rollout_guards",
        "nodes.ebs_limits",
        "nodes.cold_start",
        "queues.team_queues",
        "network.network_policies",
        *(f"{folder}.__init__" for folder in COMPONENT_FOLDERS),
    },
    "config": {"config.config"},
    "resource": {
        "network.network",
        "cluster.cluster",
        "network.placement",
        "nodes.launch_template",
        "nodes.node_groups",
        "addons.device_plugins",
        "ray.kuberay",
        "ray.raycluster",
        "addons.efa_check",
        "storage.checkpoint_bucket",
        "cluster.pod_identity",
        "addons.node_agent",
        "observability.dashboard",
        "observability.observability",
        "addons.cluster_autoscaler",
        "queues.job_queues",
        "ray.rayjob",
        "addons.image_cache",
        "addons.image_prepull",
    },
    "umbrella": {"stack", "provider", "__init__"},
}
"""Each library module's layer (by its path under components/). Leaves (value grammars, catalogue, capacity and cost rules) import leaves only.
config (StackConfig: stack keys, ConfigError) imports leaves. Resource components import leaves and each other,
never config: they raise their own errors naming their own arguments, and the umbrella (stack.py) maps those to
stack keys. The umbrella imports anything. A new module must be given a layer here."""
LAYER_EDGES = {
    "leaf": {"leaf"},
    "config": {"leaf", "config"},
    "resource": {"leaf", "resource"},
    "umbrella": {"leaf", "config", "resource", "umbrella"},
}

DYNAMIC_IMPORTS = {
    ("components.payload", "find_spec"): "finds a package's source folder to read its files into a pod's payload "
    "(gate, node agent, submit); the library never imports the others",
    ("components.__init__", "import_module"): "the package's public names load from their layer modules on first "
    "use (EXPORTS, the same imports written out under TYPE_CHECKING)",
    ("tools.command", "import_module"): "SUBCOMMANDS names each subcommand's module (tools may import every "
    "package); test_one_command_lists_every_subcommand runs them",
    ("tools.sdk_lazy", "import_module"): "the offline plan imports the Pulumi SDKs' class modules by the name "
    "the program asks for (tests/tools/test_sdk_lazy.py), not their packages' "
    "whole __init__",
    ("tools.sdk_lazy", "find_spec"): "locates those SDK packages (PathFinder) without running their LazyLoader stubs",
}
"""The only calls that find or import a module by a name computed at run time, each with its reason."""
IMPORT_CALLS = {
    "import_module",
    "__import__",
    "find_spec",
    "run_module",
    "files",
    "spec_from_file_location",
    "find_loader",
    "load_module",
}
"""What loads or locates a module by name: importlib.import_module, __import__, importlib.util.find_spec,
runpy.run_module, importlib.resources.files, ..."""


def modules(package: str) -> dict[str, ast.Module]:
    """Every module of ``package`` by its dotted path inside it (``stack``, ``nodes.capacity``, ``nodes.__init__``)."""
    return {
        ".".join(p.relative_to(ROOT / package).with_suffix("").parts): ast.parse(p.read_text())
        for p in sorted((ROOT / package).rglob("*.py"))
    }


def is_module(dotted: str) -> bool:
    """Whether ``pkg.a.b`` names a module file (``pkg/a/b.py``) of ours."""
    return (ROOT / (dotted.replace(".", "/") + ".py")).exists()


def imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(level, dotted name) of every import in the module, nested ones included."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or ""))
    return out


def _target(parts: list[str], name: str | None) -> str | None:
    """``package.module`` (``components.nodes.capacity``), or ``package`` (or one of its folders), of our own that
    ``parts`` (+ an imported ``name``) point at, else None."""
    if parts[:1] == ["ray_efa_eks"]:
        parts = parts[1:]
    if not parts and name in PACKAGES:
        return name
    if not parts or parts[0] not in PACKAGES:
        return None
    for n in range(len(parts), 1, -1):  # the longest prefix that is a module file
        if is_module(".".join(parts[:n])):
            return ".".join(parts[:n])
    dotted = ".".join(parts)
    return f"{dotted}.{name}" if name and is_module(f"{dotted}.{name}") else dotted


def _base(package: str, name: str, level: int) -> list[str]:
    """The package a relative import of ``level`` dots in module ``name`` of ``package`` starts from."""
    here = [package, *name.split(".")][:-1]  # the folder the module (or __init__) is in
    return here[: len(here) - (level - 1)] if level <= len(here) else here[:0]


def edges(package: str, name: str, tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, ``package.module`` or ``package``) of every import of ours in module ``name`` of ``package``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                t = _target(a.name.split("."), None)
                if t:
                    yield node.lineno, t
        elif isinstance(node, ast.ImportFrom):
            mod = (node.module or "").split(".") if node.module else []
            parts = mod if node.level == 0 else _base(package, name, node.level) + mod
            if node.level > len(name.split(".")) + 1:  # past the top of the four packages
                parts = mod
            for a in node.names:
                t = _target(parts, a.name)
                if t:
                    yield node.lineno, t


def all_edges() -> set[tuple[str, str]]:
    return {
        (f"{pkg}.{name}", t)
        for pkg in PACKAGES
        for name, tree in modules(pkg).items()
        for _, t in edges(pkg, name, tree)
        if t != f"{pkg}.{name}"
    }


def test_each_package_holds_only_its_own_concern():
    components, training = set(modules("components")), set(modules("training"))
    assert not components & {"plan", "layout", "rules", "mockrun", "preflight", "config_schema", "cli"}
    assert not training & {"nccl_log", "efa_check", "sweep", "efa_counters", "stack_probe", "report", "local_cluster"}
    assert {
        "efa_check",
        "nccl_log",
        "sweep",
        "efa_counters",
        "stack_probe",
        "report",
        "fsdp_shapes",
        "local_cluster",
    } <= set(modules("efacheck"))
    assert {"plan", "layout", "rules", "mockrun", "preflight", "dev.config_schema", "command"} <= set(modules("tools"))


def test_the_users_commands_import_no_developer_tool():
    """tools/dev/ (reference generators, the mutation check) sits apart: only the dispatcher names it, by module path."""
    assert {"dev.config_schema", "dev.gen_catalogue", "dev.exit_status", "dev.mutate"} <= set(modules("tools"))
    bad = sorted(
        f"{a} -> {b}"
        for a, b in all_edges()
        if (b == "tools.dev" or b.startswith("tools.dev.")) and not a.startswith("tools.dev.")
    )
    assert not bad, f"the user's commands import a developer tool: {bad}"


def test_every_edge_between_the_packages_is_allowed():
    bad = sorted(
        f"{a} -> {b}"
        for a, b in all_edges()
        if a.split(".")[0] != b.split(".")[0] and b.split(".")[0] not in PACKAGE_EDGES[a.split(".")[0]]
    )
    assert not bad, f"imports against PACKAGE_EDGES: {bad}"
    training = {
        (a, b)
        for a, b in all_edges()
        if a.split(".")[0] != b.split(".")[0]
        and a.split(".")[0] in ("training", "efacheck")
        and b.split(".")[0] in ("efacheck", "components")
    }
    assert training == set(CROSS_EDGES), (
        "training -> efacheck/components edges differ from CROSS_EDGES (add a new "
        "one there, "
        f"with its reason): new {sorted(training - set(CROSS_EDGES))}, "
        f"gone {sorted(set(CROSS_EDGES) - training)}"
    )


@pytest.mark.parametrize("package", ["components", "efacheck"])
def test_shipped_packages_import_only_themselves_relatively(package):
    """The gate ships ``efacheck`` alone (with ``ray_efa_eks/__init__.py``) and other repos import ``components``: a
    relative import beyond the package, or an absolute one of ours, would break there."""
    for name, tree in modules(package).items():
        depth = name.count(".")  # a module in a folder of components/ reaches its siblings' folders with ..
        for level, mod in imports(tree):
            beyond = level > 1 + depth and (f"{package}.{name}", mod) not in CROSS_EDGES
            assert not beyond, f"{package}/{name}.py: relative import beyond its package ({'.' * level}{mod})"
            assert not (level == 0 and (mod.split(".")[0] in PACKAGES or mod.startswith("ray_efa_eks"))), (
                f"{package}/{name}.py imports {mod}"
            )


def test_training_reaches_efacheck_only_through_its_namespace_and_ships_what_it_imports():
    """training imports efacheck as ``..efacheck`` (both live in ray_efa_eks, installed or submitted), and submit
    ships every efacheck module training imports, closed under efacheck's own imports."""
    from ray_efa_eks.training.submit import COMPONENTS_FILES, EFACHECK_FILES

    for name, tree in modules("training").items():
        for level, mod in imports(tree):
            assert level <= 1 or (level == 2 and mod.split(".")[0] in ("efacheck", "components")), (
                f"training/{name}.py: from {'.' * level}{mod} reaches past efacheck"
            )
            assert not (level == 0 and (mod.split(".")[0] in PACKAGES or mod.startswith("ray_efa_eks"))), (
                f"training/{name}.py imports {mod} absolutely: a submitted job has another layout"
            )
    shipped = {f.removesuffix(".py") for f in EFACHECK_FILES}
    used = {b.split(".")[1] for a, b in CROSS_EDGES if b.startswith("efacheck.")} | {"__init__"}
    assert used <= shipped, f"training imports efacheck modules submit does not ship: {used - shipped}"
    efacheck = modules("efacheck")
    for name in shipped:
        for _, t in edges("efacheck", name, efacheck[name]):
            assert t.split(".")[-1] in shipped, f"efacheck/{name}.py imports {t}, which submit does not ship"
    for a, b in sorted(all_edges()):
        # the payload builder (training.submit's) runs on the caller's machine, never in the job
        if a.startswith("training.") and a != "training.submit" and b.startswith("components."):
            path = b.partition(".")[2].replace(".", "/")
            assert {f"{path}.py", f"{path}/__init__.py"} & set(COMPONENTS_FILES), f"{a} imports {b}, not shipped"


def test_every_edge_inside_the_library_follows_its_layers():
    layer = {m: name for name, ms in COMPONENT_LAYERS.items() for m in ms}
    mods = modules("components")
    assert set(mods) == set(layer), f"give each library module a layer in COMPONENT_LAYERS: {set(mods) ^ set(layer)}"
    bad = []
    for name, tree in mods.items():
        for line, t in edges("components", name, tree):
            target = t.partition(".")[2]
            if target in COMPONENT_FOLDERS:
                target = f"{target}.__init__"
            if target and target != name and layer[target] not in LAYER_EDGES[layer[name]]:
                bad.append(f"components/{name}.py:{line} ({layer[name]}) imports {target} ({layer[target]})")
    assert not bad, bad


def test_no_private_name_crosses_a_module():
    """A module's ``_private`` names are its own, in every package: what two modules share is public in the one that
    owns it (the labels, tolerations and pod helpers in components/kube.py, the payload builder in
    components/payload.py, the NCCL line grammar in efacheck/nccl_parse.py), imported by name or read off the
    module (``layout_node_groups.template_of``)."""
    crossing = []
    for package in PACKAGES:
        for name, tree in modules(package).items():
            where = f"{package}/{name.replace('.', '/')}.py"
            ours = set()  # names bound to a module of ours: ``from . import sweep as _sweep``
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level:
                    for a in node.names:
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            crossing.append(f"{where}:{node.lineno} imports {a.name}")
                        elif node.module is None or is_module(
                            ".".join([*_base(package, name, node.level), *(node.module or "").split("."), a.name])
                        ):
                            ours.add(a.asname or a.name)
            crossing += [
                f"{where}:{n.lineno} reads {n.value.id}.{n.attr}"
                for n in ast.walk(tree)
                if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id in ours
                and n.attr.startswith("_")
                and not n.attr.startswith("__")
            ]
    assert not crossing, crossing


def test_config_flows_one_way():
    """Only the umbrella turns StackConfig into component args; config.py imports no component."""
    readers = {
        name
        for name, tree in modules("components").items()
        if any(isinstance(n, ast.Name) and n.id == "StackConfig" for n in ast.walk(tree))
    }
    assert readers <= {"stack", "config.config"} and "stack" in readers  # config.py defines it (a ClassDef)
    config_imports = {
        t.partition(".")[2] for _, t in edges("components", "config.config", modules("components")["config.config"])
    }
    assert config_imports <= {
        "nodes.capacity",
        "nodes.instances",
        "storage.storage_rules",
        "cluster.eks_versions",
        "config.config_fields",
        "config.values",
        "ray.kuberay_versions",
        "config.errors",
        "nodes.ebs_limits",
        "queues.team_queues",
        "nodes.cold_start",
    }, config_imports
    # values.py (the value grammars every key, component and CLI option uses) is a leaf: it imports no component
    # but the URL rule it shares with the CLIs, which imports nothing
    assert [mod for level, mod in imports(modules("components")["config.values"]) if level] == ["url_rule"]
    assert not [mod for level, mod in imports(modules("components")["config.url_rule"]) if level]


def dynamic_imports() -> list[tuple[str, int, str, str]]:
    """(module, line, call, argument) of every call that loads or locates a module by a name other than a literal
    outside our packages (``__import__("types")`` passes; ``import_module(f"{parent}.training.model")`` does not)."""
    out = []
    for pkg in PACKAGES:
        for name, tree in modules(pkg).items():
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                f = node.func
                call = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if call not in IMPORT_CALLS or (call == "files" and "resources" not in ast.unparse(f)):
                    continue
                arg = node.args[0]
                if isinstance(arg, ast.Name) and arg.id == "__package__":
                    continue  # its own package
                literal = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
                if literal is not None and literal.split(".")[0] not in (*PACKAGES, "ray_efa_eks"):
                    continue  # a module outside ours, named as it is
                if isinstance(arg, ast.Name) and call == "files":
                    continue  # importlib.resources.files(module): a module object, imported plainly above
                out.append((f"{pkg}.{name}", node.lineno, call, ast.unparse(arg)))
    return out


def test_no_import_hides_in_a_string():
    hidden = [
        f"{m}:{line} {call}({arg})" for m, line, call, arg in dynamic_imports() if (m, call) not in DYNAMIC_IMPORTS
    ]
    assert not hidden, f"imports the AST cannot see (import plainly, or add to DYNAMIC_IMPORTS with a reason): {hidden}"
    assert {(m, call) for m, _, call, _ in dynamic_imports()} == set(DYNAMIC_IMPORTS), "DYNAMIC_IMPORTS has stale rows"


CODE_FOLDERS = (*PACKAGES, "policy", ".ci")
"""Every folder of code that runs: the four packages, the policy pack and the CI scripts."""


def second_names() -> list[str]:
    """``file:line what`` for each place that runs or imports one of our modules by a name other than
    ``ray_efa_eks.<package>.<module>``: a ``python -m <package>...`` (in a string, or ``"-m", "<package>..."`` in an
    argv), an edit of ``sys.path``, a module object planted in ``sys.modules``, a program held in a string that
    edits ``sys.path`` or imports from ``ray_efa_eks``, or one a shell line runs (``python -c``): run a module."""
    ours = "|".join(PACKAGES)
    found = []
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            where = str(path.relative_to(ROOT))
            for node in ast.walk(tree):
                line = getattr(node, "lineno", 0)
                run = (
                    re.search(rf"-m (?:{ours})\b[\w.]*", node.value)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    else None
                )
                if run:
                    found.append(f"{where}:{line} a string runs {run[0]}")
                elif (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and re.search(r"sys\.path\.(insert|append|extend)|from ray_efa_eks\.", node.value)
                ):
                    found.append(f"{where}:{line} a program in a string reaches our modules")
                elif (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and re.search(r"\bpython3? -c ", node.value)
                ):
                    found.append(f"{where}:{line} a shell line runs a program held in a string (python -c)")
                elif isinstance(node, (ast.List, ast.Tuple)):
                    vals = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
                    found += [
                        f"{where}:{line} argv runs -m {m}"
                        for flag, m in zip(vals, vals[1:])
                        if flag == "-m" and isinstance(m, str) and m.split(".")[0] in PACKAGES
                    ]
                elif isinstance(node, ast.Attribute) and ast.unparse(node) in (
                    "sys.path.insert",
                    "sys.path.append",
                    "sys.path.extend",
                ):
                    found.append(f"{where}:{line} edits sys.path")
                elif (
                    isinstance(node, ast.Subscript)
                    and ast.unparse(node.value) == "sys.modules"
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.slice, ast.Constant)
                    and str(node.slice.value).split(".")[0] in (*PACKAGES, "ray_efa_eks")
                ):
                    found.append(f"{where}:{line} plants {node.slice.value} in sys.modules")
    return found


def test_one_name_per_module():
    """The pods, submit, the policy pack, the plan and CI run and import ``ray_efa_eks.<package>.<module>`` only."""
    assert not second_names(), second_names()


@pytest.mark.parametrize(
    "module, args, fix",
    [
        ("training", ["--json"], "python -m ray_efa_eks.training --json"),
        ("efacheck.efa_check", ["--help"], "python -m ray_efa_eks.efacheck."),
    ],
)
def test_a_checkout_folder_run_by_its_short_name_prints_the_command_to_use(module, args, fix):
    """``python -m training --json`` in a checkout, the obvious command: one line naming the real one, exit 64."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 64 and "Traceback" not in out.stderr and not out.stdout, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1 and fix in out.stderr, out.stderr


EXIT_TABLE = "efacheck/exit_codes.py"
"""The one module that writes an exit code as a number (ExitStatus); the CLI kernel is efacheck/cli.py beside it:
both stdlib only, in every pod payload (the gate ships efacheck, the node agent and submit ship both files)."""
KERNEL_NAMES = {
    "ArgumentParser",
    "run_cli",
    "internal_error",
    "interrupted_code",
    "interruption",
    "terminated",
    "write_trace",
}


def exit_code_numbers() -> dict[str, list[int]]:
    """Module -> lines where an ``EXIT_*`` name is given a number (not a name from the table)."""
    found: dict[str, list[int]] = {}
    for pkg in PACKAGES:
        for name, tree in modules(pkg).items():
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [
                    n.id
                    for t in targets
                    for n in (t.elts if isinstance(t, ast.Tuple) else [t])
                    if isinstance(n, ast.Name)
                ]
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                if any(n.startswith("EXIT_") for n in names) and any(
                    isinstance(v, ast.Constant) and type(v.value) is int for v in values
                ):
                    found.setdefault(f"{pkg}/{name}.py", []).append(node.lineno)
    return found


def kernel_through_a_reexport() -> set[str]:
    """Modules that import the CLI kernel or an exit code from training/cli.py or tools/cli.py, not from efacheck."""
    found = set()
    for pkg in PACKAGES:
        for name, tree in modules(pkg).items():
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level:
                    target = f"{pkg}.{node.module}" if node.level == 1 else node.module
                    wanted = {a.name for a in node.names}
                    if (
                        target in ("training.cli", "tools.cli")
                        and f"{pkg}.{name}" != target
                        and wanted & (KERNEL_NAMES | {n for n in wanted if n.startswith("EXIT_")})
                    ):
                        found.add(f"{pkg}/{name}.py")
    return found


def test_each_exit_code_is_written_once():
    """Every code is a member of the table's ExitStatus; a module names it (``EXIT_USAGE``, or ``EXIT_IN_USE as
    EXIT_NAME_IN_USE``) and imports kernel and codes from efacheck, not through another package's re-export."""
    numbers = {m: lines for m, lines in exit_code_numbers().items() if m != EXIT_TABLE}
    assert not numbers, f"exit codes written as numbers outside {EXIT_TABLE}: {numbers}"
    through = kernel_through_a_reexport()
    assert not through, f"kernel or codes imported through training/cli.py or tools/cli.py: {sorted(through)}"


def test_the_gate_ships_a_self_contained_efa_proof(tmp_path):
    """The ConfigMap's files alone (efacheck under its installed name, and the gate's typed options with the
    library's lazy ``__init__``) import without Pulumi or training, and size FSDP messages from data; without
    site-packages (-S), so no installed ray_efa_eks can answer."""
    files = check_files()
    assert {p.rsplit("/", 1)[0] for p in files} == {"ray_efa_eks", "ray_efa_eks/efacheck", "ray_efa_eks/components"}
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    code = (
        "import sys, ray_efa_eks.efacheck.efa_check, ray_efa_eks.efacheck.check_args, "
        "ray_efa_eks.efacheck.sweep as s; print(s.__file__); print(len(s.fsdp_units('tiny', 2))); "
        "print(sorted(m for m in sys.modules if m.startswith(('ray_efa_eks.training', 'training', 'pulumi'))))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    where, units, training = out.stdout.splitlines()
    assert where.startswith(str(tmp_path)) and int(units) == 3 and training == "[]"


def test_one_command_lists_every_subcommand():
    exe = Path(sys.executable).with_name("ray-efa-eks")
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for name in (
        "plan",
        "diff",
        "check-rules",
        "preflight",
        "train",
        "submit",
        "efa-check",
        "nccl-verdict",
        "config-schema",
    ):
        assert f"\n  {name} " in out.stdout, name
    assert set(SUBCOMMANDS) >= {"plan", "preflight", "train"}
    commands, dev = out.stdout.split("\ndeveloper tools")
    for name, sub in SUBCOMMANDS.items():  # the project's own tools (tools/dev/) listed apart from the user's
        assert f"\n  {name} " in (dev if sub.module.startswith("tools.dev.") else commands), name
    assert {"config-schema", "catalogue", "mutate"} <= {n for n in SUBCOMMANDS if f"\n  {n} " in dev}


def test_command_usage_errors_are_64(capsys):
    assert main([]) == 64
    assert main(["deploy"]) == 64 and "unknown subcommand 'deploy'" in capsys.readouterr().err
    assert main(["plan", "--no-such-flag"]) == 64  # run_cli returns argparse's code instead of raising SystemExit
    assert "ray-efa-eks plan" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, plan_gets",
    [
        (["--stack", "prod", "origin/main"], ["--stack", "prod", "--diff", "origin/main"]),
        (
            ["origin/main", "--stack", "prod"],
            ["--stack", "prod", "--diff", "origin/main"],
        ),  # a value stays with its option
        (["a.json", "b.json", "--json"], ["--json", "--diff", "a.json", "b.json"]),
        (["--json"], ["--json", "--diff"]),  # no ref: the flag alone (plan names what is missing)
        (["--", "main"], ["--diff", "main"]),
        (["--stack"], ["--stack", "--diff"]),  # an option without its value is plan's to refuse
    ],
)
def test_diff_takes_options_before_or_after_the_ref(monkeypatch, argv, plan_gets):
    from ray_efa_eks.tools import plan

    got = []
    monkeypatch.setattr(plan, "main", lambda a, prog=None: got.append((a, prog)) or 0)
    assert main(["diff", *argv]) == 0
    assert got == [(plan_gets, "ray-efa-eks diff")]


def test_diff_refuses_an_option_after_the_double_dash(monkeypatch, capsys):
    from ray_efa_eks.tools import plan

    monkeypatch.setattr(plan, "main", lambda a, prog=None: pytest.fail("plan must not run"))
    assert main(["diff", "--", "--stack"]) == 64
    assert "'--stack' is not a git ref or a saved plan" in capsys.readouterr().err


def test_no_import_cycle_between_modules():
    """Two modules that import each other (one of them inside a function, to dodge the cycle at import time) are
    one concern split in two: the shared part belongs in a module both import. Every import counts, a
    function-level one included: it is still an arrow, only a late one."""
    graph = {
        f"{pkg}.{name}": {t for _, t in edges(pkg, name, tree)} - {f"{pkg}.{name}"}
        for pkg in PACKAGES
        for name, tree in modules(pkg).items()
    }
    seen: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(mod: str, path: list[str]) -> None:
        seen[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if dep not in graph:
                continue
            if seen.get(dep) == 1:
                cycles.append(path[path.index(dep) :] + [dep])
            elif dep not in seen:
                visit(dep, path + [dep])
        seen[mod] = 2

    for mod in sorted(graph):
        if mod not in seen:
            visit(mod, [mod])
    assert cycles == []
