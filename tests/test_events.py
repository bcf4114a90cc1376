"""The typed events and the stream they flow through: delivery, isolation of subscribers, the seed's vocabulary."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

import pytest

import ors_lab as ol
from ors_lab import events as ev
from ors_lab.client import ExchangeTap
from ors_lab.events import EVENT_TYPES, EventStream, PingEvent, TextDeltaEvent

SEED_TYPES = {
    "start", "finish", "error", "text-start", "text-delta", "text-end", "reasoning-start", "reasoning-delta",
    "reasoning-end", "tool-input-start", "tool-input-delta", "tool-input-end", "tool-input-available",
    "tool-output-available", "tool-output-error", "block-start", "block-end",
}  # fmt: skip
"""The event types of the agent stream seed (shared/seeds/002_8c40b4a8ee4e905d.txt) that an agent run has."""


def ping(n: int) -> PingEvent:
    return PingEvent(session_id=f"s{n}")


def test_every_trace_kind_has_one_event_type() -> None:
    """One event type per kind: the wire and session kinds, the seed's agent vocabulary, and ours."""
    assert set(ev.AGENT_KINDS) == SEED_TYPES | {"reward", "usage", "episode", "baseline"}
    assert set(EVENT_TYPES) - set(ev.AGENT_KINDS) == {
        "request", "response", "chunk", "disconnect", "retry", "event", "comment", "result", "call_error", "open",
        "ping", "close",
    }  # fmt: skip
    assert all(cls.kind == kind for kind, cls in EVENT_TYPES.items())
    assert all(name in ev.__all__ for name in (cls.__name__ for cls in EVENT_TYPES.values()))


@pytest.mark.parametrize(
    ("event", "wire"),
    [
        (ev.StartEvent(message_id="m"), {"type": "start", "messageId": "m"}),
        (ev.TextDeltaEvent(id="text-1", delta="Hi"), {"type": "text-delta", "id": "text-1", "delta": "Hi"}),
        (ev.ReasoningEndEvent(id="r"), {"type": "reasoning-end", "id": "r"}),
        (ev.ToolInputStartEvent(tool_call_id="c", tool_name="t"), {"type": "tool-input-start", "toolCallId": "c",
                                                                   "toolName": "t"}),
        (ev.ToolInputDeltaEvent(tool_call_id="c", input_text_delta='{"a'), {"type": "tool-input-delta",
                                                                             "toolCallId": "c",
                                                                             "inputTextDelta": '{"a'}),
        (ev.ToolInputAvailableEvent(tool_call_id="c", tool_name="t", input={"a": 1}),
         {"type": "tool-input-available", "toolCallId": "c", "toolName": "t", "input": {"a": 1}}),
        (ev.ToolOutputErrorEvent(tool_call_id="c", error="no"), {"type": "tool-output-error", "toolCallId": "c",
                                                                 "error": "no"}),
        (ev.FinishEvent(finish_reason="length"), {"type": "finish", "finishReason": "length"}),
        (ev.ErrorEvent(error_type="rate_limit_error", message="slow down", source="provider", retryable=True,
                       retry_after=60.0, code="RateLimitError"),
         {"type": "error", "errorType": "rate_limit_error", "message": "slow down", "source": "provider",
          "retryable": True, "retryAfter": 60.0, "code": "RateLimitError"}),
        (ev.BlockStartEvent(block_id="b", block_name="turn 1"), {"type": "block-start", "blockId": "b",
                                                                 "blockName": "turn 1", "blockType": "turn",
                                                                 "display": "stream", "thread": "main"}),
        (ev.BlockEndEvent(block_id="b", summary="done"), {"type": "block-end", "blockId": "b", "summary": "done"}),
        (ev.UsageEvent(input_tokens=3, output_tokens=2, scope="episode"),
         {"type": "usage", "inputTokens": 3, "outputTokens": 2, "reasoningTokens": None, "cachedInputTokens": None,
          "scope": "episode"}),
    ],
    ids=lambda value: getattr(value, "kind", ""),
)  # fmt: skip
def test_agent_events_are_the_seeds_json(event: ev.AgentEvent, wire: dict[str, Any]) -> None:
    """`to_wire()` gives the event as the seed writes it: its type and camel-case fields; `to_json()` its JSON text."""
    assert event.to_wire() == wire
    assert event.type == event.kind == wire["type"] and event.layer == "agent"
    assert event.to_json() == ev.compact_json(wire)


