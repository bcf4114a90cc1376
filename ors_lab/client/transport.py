"""The default wire transport: aiohttp behind httpx2's transport interface.

The client speaks httpx2 (requests, responses, the ``transport=`` seam that recording and replay
plug into). Underneath, httpx2's own connection pool costs about twice the CPU of aiohttp per
request at high concurrency (``bench/README.md`` has the figures), so the default transport
hands each request to an aiohttp session and wraps the answer back into an ``httpx2.Response``.
Bodies stream through untouched (no decompression, no buffering), and aiohttp's errors become
the httpx2 errors the client's retry rules are written against.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2

__all__ = ["AiohttpTransport"]


class _AiohttpStream(httpx2.AsyncByteStream):
    """A response body read from aiohttp as the network delivers it."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.SocketTimeoutError, TimeoutError) as exc:
            raise httpx2.ReadTimeout(str(exc) or "read timed out", request=self._request) from exc
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            raise httpx2.RemoteProtocolError(str(exc) or type(exc).__name__, request=self._request) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.ReadError(str(exc) or type(exc).__name__, request=self._request) from exc

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """An ``httpx2.AsyncBaseTransport`` that sends through one aiohttp session per event loop."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _session_for_loop(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=False)
            session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._session = session
        return session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        session = self._session_for_loop()
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeouts.get("connect"),
            sock_connect=timeouts.get("connect"),
            sock_read=timeouts.get("read"),
        )
        body = await request.aread()
        try:
            response = await session.request(
                request.method,
                str(request.url),
                headers=[(key.decode("latin-1"), value.decode("latin-1")) for key, value in request.headers.raw],
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
                compress=None,
            )
        except aiohttp.ClientConnectorError as exc:
            raise httpx2.ConnectError(str(exc), request=request) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx2.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
        except (aiohttp.SocketTimeoutError, TimeoutError) as exc:
            raise httpx2.ReadTimeout(str(exc) or "read timed out", request=request) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError) as exc:
            raise httpx2.RemoteProtocolError(str(exc) or type(exc).__name__, request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        return httpx2.Response(
            response.status,
            headers=[(key, value) for key, value in response.raw_headers],
            stream=_AiohttpStream(response, request),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()},
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
            await asyncio.sleep(0)  # let aiohttp's transports finish closing before the loop may end
