"""The live session view: its state from a real session's events, its text, HTML and widget, and the client's use."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

import ors_lab as ol
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import Event, SSEEvent
from ors_lab.notebook.session import SessionView
from ors_lab.viewer.session import OUTPUT_CHARS, SessionState, partial_text
from tests import wire
from tests.envs import common


def watch(client: ol.Client, session: ol.Session, **options: Any) -> SessionState:
    """A SessionState fed by the client's events for ``session`` (subscribed before it opens)."""
    state = SessionState(session.sid, environment=session.environment, split=session.aio.split,
                         index=session.aio.index, **options)  # fmt: skip
    client.events.subscribe(state.apply)
    return state


def test_state_of_a_real_session_has_the_prompt_calls_outputs_and_rewards(reference_server: ServerProcess) -> None:
    """Built from a real session's events: prompt, tools, each call's input, output and reward, the total, closed."""
    ol.live_views("off")
    task = common.LAB_TASKS["train"][0]
    with ol.Client(reference_server.url) as client:
        session = client.environment("lab").session(split="train", index=0)
        state = watch(client, session)
        with session:
            session.prompt()
            session.tools()
            session.call("step", {"value": 1})
            session.call("image")
            session.call("nope", {})
            session.call("submit", {"answer": "4"})
        snap = state.snapshot()
    assert snap["state"] == "closed" and state.done()
    assert snap["prompt"] == [{"type": "text", "text": common.lab_prompt(task), "more": 0}]
    assert snap["tools"] is not None and set(common.LAB_TOOLS) <= set(snap["tools"])
    assert [row["tool"] for row in snap["rows"]] == ["step", "image", "nope", "submit"]
    assert [row["input"] for row in snap["rows"]] == ['{"value": 1}', "{}", "{}", '{"answer": "4"}']
    step, image, nope, submit = snap["rows"]
    assert step["output"] == [{"type": "text", "text": "step 1", "more": 0}] and step["reward"] == 0.1
    assert image["output"][0]["text"] == common.IMAGE_CAPTION
    assert image["output"][1] == {"type": "image", "mime": "image/png", "data": common.PNG_1X1_B64,
                                  "size": len(common.PNG_1X1_B64)}  # fmt: skip
    assert nope["ok"] is False and "nope" in nope["error"]
    assert (submit["reward"], submit["finished"], submit["summary"]) == (1.0, True, "Correct!")
    assert (snap["steps"], snap["total"], snap["last"], snap["finished"]) == (4, 1.1, 1.0, True)
    assert state.text() == "session lab train#0 · 4 steps · total reward 1.1 · last 1 · finished · closed"
    page = state.html()
    for shown in (common.lab_prompt(task), "submit", "Correct!", "closed", session.sid, "image/png"):
        assert shown in page
    assert page.index("total reward") < page.index("Correct!") < page.index(f"session {session.sid}")  # ids last


def test_chunked_output_shows_as_it_arrives_in_order(reference_server: ServerProcess) -> None:
    """A result in several chunks shows its text growing chunk by chunk, each preview a prefix of the whole."""
    ol.live_views("off")
    text = common.tally_big_text(10_000)  # non-ASCII and emoji: chunks are cut in code points, not bytes
    previews: list[tuple[int, str]] = []
    with ol.Client(reference_server.url) as client:
        session = client.environment("lab").session(split="train", index=0)
        state = watch(client, session, output_chars=20_000)

        def after_each_chunk(event: Event) -> None:
            if isinstance(event, SSEEvent) and event.event in ("chunk", "end"):
                row = state.snapshot()["rows"][-1]
                previews.append((row["chunks"], row["output"][0]["text"] if row["output"] else ""))

        client.events.subscribe(after_each_chunk)
        with session:
            session.call("tally_big", {"key": f"view-{session.sid}", "n_chars": 10_000})
    assert [chunks for chunks, _ in previews] == [1, 2, 3]
    assert 0 < len(previews[0][1]) < len(previews[1][1]) < len(previews[2][1]) == len(text)
    assert all(text.startswith(preview) for _, preview in previews)


