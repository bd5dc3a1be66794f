"""Device plugin versions current for the catalogue, judged against the pinned charts' own files.

The pinned chart's ``Chart.yaml`` and ``values.yaml`` (tests/fixtures/charts/, verbatim from /work/shared/charts/)
say which image it runs; every value the stack sets must be a key of that chart's defaults; the versions known to
break (EFA images before v0.5.6 on p6-b200, NVIDIA 0.19.0-0.19.2 with MOFED injection on) are refused, with the
reason, before any resource exists.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ray_efa_eks.components.addons.device_plugins import DevicePluginsArgs

CHARTS = Path(__file__).parents[1] / "fixtures" / "charts"


def release(run, chart: str):
    return next(r for r in run.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == chart)


def chart_version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in str(text).removeprefix("v").split("."))


def check_versions(args):
    from ray_efa_eks.components.addons.device_plugins import check_versions as check

    return check(args)


def fixture(chart: str, version: str) -> tuple[dict, dict]:
    folder = CHARTS / f"{chart}-{version}"
    assert folder.is_dir(), f"pinned {chart} {version} has no defaults in tests/fixtures/charts/"
    return yaml.safe_load((folder / "Chart.yaml").read_text()), yaml.safe_load((folder / "values.yaml").read_text())


def unknown_keys(ours: dict, defaults: dict, path: str = "") -> list[str]:
    """Keys of ``ours`` that the chart's defaults do not have (maps compared key by key; lists/scalars replace)."""
    out = []
    for k, v in ours.items():
        if k not in defaults:
            out.append(path + k)
        elif isinstance(v, dict) and isinstance(defaults[k], dict) and defaults[k]:  # {} = a free-form map
            out += unknown_keys(v, defaults[k], f"{path}{k}.")
    return out


def test_pinned_efa_chart_ships_an_image_that_counts_p6_b200_right(default_run):
    r = release(default_run, "aws-efa-k8s-device-plugin")
    chart, values = fixture("aws-efa-k8s-device-plugin", r.inputs["version"])
    assert chart_version(chart["version"]) >= (0, 5, 10)
    assert chart_version(values["image"]["tag"]) >= (0, 5, 6) and values["image"]["tag"] == chart["appVersion"]
    assert not unknown_keys(r.inputs["values"], values)


def test_pinned_nvidia_chart_injects_no_infiniband_devices(default_run):
    r = release(default_run, "nvidia-device-plugin")
    v = chart_version(r.inputs["version"])
    assert not (0, 19, 0) <= v <= (0, 19, 2)
    _, values = fixture("nvidia-device-plugin", r.inputs["version"])
    assert r.inputs["values"]["mofedEnabled"] is False
    assert "mofedEnabled" in values  # the chart's own key (null: the binary's default applies)
    assert not unknown_keys(r.inputs["values"], values)


def test_unknown_key_check_can_fail():
    _, values = fixture("nvidia-device-plugin", "0.17.1")
    assert unknown_keys({"mofedEnable": False, "affinity": {"nodeAfinity": {}}}, values) == [
        "mofedEnable",
        "affinity.nodeAfinity",
    ]


def test_old_efa_chart_refused_on_p6_b200_with_the_reason():
    bad = DevicePluginsArgs(provider=None, efa_chart_version="v0.5.7", instance_types=["p6-b200.48xlarge"])
    with pytest.raises(ValueError, match=r"v0\.5\.7 on p6-b200\.48xlarge: .*NVLink.*v0\.5\.10 or later"):
        check_versions(bad)
    with pytest.raises(ValueError, match="p6-b200"):  # None = every EFA type of the catalogue
        check_versions(DevicePluginsArgs(provider=None, efa_chart_version="v0.5.9"))
    check_versions(DevicePluginsArgs(provider=None, efa_chart_version="v0.5.10", instance_types=["p6-b200.48xlarge"]))
    check_versions(DevicePluginsArgs(provider=None, efa_chart_version="v0.5.7", instance_types=["g6.12xlarge"]))
    check_versions(DevicePluginsArgs(provider=None, efa=False, efa_chart_version="v0.5.7"))


def test_nvidia_0_19_refused_unless_mofed_stays_off():
    for v in ("0.19.0", "0.19.1", "0.19.2"):
        check_versions(DevicePluginsArgs(provider=None, nvidia_chart_version=v))  # ours sets mofedEnabled: false
        for mofed in (True, None):
            args = DevicePluginsArgs(
                provider=None, nvidia_chart_version=v, extra_values={"nvidia": {"mofedEnabled": mofed}}
            )
            with pytest.raises(ValueError, match=r"uverbs.*#1692.*0\.19\.3"):
                check_versions(args)
    check_versions(
        DevicePluginsArgs(provider=None, nvidia_chart_version="0.19.3", extra_values={"nvidia": {"mofedEnabled": True}})
    )
    with pytest.raises(ValueError, match="MAJOR.MINOR.PATCH"):
        check_versions(DevicePluginsArgs(provider=None, nvidia_chart_version="latest"))
