"""The URL check of the training CLIs (``submit --address``, and the tools that take a URL). The exit codes and the
one entry point every command runs through are efacheck's (efacheck/cli.py, efacheck/exit_codes.py), which
``submit`` ships beside ``training`` (``EFACHECK_FILES``)."""

from __future__ import annotations


def url_problem(
    url: str, option: str, schemes: tuple[str, ...] = ("http", "https"), example: str = "http://127.0.0.1:8265"
) -> str | None:
    """Why ``url`` is no usable ``scheme://host[:port]`` URL for ``option`` (None when it is one).

    urllib parses lazily: ``urlsplit("http://[::1")`` raises ValueError and ``.port`` raises for 99999, so both are
    asked here, once, and answered as a usage error instead of a traceback later.
    """
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as e:
        return f"{option} {url!r}: not a URL ({e}); e.g. {option} {example}"
    if parts.scheme not in schemes or not host:
        return f"{option} {url!r}: expected a {'/'.join(schemes)} URL with a host, e.g. {option} {example}"
    if port == 0:
        return f"{option} {url!r}: port 0 is no port (1..65535); e.g. {option} {example}"
    return None
