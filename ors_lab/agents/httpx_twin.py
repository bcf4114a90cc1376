"""``Episode.llm_client_httpx()``: the recorded LLM client as an ``httpx.AsyncClient``, for a framework still on httpx.

Imported when the first such client is made: httpx takes a tenth of a second to import, and most agents' SDKs
take the ``httpx2`` client of ``Episode.llm_client()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import httpx2

__all__ = ["HttpxTransport"]


class _HttpxStream(httpx.AsyncByteStream):
    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx2.TimeoutException as exc:
            raise httpx.ReadTimeout(str(exc)) from exc
        except httpx2.TransportError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxTransport(httpx.AsyncBaseTransport):
    """An ``httpx`` transport over an ``httpx2.AsyncClient``: the same recording for a framework still on httpx."""

    def __init__(self, client: httpx2.AsyncClient) -> None:
        self._client = client

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        twin = self._client.build_request(request.method, str(request.url), headers=request.headers.raw,
                                          content=body, extensions=request.extensions)  # fmt: skip
        try:
            response = await self._client.send(twin, stream=True)
        except httpx2.ConnectError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except httpx2.TimeoutException as exc:
            raise httpx.ReadTimeout(str(exc), request=request) from exc
        except httpx2.TransportError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        return httpx.Response(response.status_code, headers=response.headers.raw, stream=_HttpxStream(response),
                              request=request)  # fmt: skip

    async def aclose(self) -> None:
        await self._client.aclose()