def test_output_text_on_screen_is_bounded(ors_sdk_server: ServerProcess) -> None:
    """A large output keeps only OUTPUT_CHARS on screen and says how many more there were."""
    ol.live_views("off")
    with ol.Client(ors_sdk_server.url) as client:
        session = client.environment("lab").session(split="train", index=0)
        state = watch(client, session)
        with session:
            session.call("big_output", {"n_chars": 50_000})
    block = state.snapshot()["rows"][0]["output"][0]
    assert (len(block["text"]), block["more"]) == (OUTPUT_CHARS, 50_000 - OUTPUT_CHARS)


def test_older_steps_fold_to_one_line_and_the_oldest_are_only_counted(ors_sdk_server: ServerProcess) -> None:
    """Past FULL_STEPS steps keep one line each, past LISTED_STEPS only the count; the total still sums them all."""
    ol.live_views("off")
    with ol.Client(ors_sdk_server.url) as client:
        session = client.environment("echo").session(split="dev", index=0)
        state = watch(client, session)
        with session:
            for i in range(60):
                session.call("echo", {"text": f"n{i}"})
    snap = state.snapshot()
    assert (snap["steps"], snap["earlier"], len(snap["rows"])) == (60, 10, 50)
    assert snap["total"] == pytest.approx(60 * common.ECHO_REWARD)
    assert [row["full"] for row in snap["rows"]] == [False] * 45 + [True] * 5
    assert snap["rows"][0]["summary"] == "n10" and "output" not in snap["rows"][0]
    assert snap["rows"][-1]["output"] == [{"type": "text", "text": "n59", "more": 0}]
    assert len(json.dumps(snap)) < 20_000


def test_partial_text_reads_a_cut_result() -> None:
    """The streamed preview decodes escapes and drops a cut escape or half a surrogate pair."""
    whole = json.dumps({"ok": True, "output": {"blocks": [{"text": 'a "q"\n😀 é', "type": "text"}]}})
    assert partial_text(whole) == 'a "q"\n😀 é'
    for cut in range(len(whole)):
        assert 'a "q"\n😀 é'.startswith(partial_text(whole[:cut]))


def test_an_expired_session_shows_expired(ors_sdk_server: ServerProcess) -> None:
    """A session the server no longer knows (deleted behind the client's back) shows as expired."""
    ol.live_views("off")
    with ol.Client(ors_sdk_server.url) as client:
        session = client.environment("lab").session(split="train", index=0)
        state = watch(client, session)
        with session:
            wire.delete(ors_sdk_server.url, session.sid)
            with pytest.raises(ol.SessionNotFoundError):
                session.call("step", {"value": 1})
            assert state.state == "expired"
            assert "expired" in state.text() and "Session not" not in state.text()
        assert state.snapshot()["rows"][0]["status"] == "error"


# -- the client's view ------------------------------------------------------------------------------


