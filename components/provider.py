"""EfaRayCluster as a Pulumi component provider: what other languages (TypeScript, Go, C#, Java, YAML) run.

How the Pulumi CLI starts it (read in pulumi/pulumi, not guessed): ``pulumi package add <this repo>`` finds
``PulumiPlugin.yaml`` in the repository root and the engine launches the plugin *directory* through the
Python language host, ``<root>/.venv/bin/python <root> <engine address>`` (sdk/go/common/resource/plugin/plugin.go
``execPlugin``: ``NewProgramInfo(pluginDir, pluginDir, ".")``; sdk/python/cmd/pulumi-language-python/main.go
``RunPlugin``: ``python <ProgramDirectory> req.Args...``). A plugin cannot name another entry point
(``PluginProject`` has no ``main``; pkg/workspace/plugin.go: "Plugin's are not able to set a non-standard entry
point"), so the root ``__main__.py`` serves both: the stack program under ``pulumi up`` (a resource monitor is
configured) and this provider when started as a plugin (none is). The plugin prints its port on stdout and
answers gRPC (pulumi/provider/server.py ``main``).

The SDK's ``ComponentProvider`` infers the schema from ``EfaRayClusterArgs``; this subclass adds what the
SDK gets wrong or leaves rough for this component (pulumi 3.272, pulumi/provider/experimental/component.py and
pulumi/provider/server.py):

- an input sent as an output value (an SDK's ``Output``, a secret, a value with dependencies, an unknown) is refused as
  an input property error naming the key, before the SDK's ``map_input_properties`` calls ``int()`` on it
  (a ``TypeError`` and a traceback for every integer input);
- every input is parsed by its key's grammar (``config.GRAMMARS``, components/config/values.py) first, so a value the
  stack config refuses is refused here with the same words;
- a bad stack setting (``ConfigError``) is an input property error (``gpuNodeCount`` with value ``2.5``: "must be
  a whole number"), which the engine shows as "property X with value V has a problem: ...", not a Python traceback:
  the SDK turns every exception raised inside the component's ``__init__`` into a generic error with its stack.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Optional

import pulumi
from pulumi.errors import InputPropertyError
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.provider import ConstructResult
from pulumi.provider.server import ComponentInitError
from pulumi.runtime import known_types

from .config import values
from .config.config import KEYS, ConfigError, grammar
from .stack import EfaRayCluster

PACKAGE = "ray-efa-eks"
PLAIN_FIX = (
    "must be a plain value known at preview (a literal or a config value), not a resource output or a "
    "secret: it decides which resources exist"
)


def package_version() -> str:
    """The installed distribution's version (0.0.0 from a checkout that was never pip-installed)."""
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "0.0.0"


def _is_output(value: Any) -> bool:
    """An Output (output value, secret, value with dependencies), an unknown (preview) or a resource, at any depth."""
    if known_types.is_output(value) or known_types.is_unknown(value) or known_types.is_resource(value):
        return True
    if isinstance(value, (list, tuple)):
        return any(_is_output(v) for v in value)
    if isinstance(value, dict):
        return any(_is_output(v) for v in value.values())
    return False


class EfaRayClusterProvider(ComponentProvider):
    """The SDK's component provider for EfaRayCluster, with input errors reported as input errors."""

    def __init__(self) -> None:
        super().__init__([EfaRayCluster], PACKAGE, version=package_version())

    def construct(
        self, name: str, resource_type: str, inputs: dict[str, Any], options: Optional[pulumi.ResourceOptions] = None
    ) -> ConstructResult:
        for key, value in inputs.items():
            if _is_output(value):
                raise InputPropertyError(key, PLAIN_FIX)
            if key not in KEYS:
                continue  # the SDK refuses it as unknown
            try:  # the stack's grammar, before the SDK's own coercion (int("x") would be a traceback)
                grammar(key).parse(value)
            except values.ValueProblem as p:
                raise InputPropertyError(key, str(ConfigError(key, value if p.value is None else p.value, p.fix)))
        try:
            return super().construct(name, resource_type, inputs, options)
        except ComponentInitError as err:
            if isinstance(err.inner, ConfigError):
                raise InputPropertyError(err.inner.key, str(err.inner)) from None
            raise


def started_as_plugin() -> bool:
    """True when no resource monitor is configured: the engine started us as a plugin, not as the program."""
    from pulumi.runtime.settings import get_monitor

    return get_monitor() is None


def serve(args: list[str] | None = None) -> None:
    """Serve the provider over gRPC: print the port, answer until the engine kills the process."""
    from pulumi.provider import main

    main(EfaRayClusterProvider(), sys.argv[1:] if args is None else args)
