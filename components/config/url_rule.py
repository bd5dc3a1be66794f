"""The one rule for a ``scheme://host[:port]`` URL, shared by the ``remoteWriteUrl`` key (``values.HttpUrl``) and the
CLIs' URL options (``training/cli.url_problem``). Stdlib only: the training CLIs import it without the rest of the
library."""

from __future__ import annotations

from urllib.parse import urlsplit


def url_fault(url: str, schemes: tuple[str, ...]) -> str | None:
    """What keeps ``url`` from being a ``scheme://host[:port]`` URL with one of ``schemes`` (None when nothing does).

    urllib parses lazily: ``urlsplit("http://[::1")`` raises ValueError and ``.port`` raises for 99999, so both are
    asked here, once, and answered as a fault instead of a traceback later.
    """
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as e:
        return f"is not a URL ({e})"
    if parts.scheme not in schemes or not host:
        return f"needs a scheme ({'/'.join(schemes)}) and a host"
    if port == 0:
        return "port 0 is no port (1..65535)"
    return None