def test_text_mode_writes_the_session_line_to_stderr(ors_sdk_server: ServerProcess) -> None:
    """In text mode a session writes its line as it opens and its final line as it closes."""
    ol.live_views("text")
    out = io.StringIO()
    with contextlib.redirect_stderr(out), ol.Client(ors_sdk_server.url) as client:
        with client.environment("lab").session(split="test", index=0) as session:
            session.call("submit", {"answer": "15"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "session lab test#0 · 0 steps · total reward - · last - · opening"
    assert lines[-1] == "session lab test#0 · 1 step · total reward 1 · last 1 · finished · closed"
    assert session.view is not None and session.view.updates >= 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_outside_a_kernel_draws_the_line_on_a_terminal_only(ors_sdk_server: ServerProcess) -> None:
    """ "auto" gives a session its line on a terminal, and a log (stderr not a TTY) no line per session."""
    ol.live_views("auto")
    for stream, drawn in ((io.StringIO(), False), (_Terminal(), True)):
        with contextlib.redirect_stderr(stream), ol.Client(ors_sdk_server.url) as client:
            with client.environment("lab").session(split="test", index=0) as session:
                session.call("submit", {"answer": "15"})
        assert (session.view is not None) is drawn
        written = stream.getvalue()
        assert ("total reward 1" in written) is drawn, written
        if drawn:
            assert "\r" in written and written.endswith("closed\n")


async def test_an_async_session_shows_its_view_too(ors_sdk_server: ServerProcess) -> None:
    """AsyncSession starts, updates and closes the same view as the sync Session."""
    ol.live_views("text")
    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        async with ol.AsyncClient(ors_sdk_server.url) as client:
            async with client.environment("lab").session(split="train", index=0) as session:
                await session.prompt()
                await session.call("step", {"value": 3})
    assert session.view is not None and session.view.state.prompt is not None
    assert out.getvalue().splitlines()[-1] == (
        "session lab train#0 · 1 step · total reward 0.3 · last 0.3 · finished · closed"
    )


def test_a_session_that_cannot_open_shows_failed(ors_sdk_server: ServerProcess) -> None:
    """An open the server refuses leaves the view failed, with the server's answer."""
    ol.live_views("text")
    out = io.StringIO()
    with contextlib.redirect_stderr(out), ol.Client(ors_sdk_server.url) as client:
        with pytest.raises(ol.ServerError):
            client.environment("lab").session(split="test", index=99).open()
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("session lab test#99 · 0 steps · total reward - · last - · failed: HTTP ")


def test_off_shows_nothing_and_view_false_opts_out(ors_sdk_server: ServerProcess) -> None:
    """Views off: no view and nothing written; view=False: no view whatever the mode; the client stops listening."""
    out = io.StringIO()
    with contextlib.redirect_stderr(out), ol.Client(ors_sdk_server.url) as client:
        ol.live_views("off")
        with client.environment("lab").session(split="test", index=0) as off:
            off.call("submit", {"answer": "15"})
        ol.live_views("text")
        with client.environment("lab").session(split="test", index=0, view=False) as opted_out:
            assert not client.events.active  # nobody listens: the client builds no events
        with client.environment("lab").session(split="test", index=0) as shown:
            assert client.events.active
        assert not client.events.active  # the view left with its session
    assert off.view is None and opted_out.view is None and shown.view is not None
    assert out.getvalue().count("session lab") == 2


def test_an_evaluation_shows_no_session_views(ors_sdk_server: ServerProcess) -> None:
    """An evaluation's episodes open sessions without views of their own."""
    ol.live_views("text")
    out = io.StringIO()
    with contextlib.redirect_stderr(out), ol.Client(ors_sdk_server.url) as client:
        ol.evaluate(client.environment("echo"), lambda obs: None, split="dev", progress=False)
    assert "session echo" not in out.getvalue()


def test_views_that_fail_never_break_the_session(
    ors_sdk_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A view that cannot be shown, a stream that breaks and a state that raises are logged; the session goes on."""
    caplog.set_level(logging.ERROR, logger="ors_lab")
    with ol.Client(ors_sdk_server.url) as client:
        env = client.environment("lab")
        ol.live_views("widgets")  # outside a kernel: the view cannot be drawn
        with env.session(split="test", index=0) as no_kernel:
            assert no_kernel.call("submit", {"answer": "15"}).reward == 1.0
        assert no_kernel.view is None and "could not be shown" in caplog.text

        ol.live_views("text")
        closed = io.StringIO()
        closed.close()
        with contextlib.redirect_stderr(closed), env.session(split="test", index=0) as dead_stream:
            assert dead_stream.call("submit", {"answer": "15"}).reward == 1.0
        assert dead_stream.view is None

        breaks = io.StringIO()
        with contextlib.redirect_stderr(breaks), env.session(split="test", index=0) as breaking:
            breaks.close()  # the stream goes away while the session is open: the final line cannot be written
            assert breaking.call("submit", {"answer": "15"}).reward == 1.0
        assert breaking.closed and "could not be closed" in caplog.text

        class Exploding(SessionState):
            def apply(self, event: Event) -> bool:
                if event.kind == "result":
                    raise RuntimeError("a broken view")
                return super().apply(event)

        ol.live_views("off")
        first, second = env.session(split="test", index=0), env.session(split="test", index=1)
        broken = SessionView(first, state=Exploding(first.sid), mode="text", text_stream=io.StringIO()).attach()
        healthy = SessionView(second, mode="text", text_stream=io.StringIO()).attach()
        with first, second:
            assert first.call("submit", {"answer": "15"}).reward == 1.0
            assert first.call("step", {"value": 2}).reward == 0.2  # its view is gone; the session works on
            assert second.call("submit", {"answer": "blue"}).reward == 1.0
        broken.close()
        healthy.close()
        assert "a broken view" in caplog.text
        assert broken.state.step_count == 1  # detached at its first result
        assert (healthy.state.state, healthy.state.total_reward) == ("closed", 1.0)


def test_the_throttle_bounds_updates_for_a_session_making_many_calls(ors_sdk_server: ServerProcess) -> None:
    """However many calls a session makes, its widget gets at most about 10 updates a second, the last one whole."""
    ol.live_views("off")
    calls = 500
    with ol.Client(ors_sdk_server.url) as client:
        session = client.environment("echo").session(split="dev", index=0)
        view = SessionView(session, mode="widgets").attach()
        front = view.live.front()
        started = time.monotonic()
        with session:
            for i in range(calls):
                session.call("echo", {"text": f"n{i}"})
        view.close()
        elapsed = time.monotonic() - started
    # one update per 0.1 s begun, the first change at once, and the last state at close
    assert 1 <= view.updates <= elapsed / 0.1 + 3, (view.updates, elapsed)
    assert view.updates < calls  # coalesced: each call is 5 events, and there is less than one update per call
    assert (front.data["steps"], front.data["state"]) == (calls, "closed")


def test_the_widget_front_end_gets_the_session_data(ors_sdk_server: ServerProcess) -> None:
    """The anywidget front end (no kernel: a dummy comm) holds the session renderer, its data and its text."""
    ol.live_views("off")
    with ol.Client(ors_sdk_server.url) as client:
        session = client.environment("lab").session(split="train", index=0)
        view = SessionView(session, mode="widgets").attach()
        front = view.live.front()
        assert front.view == "session" and front.data["state"] == "new"
        with session:
            session.prompt()
            session.call("image")
            session.call("submit", {"answer": "4"})
        view.close()
    assert front.data == view.state.snapshot()
    assert front.text == view.state.text()
    assert [row["tool"] for row in front.data["rows"]] == ["image", "submit"]
    assert front.data["rows"][0]["output"][1]["data"] == common.PNG_1X1_B64
    assert "ORS.views.session" in front._esm


def test_a_session_shows_itself_as_a_static_card_without_a_view(ors_sdk_server: ServerProcess) -> None:
    """With views off, displaying a session gives its card (state, calls, id last), content escaped."""
    ol.live_views("off")
    with ol.Client(ors_sdk_server.url) as client:
        session = client.environment("echo").session(split="dev", index=0)
        session.open()
        session.call("echo", {"text": "<b>bold</b>"})
        bundle = session._repr_mimebundle_()
        assert bundle["text/plain"] == repr(session)
        assert "open" in bundle["text/html"] and session.sid in bundle["text/html"]
        session.close()
    ol.live_views("text")
    out = io.StringIO()
    with contextlib.redirect_stderr(out), ol.Client(ors_sdk_server.url) as client:
        with client.environment("echo").session(split="dev", index=0) as shown:
            shown.call("echo", {"text": "<b>bold</b>"})
    page = shown._repr_html_()
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page
    assert page.index("total reward") < page.index(f"session {shown.sid}")


KERNEL_CELLS = [
    """
import ors_lab as ol
client = ol.Client({url!r})
session = client.environment("lab").session(split="train", index=0)
session.open()
""",
    """
session.call("step", {{"value": 1}})
session
""",
    """
session.close()
client.close()
print(session.view.state.text())
""",
]


def test_in_a_kernel_the_session_shows_one_widget_updated_in_place(ors_sdk_server: ServerProcess) -> None:
    """In a kernel: the opening cell shows the widget, displaying the session shows it again, close updates it."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source.format(url=ors_sdk_server.url)) for source in KERNEL_CELLS]
    NotebookClient(nb, kernel_name="python3", timeout=60).execute()
    opened, shown, closed = (cell.outputs for cell in nb.cells)
    widget = "application/vnd.jupyter.widget-view+json"
    assert [output.output_type for output in opened] == ["display_data", "display_data"]  # the widget, its twin
    model = opened[0].data[widget]["model_id"]
    assert shown[0].data[widget]["model_id"] == model  # the same widget model, shown again
    assert "step 1" in shown[1].data["text/html"]
    # nbclient applied the close's update to the opening cell's outputs: the saved notebook holds the final state
    assert opened[0].data["text/plain"] == "session lab train#0 · 1 step · total reward 0.1 · last 0.1 · closed"
    assert "closed" in opened[1].data["text/html"] and set(opened[1].data) == {"text/html"}
    assert closed == [nbformat.v4.new_output("stream", name="stdout", text=opened[0].data["text/plain"] + "\n")]
    state = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"][model]["state"]
    assert state["view"] == "session" and state["data"]["steps"] == 1
