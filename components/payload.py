"""Our code shipped into a pod under its installed name: ``ray_efa_eks/__init__.py`` and
``ray_efa_eks/<package>/<module>.py``, so the pod runs ``python -m ray_efa_eks.efacheck.efa_check`` exactly as a
user's install does, with no path edits.

One builder for every pod that carries code: the gate Job and its image audit (components/addons/efa_check.py), the node
agent (components/addons/node_agent.py) and ``submit``'s working_dir (training/__main__.py). The sources are read as files
from the folder the import system finds for ``ray_efa_eks.<package>`` (an install or an editable checkout), without
importing the package: the library imports none of the others. The payload's ``ray_efa_eks/__init__.py`` makes the
root a regular package, so in the pod (its working directory or a Ray job's working_dir, first on ``sys.path``) the
shipped copy is the one imported, never a ``ray_efa_eks`` installed in the image.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = "ray_efa_eks"
"""The installed namespace every package lives in (pyproject.toml ``[tool.setuptools]``)."""
ROOT_INIT = '"""ray-efa-eks code shipped into a pod (components/payload.py)."""\n'
"""The payload's ``ray_efa_eks/__init__.py``: a regular package, ahead of any installed copy."""


def package_dir(package: str) -> Path:
    """Where ``ray_efa_eks.<package>``'s sources are, found by the import system without importing the package."""
    spec = importlib.util.find_spec(f"{ROOT}.{package}")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {ROOT}.{package} is not importable here; install ray-efa-eks (pip install -e . in a checkout)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def build(packages: Mapping[str, Iterable[str] | None]) -> dict[str, str]:
    """``ray_efa_eks/<package>/<file>`` -> source, plus ``ray_efa_eks/__init__.py``.

    ``packages``: package -> the file names to ship (``None``: every ``.py`` of it, sub-folders included, caches
    left out). A named file that does not exist is a FileNotFoundError naming it."""
    files = {f"{ROOT}/__init__.py": ROOT_INIT}
    for package, names in packages.items():
        root = package_dir(package)
        wanted = (
            sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "__pycache__" not in p.parts)
            if names is None
            else list(names)
        )
        for n in wanted:
            if not (root / n).is_file():
                raise FileNotFoundError(f"package {ROOT}.{package} at {root} has no {n} to ship")
            files[f"{ROOT}/{package}/{n}"] = (root / n).read_text()
    return files


def config_key(path: str) -> str:
    """ConfigMap keys allow no '/': ``ray_efa_eks/efacheck/nccl_log.py`` is stored as
    ``ray_efa_eks.efacheck.nccl_log.py``."""
    return path.replace("/", ".")


def config_map_data(files: Mapping[str, str]) -> dict[str, str]:
    """The ConfigMap's ``data`` for a payload."""
    return {config_key(p): t for p, t in files.items()}


def volume(name: str, config_map: str, files: Iterable[str]) -> dict[str, Any]:
    """A ``configMap`` volume laying the payload out under the folder mounted by :func:`mount` (Kubernetes API
    reference, ConfigMapVolumeSource: ``items[].path`` is relative and may hold '/')."""
    return {
        "name": name,
        "configMap": {
            "name": config_map,
            "items": [{"key": config_key(p), "path": p.split("/", 1)[1]} for p in sorted(files)],
        },
    }


def mount(name: str, base: str, read_only: bool = False) -> dict[str, Any]:
    """The volumeMount putting :func:`volume` at ``<base>/ray_efa_eks``: the container runs in ``base``."""
    return {"name": name, "mountPath": f"{base}/{ROOT}", **({"readOnly": True} if read_only else {})}


def write(files: Mapping[str, str], dest: Path) -> Path:
    """Lay the payload out under ``dest`` (a Ray job's working_dir); returns ``dest``."""
    for p, text in files.items():
        out = dest / p
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return dest