TRICKY = ['quote " and \\ backslash', "line\nbreak\ttab", "café ü € 😀", "", "\u2028 and \x00"]


@pytest.mark.parametrize("text", TRICKY)
def test_the_fast_json_of_every_event_is_the_encoders(text: str) -> None:
    """Every agent event's `to_json()` is exactly `compact_json(to_wire())`, whatever its strings and numbers hold."""
    made = [
        ev.StartEvent(message_id=text), ev.BlockStartEvent(block_id=text, block_name=text, block_type=text),
        ev.BlockEndEvent(block_id=text), ev.BlockEndEvent(block_id="b", summary=text), ev.TextStartEvent(id=text),
        ev.TextDeltaEvent(id=text, delta=text), ev.ReasoningDeltaEvent(id="r", delta=text),
        ev.ToolInputStartEvent(tool_call_id=text, tool_name=text, title=text),
        ev.ToolInputDeltaEvent(tool_call_id=text, input_text_delta=text), ev.ToolInputEndEvent(tool_call_id=text),
        ev.ToolInputAvailableEvent(tool_call_id=text, tool_name=text, input={text: [text, 1.5, None]}),
        ev.RewardEvent(tool_call_id=text, reward=0.1, finished=True), ev.RewardEvent(tool_call_id="c", reward=1,
                                                                                    finished=False),
        ev.RewardEvent(tool_call_id="c", reward=float("nan"), finished=False), ev.FinishEvent(finish_reason=text),
        ev.ToolOutputAvailableEvent(tool_call_id=text, output={"text": text}), ev.UsageEvent(model=text),
    ]  # fmt: skip
    for event in made:
        assert event.to_json() == ev.compact_json(event.to_wire()), event


def test_error_types_are_the_seeds() -> None:
    """The seed's error types and sources are the ones ors_lab uses."""
    assert ev.ERROR_TYPES == ("rate_limit_error", "authentication_error", "provider_error", "provider_overloaded",
                              "tool_error", "internal_error")  # fmt: skip
    assert ev.ERROR_SOURCES == ("platform", "provider", "tool")


def test_an_event_knows_when_it_happened() -> None:
    """Events are stamped with the monotonic clock when made; wall_time gives every subscriber the same wall clock."""
    before = time.monotonic_ns()
    event = ping(0)
    assert before <= event.t_ns <= time.monotonic_ns()
    assert abs(ev.wall_time(event.t_ns) - time.time()) < 0.05
    assert ev.RequestEvent(method="GET", url="u", agent=True).layer == "agent"
    assert ev.SSEEvent(event="end", data="").layer == "sse" and ev.ChunkEvent(size=1).layer == "http"


def test_subscribers_see_events_in_order_then_the_parent_stream() -> None:
    """Inline subscribers get each event in subscription order; the parent's subscribers get it after them."""
    parent = EventStream()
    child = EventStream(parent=parent)
    seen: list[tuple[str, str]] = []
    parent.subscribe(lambda e: seen.append(("parent", e.session_id)))
    child.subscribe(lambda e: seen.append(("first", e.session_id)))
    child.subscribe(lambda e: seen.append(("second", e.session_id)))
    child.publish(ping(1))
    parent.publish(ping(2))
    assert seen == [("first", "s1"), ("second", "s1"), ("parent", "s1"), ("parent", "s2")]
    assert child.active and parent.active and not EventStream().active


async def test_a_captured_block_routes_what_is_meant_for_the_streams_its_stream_forwards_to() -> None:
    """In `with run.capture():` (and in the tasks it starts), a stream that `run` forwards to routes to `run`;
    other streams, and the same stream outside the block or in another task's capture, stay as they are."""
    client, other = EventStream(), EventStream()
    run = EventStream(parent=EventStream(parent=client))  # forwards to client, through a stream between
    sibling = EventStream(parent=client)
    assert client.routed() is client
    with run.capture():
        assert client.routed() is run and run.routed() is run and run.parent.routed() is run  # type: ignore[union-attr]
        assert other.routed() is other and sibling.routed() is sibling
        assert await asyncio.create_task(_routed(client)) is run

        async def elsewhere() -> EventStream:
            with sibling.capture():
                return client.routed()

        assert await asyncio.create_task(elsewhere()) is sibling
        assert client.routed() is run
    assert client.routed() is client


