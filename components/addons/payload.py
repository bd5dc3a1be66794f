"""What the gate Job and the node agent ship into their pods: the EFA proof package's source files, found by the
import system without importing them (the library never imports the proof), and the ConfigMap keys they travel
under."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_ROOT_PACKAGE = ".".join(__package__.split(".")[:-2])  # above components/<layer>
EFA_PROOF_PACKAGE = f"{_ROOT_PACKAGE}.efacheck".lstrip(".")
"""The sibling EFA-proof package: ``ray_efa_eks.efacheck`` when installed, ``efacheck`` from a checkout."""


def package_dir(package: str) -> Path:
    """Where ``package``'s sources are, found by the import system (installed or a checkout) without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"EfaCheckJob: package {package} is not importable here; install ray-efa-eks")
    return Path(list(spec.submodule_search_locations)[0])


def config_key(path: str) -> str:
    """ConfigMap keys allow no '/': ``efacheck/nccl_log.py`` is stored as ``efacheck.nccl_log.py``."""
    return path.replace("/", ".")
