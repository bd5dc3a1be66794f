"""The URL check of the training CLIs (``submit --address``, and the tools that take a URL). The exit codes and the
one entry point every command runs through are efacheck's (efacheck/cli.py, efacheck/exit_codes.py), which
``submit`` ships beside ``training`` (``EFACHECK_FILES``)."""

from __future__ import annotations

from ..components.config.url_rule import url_fault


def url_problem(
    url: str, option: str, schemes: tuple[str, ...] = ("http", "https"), example: str = "http://127.0.0.1:8265"
) -> str | None:
    """Why ``url`` is no usable ``scheme://host[:port]`` URL for ``option`` (None when it is one), as a usage error
    that shows a good one: the rule is ``remoteWriteUrl``'s (components/config/url_rule.py)."""
    fault = url_fault(url, schemes)
    return f"{option} {url!r}: {fault}; e.g. {option} {example}" if fault else None