async def _routed(stream: EventStream) -> EventStream:
    return stream.routed()


def test_subscribers_come_and_go_while_events_flow() -> None:
    """A subscriber added mid-stream sees only what follows; a closed one sees nothing more; kinds filter."""
    stream = EventStream()
    early: list[Any] = []
    late: list[Any] = []
    texts: list[Any] = []
    first = stream.subscribe(early.append)
    stream.subscribe(texts.append, kinds=["text-delta"])
    stream.publish(ping(1))
    second = stream.subscribe(late.append)
    stream.publish(TextDeltaEvent(id="t", delta="x"))
    first.close()
    first.close()  # twice is fine
    stream.publish(ping(3))
    assert [e.kind for e in early] == ["ping", "text-delta"]
    assert [e.kind for e in late] == ["text-delta", "ping"]
    assert [e.delta for e in texts] == ["x"]
    with second:
        pass
    assert not second.wants(ping(0)) or second.closed
    with pytest.raises(ValueError, match="unknown event kinds \\['pong'\\]"):
        stream.subscribe(print, kinds=["pong"])


def test_a_raising_subscriber_is_detached_and_breaks_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A subscriber that raises is detached, its error kept and logged; the publisher and the others go on."""
    stream = EventStream()
    before: list[Any] = []
    after: list[Any] = []
    stream.subscribe(before.append)

    def broken(event: Any) -> None:
        raise RuntimeError("widget bug")

    bad = stream.subscribe(broken)
    stream.subscribe(after.append)
    with caplog.at_level(logging.ERROR, logger="ors_lab.events"):
        stream.publish(ping(1))
        stream.publish(ping(2))
    assert len(before) == len(after) == 2
    assert isinstance(bad.error, RuntimeError) and bad.closed
    assert [r.message for r in caplog.records] == [f"ors_lab: event subscriber {broken!r} raised and was detached"]


def test_a_required_subscribers_failure_is_the_publishers() -> None:
    """A required subscriber that raises stays attached; the others still get the event; publish raises, naming it."""
    stream = EventStream()
    seen: list[Any] = []

    def picky(event: Any) -> None:
        if event.kind == "text-delta":
            raise ValueError("no room for it")
        seen.append(event.kind)

    required = stream.subscribe(picky, required=True)
    after: list[Any] = []
    stream.subscribe(after.append)
    with pytest.raises(ol.EventNotRecordedError, match=r"the text-delta event .* could not be taken by") as caught:
        stream.publish(TextDeltaEvent(session_id="s1", id="t", delta="x"))
    assert (caught.value.kind, caught.value.session_id) == ("text-delta", "s1")
    assert isinstance(caught.value.__cause__, ValueError) and "no room for it" in str(caught.value)
    stream.publish(ping(1))
    assert seen == ["ping"] and [e.kind for e in after] == ["text-delta", "ping"]
    assert not required.closed and required.error is None
    with pytest.raises(ValueError, match="inline"):
        stream.subscribe(picky, required=True, buffer=10)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: TextDeltaEvent(id="t", delta=[{"type": "thinking", "thinking": []}]), "TextDeltaEvent.delta"),
        (lambda: ev.ReasoningDeltaEvent(id=1, delta="x"), "ReasoningDeltaEvent.id"),
        (lambda: ev.ToolInputDeltaEvent(tool_call_id="c", input_text_delta={"a": 1}), "input_text_delta"),
        (lambda: ev.ToolInputStartEvent(tool_call_id="c", tool_name=None), "tool_name"),
        (lambda: ev.ErrorEvent(error_type="provider_error", message=None, source="provider"), "message"),
        (lambda: ev.FinishEvent(finish_reason=3), "finish_reason"),
    ],
)
def test_agent_events_check_their_text_when_made(make: Any, field: str) -> None:
    """An agent event given a non-text value where text belongs fails where it is made, not in a subscriber."""
    with pytest.raises(TypeError, match=f"{field} must be a str"):
        make()


def test_a_slow_buffered_subscriber_never_slows_the_publisher() -> None:
    """A buffered subscriber that takes 20 ms an event: 10,000 events publish at once; it gets the newest in order
    and counts what it dropped."""
    stream = EventStream()
    got: list[int] = []
    release = threading.Event()

    def slow(event: Any) -> None:
        release.wait(5)
        got.append(int(event.session_id[1:]))
        time.sleep(0.02)

    subscription = stream.subscribe(slow, buffer=100)
    started = time.monotonic()
    for n in range(10_000):
        stream.publish(ping(n))
    elapsed = time.monotonic() - started
    release.set()
    assert subscription.flush(timeout=10)
    assert elapsed < 1.0  # 10,000 appends, not 10,000 x 20 ms
    assert subscription.dropped >= 10_000 - 101
    assert got == sorted(got) and got[-1] == 9_999 and len(got) + subscription.dropped == 10_000
    subscription.close()


def test_a_buffered_subscriber_can_take_batches_and_may_raise() -> None:
    """every=S hands lists of events at most every S seconds; a buffered subscriber that raises is detached."""
    stream = EventStream()
    batches: list[list[Any]] = []
    batched = stream.subscribe(batches.append, every=0.05)
    failing = stream.subscribe(lambda e: 1 / 0, buffer=10)
    for n in range(50):
        stream.publish(ping(n))
    assert batched.flush(timeout=5)
    assert not failing.flush(timeout=5)  # detached: what it had not taken never will be
    assert sum(len(b) for b in batches) == 50 and len(batches) < 50
    assert [e.session_id for b in batches for e in b] == [f"s{n}" for n in range(50)]
    assert isinstance(failing.error, ZeroDivisionError) and failing.closed
    batched.close()
    with pytest.raises(ValueError, match="every is in seconds"):
        stream.subscribe(print, every=0)


def test_subscribing_while_another_thread_publishes() -> None:
    """Subscribers added and removed from one thread while another publishes: every event reaches those present."""
    stream = EventStream()
    steady: list[Any] = []
    stream.subscribe(steady.append)
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            stream.subscribe(lambda e: None).close()

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for n in range(20_000):
            stream.publish(ping(n))
    finally:
        stop.set()
        thread.join()
    assert len(steady) == 20_000


def test_agent_events_come_back_from_their_wire_form() -> None:
    """`agent_event` is `to_wire()` backwards (an episode's: its `record()`), given what the wire leaves out."""
    made: list[ev.AgentEvent] = [
        ev.StartEvent(session_id="s", rollout=1, message_id="s", environment="lab", split="train", task_index=2),
        ev.BlockStartEvent(session_id="s", rollout=1, block_id="b", block_name="turn 1"),
        ev.BlockEndEvent(session_id="s", block_id="b", summary="done"), ev.TextStartEvent(session_id="s", id="t"),
        ev.TextDeltaEvent(session_id="s", id="t", delta="Hi"), ev.TextEndEvent(id="t"),
        ev.ReasoningStartEvent(id="r"), ev.ReasoningDeltaEvent(id="r", delta="hmm"), ev.ReasoningEndEvent(id="r"),
        ev.ToolInputStartEvent(tool_call_id="c", tool_name="submit", title="Submit"),
        ev.ToolInputDeltaEvent(tool_call_id="c", input_text_delta='{"a'), ev.ToolInputEndEvent(tool_call_id="c"),
        ev.ToolInputAvailableEvent(tool_call_id="c", tool_name="submit", input={"answer": "4"}),
        ev.ToolOutputAvailableEvent(tool_call_id="c", output={"text": "ok"}, tool="submit", call=3),
        ev.ToolOutputErrorEvent(tool_call_id="c", error="no", reason="invalid", tool="submit", call=3),
        ev.RewardEvent(session_id="s", tool_call_id="c", reward=0.5, finished=True, tool="submit", call=3),
        ev.UsageEvent(input_tokens=3, output_tokens=2, reasoning_tokens=1, cached_tokens=2, model="m"),
        ev.FinishEvent(finish_reason="length"),
        ev.ErrorEvent(error_type="rate_limit_error", message="slow down", source="provider", retryable=True,
                      retry_after=60.0, code="RateLimitError", tool="submit", call=3),
        ev.EpisodeEvent(session_id="s", rollout=1, environment="lab", split="train", task_index=2, reward=1.0,
                        total_reward=1.0, final_reward=1.0, finished=True, success=True, finish_reason="stop",
                        steps=2, started=1.5, duration_s=0.25, input_tokens=7, agent="DemoAgent"),
    ]  # fmt: skip
    for event in made:
        wire = event.record() if isinstance(event, ev.EpisodeEvent) else json.loads(event.to_json())
        context = {name: getattr(event, name, None) for name in ("session_id", "rollout", "t_ns", "tool", "call",
                                                                 "environment", "split", "task_index")}  # fmt: skip
        back = ev.agent_event(event.kind, wire, **context)
        assert back == event and back.t_ns == event.t_ns, (back, event)
    assert ev.agent_event("text-delta", {"id": "t", "delta": "x", "extra": 1}, nothing=2) == ev.TextDeltaEvent(
        id="t", delta="x"
    )  # what the event does not have is ignored
    with pytest.raises(ValueError, match="not an agent event kind: 'ping'; the agent kinds: start, "):
        ev.agent_event("ping", {})
    with pytest.raises(TypeError):
        ev.agent_event("text-delta", {"id": "t"})  # no delta


def test_full_wire_carries_every_field_and_comes_back() -> None:
    """`full_wire` is `to_wire()` plus what it leaves out, in camel case (any kind); `event_from_wire` reads it back."""
    made: list[ev.Event] = [
        ev.StartEvent(session_id="s", rollout=1, message_id="s", environment="lab", split="train", task_index=2),
        ev.ReasoningDeltaEvent(session_id="s", rollout=0, id="r", delta="hmm"),
        ev.UsageEvent(session_id="s", input_tokens=3, output_tokens=2, cached_tokens=2, model="m"),
        ev.ToolOutputAvailableEvent(session_id="s", tool_call_id="c", output={"text": "ok"}, tool="submit",
                                    input={"answer": "4"}, call=3),
        ev.ResultEvent(session_id="s", call=3, task_id=None, ok=True, reward=0.5, finished=True),
        ev.EpisodeEvent(session_id="s", rollout=1, environment="lab", split="train", task_index=2, reward=1.0,
                        total_reward=1.0, final_reward=1.0, finished=True, success=True, finish_reason="stop",
                        steps=2, started=1.5, duration_s=0.25, cached_tokens=4, agent="DemoAgent"),
    ]  # fmt: skip
    for event in made:
        wire = json.loads(ev.strict_json(ev.full_wire(event)))
        assert wire["type"] == event.kind and wire["sessionId"] == "s"
        assert ev.event_from_wire(event.kind, wire) == event, event
    assert ev.full_wire(made[0]) == {"type": "start", "messageId": "s", "sessionId": "s", "rollout": 1,
                                     "environment": "lab", "split": "train", "taskIndex": 2}  # fmt: skip
    assert "cachedTokens" not in ev.full_wire(made[2])  # the seed names it cachedInputTokens already
    assert ev.full_wire(made[4])["taskId"] is None  # a field the event needs is sent even when None
    with pytest.raises(ValueError, match="not an event kind: 'nope'"):
        ev.event_from_wire("nope", {})


def test_strict_json_is_json_any_parser_reads() -> None:
    """`strict_json` is `compact_json`, but NaN and infinities are null (a browser's JSON.parse refuses them)."""
    value = {"a": float("nan"), "b": [float("inf"), 1.5], "c": "é\n"}
    assert ev.strict_json(value) == '{"a":null,"b":[null,1.5],"c":"é\\n"}'
    assert ev.strict_json({"a": 1}) == ev.compact_json({"a": 1})


def test_a_stream_says_which_kinds_anyone_takes() -> None:
    """`wanted()` is the kinds its subscribers and its parents' take (None once one takes every kind), kept only until
    a subscription is made or closed anywhere; a tap asks it, so it builds only the events someone takes."""
    parent = EventStream()
    child = EventStream(parent=parent)
    assert child.wanted() == frozenset()
    first = child.subscribe(lambda event: None, kinds=["request"])
    second = parent.subscribe(lambda event: None, kinds=["result", "request"])
    assert child.wanted() == {"request", "result"} and parent.wanted() == {"request", "result"}
    tap = ExchangeTap(child)
    assert tap.takes("request") and not tap.takes("response") and not tap.takes("chunk")
    everything = parent.subscribe(lambda event: None)
    assert child.wanted() is None and ExchangeTap(child).takes("chunk")
    everything.close()
    second.close()
    assert child.wanted() == {"request"}
    first.close()
    assert child.wanted() == frozenset()
