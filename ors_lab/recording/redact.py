"""Secrets out, before anything is written.

Redacted by default: the ``Authorization``, ``Proxy-Authorization``, ``X-API-Key``, ``Cookie`` and
``Set-Cookie`` headers (value replaced), ``X-Secrets`` (its base64 JSON is decoded, the secret
*names* kept and every value replaced), the ``secrets`` field of a ``/create`` body (names kept),
and credentials in URLs (user:password, and the query values of ``api_key``, ``key``, ``token``,
``access_token``). Users add header names and regular expressions; a pattern's matches are
replaced in every text that is written: header values, bodies, URLs, SSE data and comments.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["REDACTED", "Redactor", "is_create_url"]

REDACTED = "<redacted>"

DEFAULT_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "cookie", "set-cookie"})
SECRET_QUERY_KEYS = frozenset({"api_key", "apikey", "key", "token", "access_token"})


class Redactor:
    """Turns headers, bodies, URLs and texts into their redacted form."""

    def __init__(self, headers: Iterable[str] = (), patterns: Iterable[str | re.Pattern[str]] = ()) -> None:
        self.headers = DEFAULT_HEADERS | {name.lower() for name in headers}
        self.patterns = [re.compile(p) if isinstance(p, str) else p for p in patterns]

    def text(self, value: str) -> str:
        """A text with every user pattern's matches replaced."""
        for pattern in self.patterns:
            value = pattern.sub(REDACTED, value)
        return value

    def header_items(self, items: Iterable[tuple[str, str]]) -> dict[str, str]:
        """Headers as a dict (lower-case names, repeats joined by ", "), secrets replaced."""
        out: dict[str, str] = {}
        for name, value in items:
            key = name.lower()
            if key in self.headers:
                value = REDACTED
            elif key == "x-secrets":
                value = _redact_x_secrets(value)
            else:
                value = self.text(value)
            out[key] = f"{out[key]}, {value}" if key in out else value
        return out

    def url(self, value: str) -> str:
        """A URL without user:password and without secret query values."""
        parts = urlsplit(value)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(k.lower() in SECRET_QUERY_KEYS for k, _ in pairs):
                query = urlencode([(k, REDACTED if k.lower() in SECRET_QUERY_KEYS else v) for k, v in pairs])
        return self.text(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))

    def body(self, url: str, body: bytes | None) -> bytes | None:
        """A request body, with a ``/create`` body's ``secrets`` values replaced (``url`` may carry a query)."""
        if not body:
            return body
        if b"secrets" in body and is_create_url(url):
            try:
                value = json.loads(body)
            except ValueError:
                value = None
            if isinstance(value, dict) and isinstance(value.get("secrets"), dict):
                value["secrets"] = dict.fromkeys(value["secrets"], REDACTED)
                body = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        if self.patterns:
            body = self.text(body.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        return body


def is_create_url(url: str) -> bool:
    """True for a URL whose path is an ORS ``/create`` (whatever its query or fragment)."""
    return urlsplit(url).path.rstrip("/").endswith("/create")


def _redact_x_secrets(value: str) -> str:
    """``X-Secrets`` is base64 JSON ``{name: {"value": ..., ...}}``: keep names and other fields."""
    try:
        decoded: Any = json.loads(base64.b64decode(value, validate=True))
    except ValueError:
        return REDACTED
    if not isinstance(decoded, Mapping):
        return REDACTED
    kept = {
        name: {**entry, "value": REDACTED} if isinstance(entry, Mapping) else REDACTED
        for name, entry in decoded.items()
    }
    return json.dumps(kept, separators=(",", ":"))
