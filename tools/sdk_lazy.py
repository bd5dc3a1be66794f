"""Load the Pulumi SDKs' big subpackages one class at a time, for the offline plan's short-lived process.

Why: the first touch of ``aws.ec2`` runs ``pulumi_aws/ec2/__init__.py``, which imports all ~330 of its modules
(each resource class, its args and state classes) although the stack uses about fifteen; with
``pulumi_kubernetes.core.v1`` and ``pulumi_aws.s3`` that was most of the 64-node plan command's CPU time.
:func:`install` puts a package module in ``sys.modules`` (where the SDKs' own ``lazy_import`` finds it) whose
attribute lookup imports only the module pulumi's code generator names after the attribute (``LaunchTemplate``
-> ``launch_template.py``, ``get_subnets_output`` -> ``get_subnets.py``, ``Pod`` -> ``Pod.py``, then ``_inputs``,
``_enums``, ``outputs``), and for any other name runs the package's own ``__init__`` once, so every name resolves
to the very object a normal import gives. Packages already loaded are left alone.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import sys
import types

PACKAGES = (
    "pulumi_aws.ec2",
    "pulumi_aws.s3",
    "pulumi_aws.iam",
    "pulumi_aws.eks",
    "pulumi_aws.kms",
    "pulumi_aws.vpc",
    "pulumi_aws.autoscaling",
    "pulumi_kubernetes.core.v1",
    "pulumi_kubernetes.apps.v1",
    "pulumi_kubernetes.batch.v1",
    "pulumi_kubernetes.networking.v1",
    "pulumi_kubernetes.rbac.v1",
    "pulumi_kubernetes.meta.v1",
    "pulumi_kubernetes.admissionregistration.v1",
)
"""The subpackages the stack uses whose ``__init__`` imports hundreds of classes."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STARRED = ("_inputs", "_enums")
"""Modules the generated ``__init__`` star-imports besides the per-resource ones (``outputs`` it imports as a
module: its names are no package attributes)."""


def _candidates(name: str) -> list[str]:
    """Module names (without package) that pulumi's generated layout would define ``name`` in, likeliest first."""
    base = name
    for suffix in ("_output", "Args"):
        if base.endswith(suffix) and len(base) > len(suffix):
            base = base[: -len(suffix)]
            break
    if base.startswith("AwaitableGet") and base.endswith("Result"):
        base = base[len("Awaitable") :]
    if base.startswith("Get") and base.endswith("Result"):
        base = base[: -len("Result")]
    return [*dict.fromkeys((base, _CAMEL.sub("_", base).lower())), *_STARRED]


class _LazyPackage(types.ModuleType):
    """A generated SDK package whose names are imported on first use (see the module docstring)."""

    def __getattr__(self, name: str):
        if name.startswith("__") or self.__dict__.get("_sdk_lazy_full"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        path = self.__dict__["__path__"][0]
        if name in (*_STARRED, "outputs"):  # the submodule itself
            if os.path.exists(os.path.join(path, name + ".py")):
                return importlib.import_module(f"{self.__name__}.{name}")
            return self._sdk_full(name)
        for mod in _candidates(name):
            if not os.path.exists(os.path.join(path, mod + ".py")):
                continue
            m = importlib.import_module(f"{self.__name__}.{mod}")  # a resource module binds its names (below)
            if name in self.__dict__:
                return self.__dict__[name]
            if mod in _STARRED and name in getattr(m, "__all__", ()):
                value = getattr(m, name)
                super().__setattr__(name, value)
                return value
        return self._sdk_full(name)

    def __setattr__(self, name: str, value) -> None:
        """The import system binds each imported submodule here: do what the ``__init__``'s ``from .mod import *``
        would do right after (``get_subnets`` is the function, not its module), whoever imported it."""
        super().__setattr__(name, value)
        if (
            isinstance(value, types.ModuleType)
            and value.__name__ == f"{self.__name__}.{name}"
            and name not in (*_STARRED, "outputs")
            and not self.__dict__.get("_sdk_lazy_full")
        ):
            # the __init__ star-imports _inputs after every resource module: on a clash its name wins
            inputs = sys.modules.get(f"{self.__name__}._inputs")
            shadow = set(getattr(inputs, "__all__", ())) if inputs is not None else set()
            for n in getattr(value, "__all__", ()):
                if n not in shadow:
                    super().__setattr__(n, getattr(value, n))

    def _sdk_full(self, name: str):
        """Run the package's own ``__init__`` (every name, as a plain import), then look ``name`` up again."""
        self.__dict__["_sdk_lazy_full"] = True
        self.__spec__.loader.exec_module(self)
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


def _loaded(name: str) -> bool:
    m = sys.modules.get(name)
    # the SDKs' lazy_import leaves an importlib LazyLoader module that is not yet run: that one may be replaced
    return m is not None and not type(m).__name__ == "_LazyModule"


def install(packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Replace each not-yet-loaded package in ``packages`` by a :class:`_LazyPackage`; the names replaced."""
    done = []
    for full in packages:
        if _loaded(full):
            continue
        parent_name, _, child = full.rpartition(".")
        try:
            parent = importlib.import_module(parent_name)
            # not importlib.util.find_spec: it would read __spec__ of the SDK's LazyLoader stub and so run it
            spec = importlib.machinery.PathFinder.find_spec(full, list(parent.__path__))
        except ImportError:
            continue
        if spec is None or not spec.submodule_search_locations or _loaded(full):
            continue
        mod = _LazyPackage(full)
        mod.__spec__, mod.__loader__, mod.__package__ = spec, spec.loader, full
        mod.__path__ = list(spec.submodule_search_locations)
        mod.__file__ = spec.origin
        sys.modules[full] = mod
        setattr(parent, child, mod)
        done.append(full)
    return done
