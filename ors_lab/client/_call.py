"""A ``/call``: sent once, its SSE stream assembled, resumed by its ``task_id`` when it drops, never re-sent.

``_Caller`` is the part of ``AsyncClient`` that runs tools (the rules: ``policy.py``): the whole
call within ``call_timeout``, each stream's bytes through a ``BodyReader`` into the one
``CallAssembler`` (``ors_lab.protocol.call``), a stream silent for ``heartbeat_timeout`` counted as
dropped, and a call that may have reached the server never sent again without its ``task_id``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx2

from ors_lab.client._send import _CallProgress, _Sender
from ors_lab.client.policy import RETRY_STATUSES, is_starting, outcome_unknown
from ors_lab.client.tap import BodyReader, describe_error
from ors_lab.events import CallErrorEvent, EventStream, ResultEvent, RetryEvent
from ors_lab.protocol.answers import outcome_unknown_error
from ors_lab.protocol.call import CallAssembler
from ors_lab.protocol.errors import (
    CallDeadlineExceededError,
    ConnectionFailedError,
    DeadlineExceededError,
    MalformedStreamError,
    ORSError,
    OutcomeUnknownError,
    ResumeFailedError,
)
from ors_lab.protocol.models import ToolResult

if TYPE_CHECKING:  # annotations only: a session calls through its client, so nothing here imports it at run time
    from ors_lab.client._session import AsyncSession

__all__ = ["DRAIN_TIMEOUT", "HEARTBEAT_TIMEOUT"]

DRAIN_TIMEOUT = 1.0
"""After `end`, how long to wait for the body to finish before closing the connection instead."""
HEARTBEAT_TIMEOUT = 30.0
"""A /call stream silent this long (three missed pings) counts as dropped, and is resumed."""


class _Caller(_Sender):
    """The tool calls of ``AsyncClient`` (which sets these attributes)."""

    call_timeout: float | None
    heartbeat_timeout: float
    max_result_bytes: int
    max_line_bytes: int

    def _call_deadline(self, session_id: str, name: str, progress: _CallProgress) -> DeadlineExceededError:
        """The error for a /call that outlived ``call_timeout``, by how far it got."""
        timeout = self.call_timeout
        task_id = progress.known_task_id
        context: dict[str, Any] = {"deadline": timeout, "session_id": session_id, "task_id": task_id,
                                   "request": progress.request}  # fmt: skip
        if task_id is not None:
            return CallDeadlineExceededError(
                f"no result for {name!r} within call_timeout={timeout:g} s; the server had accepted it as task "
                f"{task_id}, so the tool ran or is running, and the call is not sent again",
                **context,
            )
        if progress.maybe_ran:
            return CallDeadlineExceededError(
                f"no result for {name!r} within call_timeout={timeout:g} s; the request may have reached the "
                "environment, so the tool may or may not have run, and the call is not sent again",
                **context,
            )
        return DeadlineExceededError(
            f"{name!r} could not be sent within call_timeout={timeout:g} s (it waited for a free connection, "
            "or the server kept asking to wait); the tool did not run",
            **context,
        )

    async def _call(self, session: AsyncSession, name: str, tool_input: Mapping[str, Any]) -> ToolResult:
        """One ``/call`` within ``call_timeout``, published as a ``result`` or ``call_error`` event at its end."""
        __tracebackhide__ = True
        call_number = session._next_call()
        events = session.events
        progress = _CallProgress()
        limit = asyncio.timeout(self.call_timeout)
        try:
            try:
                async with limit:
                    result = await self._call_attempts(session, name, tool_input, call_number, progress)
            except TimeoutError as exc:
                if not limit.expired():
                    raise
                raise self._call_deadline(session.sid, name, progress) from exc
        except (ORSError, httpx2.HTTPError) as exc:
            if events.active:
                events.publish(CallErrorEvent(session_id=session.sid, call=call_number,
                                              task_id=getattr(exc, "task_id", None),
                                              error=describe_error(exc)))  # fmt: skip
            raise
        if events.active:
            events.publish(ResultEvent(session_id=session.sid, call=call_number, task_id=result.task_id, ok=result.ok,
                                       reward=result.reward, finished=result.finished, error=result.error,
                                       reason=result.reason))  # fmt: skip
        return result

    async def _call_attempts(
        self,
        session: AsyncSession,
        name: str,
        tool_input: Mapping[str, Any],
        call_number: int,
        progress: _CallProgress,
    ) -> ToolResult:
        """Send, assemble the stream, resume it with its task_id if it drops (the rules: ``policy.py``)."""
        __tracebackhide__ = True
        sid, path, events = session.sid, f"/{session.environment}/call", session.events
        body: dict[str, Any] = {"name": name, "input": dict(tool_input)}
        attempt = resumes = 0
        starting_since: float | None = None
        while True:
            attempt += 1
            task_id = progress.task_id
            request = self._request(
                "POST", path, body if task_id is None else {**body, "task_id": task_id}, sid, stream=True
            )
            progress.request, progress.assembler = request, None
            if task_id is None:
                progress.maybe_ran = True
            try:
                sent = await self._send(events, request, sid, attempt, stream=True, call=call_number, progress=progress)
            except ConnectionFailedError as exc:
                if exc.before_sending and task_id is None:
                    raise  # it could not connect: the tool did not run
                if task_id is None:
                    raise OutcomeUnknownError(
                        f"the connection failed after sending {name!r} ({describe_error(exc.__cause__ or exc)}); "
                        "the tool may or may not have run, so the call is not sent again",
                        session_id=sid,
                        request=request,
                    ) from exc.__cause__
                resumes = await self._before_resume(events, sid, task_id, request, resumes, exc, attempt, call_number)
                continue
            except DeadlineExceededError as exc:  # the answer did not come within request_timeout
                if task_id is None:
                    raise CallDeadlineExceededError(
                        f"no answer to {name!r} within request_timeout={self.request_timeout:g} s; the tool may or "
                        "may not have run, so the call is not sent again",
                        deadline=self.request_timeout,
                        session_id=sid,
                        request=request,
                    ) from exc
                resumes = await self._before_resume(events, sid, task_id, request, resumes, exc, attempt, call_number)
                continue
            if sent is None:
                continue
            response, tap = sent
            if response.status_code != 200:
                if starting_since is None and is_starting(response):
                    starting_since = time.monotonic()
                if task_id is not None and response.status_code in RETRY_STATUSES:  # re-attaching runs nothing
                    resumes = await self._before_resume(
                        events, sid, task_id, request, resumes, self._error(response, sid, task_id), attempt,
                        call_number, wait=self.retry.pause_after(response, resumes + 1),
                    )  # fmt: skip
                    continue
                wait = self.retry.wait_after(response, attempt, starting_since, first_call=task_id is None)
                if wait is None:
                    if task_id is None and outcome_unknown(response):
                        raise outcome_unknown_error(response, sid, name, request)
                    raise self._error(response, sid, task_id)
                progress.maybe_ran = False  # 429 or "starting": the tool did not run
                if events.active:
                    events.publish(RetryEvent(session_id=sid, attempt=attempt, call=call_number,
                                              reason=str(response.status_code), backoff=wait))  # fmt: skip
                await asyncio.sleep(wait)
                continue
            assembler = progress.assembler = CallAssembler(task_id, max_result_bytes=self.max_result_bytes)
            drop: httpx2.TransportError | None = None
            try:
                result = await self._read_stream(
                    response, BodyReader(tap, assembler, max_line_bytes=self.max_line_bytes)
                )
            except ORSError as exc:
                exc.session_id, exc.request = sid, request
                exc.task_id = exc.task_id or assembler.task_id
                raise
            except httpx2.TransportError as exc:
                if tap is not None:
                    tap.disconnect(exc)
                result, drop = None, exc
            if result is not None:
                return result
            task_id = progress.task_id = assembler.task_id
            if task_id is None:
                raise OutcomeUnknownError(
                    f"the stream for {name!r} ended before its task_id; the tool may or may not have run, "
                    "so the call is not sent again",
                    session_id=sid,
                    request=request,
                ) from drop
            resumes = await self._before_resume(events, sid, task_id, request, resumes, drop, attempt, call_number)

    async def _before_resume(
        self,
        events: EventStream,
        sid: str,
        task_id: str,
        request: httpx2.Request,
        resumes: int,
        cause: BaseException | None,
        attempt: int,
        call_number: int,
        *,
        wait: float | None = None,
    ) -> int:
        """Count one more resume (``ResumeFailedError`` past ``resume_attempts``), and wait before it."""
        __tracebackhide__ = True
        resumes += 1
        if resumes > self.retry.resume_attempts:
            raise ResumeFailedError(
                f"the stream dropped and {self.retry.resume_attempts} resumes with its task_id failed",
                session_id=sid,
                task_id=task_id,
                request=request,
            ) from cause
        if wait is None:
            wait = self.retry.backoff_for(resumes)
        if events.active:
            events.publish(RetryEvent(session_id=sid, attempt=attempt, call=call_number, reason="resume",
                                      task_id=task_id, backoff=wait))  # fmt: skip
        await asyncio.sleep(wait)
        return resumes

    async def _read_stream(self, response: httpx2.Response, reader: BodyReader) -> ToolResult | None:
        """Decode one SSE response through ``reader``; the result, or None if it ended early."""
        __tracebackhide__ = True
        try:
            content_type = response.headers.get("content-type", "")
            if not content_type.startswith("text/event-stream"):
                await response.aread()
                raise MalformedStreamError(f"expected an SSE stream, got {content_type!r}: {response.text[:200]!r}")
            chunks = response.aiter_bytes() if "content-encoding" in response.headers else response.aiter_raw()
            loop = asyncio.get_running_loop()
            heartbeat = self.heartbeat_timeout
            try:
                async with asyncio.timeout(heartbeat) as silence:
                    async for chunk in chunks:
                        if reader.result is None:
                            silence.reschedule(loop.time() + heartbeat)
                            if reader.feed(chunk) is not None:
                                # read on to the end of the body (the server closes it right after
                                # `end`), so the connection goes back to the pool instead of closing
                                silence.reschedule(loop.time() + DRAIN_TIMEOUT)
                        else:
                            reader.feed(chunk)
            except httpx2.TransportError:
                if reader.result is not None:
                    return reader.result  # the body broke after `end`: the result is whole
                raise
            except httpx2.DecodingError as exc:
                raise MalformedStreamError(f"the stream cannot be decoded ({describe_error(exc)})") from exc
            except TimeoutError as exc:
                if reader.result is not None:
                    return reader.result
                raise httpx2.ReadTimeout(
                    f"no bytes for {heartbeat:g} s on a /call stream (pings come every 10 s)", request=response.request
                ) from exc
            return reader.result
        finally:
            await response.aclose()
