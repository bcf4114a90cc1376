"""A server's base URL, checked once where it is given (``Client(url)``, ``ors-lab proxy UPSTREAM``).

A URL without ``http://`` or ``https://`` (``127.0.0.1:8080``) would only fail at the first
request, as a read error far from where it was written; here it fails at once with an
``InvalidURLError`` that suggests the URL meant.
"""

from __future__ import annotations

import re

import httpx2

from ors_lab.protocol.errors import InvalidURLError

__all__ = ["server_url"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def server_url(url: str) -> str:
    """``url`` without its trailing slashes, once it is ``http(s)://host[:port][/path]``; else ``InvalidURLError``."""
    if not isinstance(url, str):
        raise InvalidURLError(f"a server URL is a string such as 'http://127.0.0.1:8080', not {url!r}", url=repr(url))
    scheme = _SCHEME.match(url)
    if scheme is None:
        raise InvalidURLError(
            f"{url!r} is not a server URL: it has no http:// or https://; did you mean 'http://{url.lstrip('/')}'?",
            url=url,
        )
    if scheme.group(1).lower() not in ("http", "https"):
        raise InvalidURLError(f"{url!r} is not a server URL: ORS servers speak http:// or https://", url=url)
    try:
        host = httpx2.URL(url).host
    except httpx2.InvalidURL as exc:
        raise InvalidURLError(f"{url!r} is not a server URL: {exc}", url=url) from None
    if not host:
        raise InvalidURLError(f"{url!r} is not a server URL: it names no host (such as http://127.0.0.1:8080)", url=url)
    return url.rstrip("/")
