"""Validate custom objects against a CRD of tests/schemas/ (verbatim upstream copies; provenance in its README)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


@lru_cache(maxsize=None)
def validator(file: str, version: str) -> jsonschema.protocols.Validator:
    """The validator of ``version``'s openAPIV3Schema in ``tests/schemas/<file>`` (schema checked once)."""
    crd = yaml.load((SCHEMAS / file).read_text(), Loader=yaml.CSafeLoader)
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def plain(value: Any) -> Any:
    """A registered object as the API server reads it: whole floats (protobuf numbers) back to integers."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


CRD_FILES = {
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): "kueue.x-k8s.io_resourceflavors.yaml",
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): "kueue.x-k8s.io_clusterqueues.yaml",
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): "kueue.x-k8s.io_localqueues.yaml",
    ("ray.io/v1", "RayJob"): "ray.io_rayjobs.yaml",
    ("ray.io/v1", "RayCluster"): "ray.io_rayclusters.yaml",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_podmonitors.yaml",
}


def validate(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless ``obj`` fits its kind's CRD (by apiVersion and kind)."""
    obj = plain(obj)
    version = obj["apiVersion"].rpartition("/")[2]
    validator(CRD_FILES[(obj["apiVersion"], obj["kind"])], version).validate(obj)
