"""Multi-language entry point: hosts EfaRayCluster as a Pulumi component provider (``PulumiPlugin.yaml``).

``pulumi package add <this repo>`` runs this file through the Python language host; the Pulumi SDK infers the
package schema from ``EfaRayClusterArgs`` and the component's output annotations (pulumi.provider.experimental),
so TypeScript, Go, C#, Java and YAML programs get the same component the Python program uses.
"""

from importlib.metadata import PackageNotFoundError, version

from pulumi.provider.experimental import component_provider_host

from ray_efa_eks.components.stack import EfaRayCluster

PACKAGE = "ray-efa-eks"


def package_version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # run from a checkout that was never pip-installed
        return "0.0.0"


if __name__ == "__main__":
    component_provider_host([EfaRayCluster], name=PACKAGE, version=package_version())
