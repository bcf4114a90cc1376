"""The notebook layer's core without a browser: the throttle, the switch, a view drawn as text, the HTML pieces.

A view in a real kernel (widget updates on the wire) is tested in ``test_kernel_messages.py``.
"""

from __future__ import annotations

import asyncio
import io
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import ors_lab as ol
from ors_lab import display, html
from ors_lab.events import EventStream, TextDeltaEvent, TextStartEvent
from ors_lab.notebook import ENV_VAR, MODES, LiveView, Throttle, ViewState, hosts, live_views, resolve, settings
from ors_lab.notebook.view import WIDGET_MIME
from ors_lab.notebook.widget import make_front
from ors_lab.protocol.models import TextBlock, ToolResult
from ors_lab.viewer.page import PAGES, VIEWS, esm, page_esm

# -- the throttle --------------------------------------------------------------------------------


class Sink:
    """What a throttle sent: the value of a counter at each send, and when."""

    def __init__(self) -> None:
        self.value = 0
        self.sent: list[int] = []
        self.times: list[float] = []
        self.threads: set[int] = set()

    def send(self) -> None:
        self.sent.append(self.value)
        self.times.append(time.monotonic())
        self.threads.add(threading.get_ident())


def most_sends(seconds: float, interval: float) -> int:
    """The most sends a throttle may make for touches over ``seconds``: one per interval, plus the trailing one."""
    return math.floor(seconds / interval) + 2


def test_many_touches_send_once_per_interval_without_a_loop() -> None:
    """Touches for 0.5 s from plain code: at most one send per interval, the last state sent by the timer."""
    sink, interval = Sink(), 0.05
    throttle = Throttle(sink.send, interval=interval)
    started = time.monotonic()
    while time.monotonic() - started < 0.5:
        sink.value += 1
        throttle.touch()
    touched = time.monotonic() - started
    time.sleep(3 * interval)
    assert 5 <= len(sink.sent) <= most_sends(touched, interval)
    assert sink.sent[-1] == sink.value  # the trailing flush
    assert all(b - a >= interval * 0.99 for a, b in zip(sink.times, sink.times[1:], strict=False))
    assert throttle.sent == len(sink.sent)


async def test_many_touches_send_once_per_interval_on_a_running_loop() -> None:
    """Touches from a coroutine: the trailing send runs on the loop's thread, and the last state arrives."""
    sink, interval = Sink(), 0.05
    throttle = Throttle(sink.send, interval=interval)
    started = time.monotonic()
    while time.monotonic() - started < 0.5:
        sink.value += 1
        throttle.touch()
        await asyncio.sleep(0.001)
    touched = time.monotonic() - started
    await asyncio.sleep(3 * interval)
    assert 5 <= len(sink.sent) <= most_sends(touched, interval)
    assert sink.sent[-1] == sink.value
    assert sink.threads == {threading.get_ident()}


@pytest.mark.parametrize("on_loop", [False, True], ids=["thread", "loop"])
def test_a_held_change_is_sent_by_the_trailing_timer(on_loop: bool) -> None:
    """The first touch sends at once; one within the interval is held, then sent with no further touch."""
    sink, interval = Sink(), 0.1
    throttle = Throttle(sink.send, interval=interval)

    def touch_twice() -> None:
        sink.value = 1
        throttle.touch()
        sink.value = 2
        throttle.touch()
        assert sink.sent == [1]

    if on_loop:

        async def main() -> None:
            touch_twice()
            await asyncio.sleep(2 * interval)

        asyncio.run(main())
    else:
        touch_twice()
        time.sleep(2 * interval)
    assert sink.sent == [1, 2]
    assert sink.times[1] - sink.times[0] >= interval * 0.99


def test_close_sends_what_is_held_and_ignores_later_touches() -> None:
    """close() flushes the held change at once; touches after it and the pending timer send nothing."""
    sink, interval = Sink(), 0.1
    throttle = Throttle(sink.send, interval=interval)
    sink.value = 1
    throttle.touch()
    sink.value = 2
    throttle.touch()
    throttle.close()
    assert sink.sent == [1, 2]
    sink.value = 3
    throttle.touch()
    time.sleep(2 * interval)
    assert sink.sent == [1, 2]
    throttle.close()
    assert sink.sent == [1, 2]


def test_a_flush_with_nothing_held_sends_nothing() -> None:
    """flush() sends only a change not yet sent."""
    sink = Sink()
    throttle = Throttle(sink.send, interval=0.1)
    throttle.flush()
    throttle.touch()
    throttle.flush()
    assert sink.sent == [0]


def test_a_negative_interval_is_refused() -> None:
    """A negative interval is a ValueError naming it."""
    with pytest.raises(ValueError, match="interval must be >= 0"):
        Throttle(lambda: None, interval=-1)


# -- the switch ----------------------------------------------------------------------------------


@pytest.fixture
def switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live views switch unset (no mode set, no environment variable), restored afterwards."""
    monkeypatch.setattr(settings, "_mode", None)
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.mark.usefixtures("switch")
def test_the_switch_sets_and_returns_the_mode() -> None:
    """live_views(mode) sets the mode for the process; live_views() returns it; the default is auto."""
    assert live_views() == "auto"
    for mode in MODES:
        assert live_views(mode) == mode
        assert live_views() == mode


@pytest.mark.usefixtures("switch")
@pytest.mark.parametrize(("value", "mode"), [("text", "text"), (" Off ", "off"), ("WIDGETS", "widgets"), ("", "auto")])
def test_the_environment_variable_sets_the_default(monkeypatch: pytest.MonkeyPatch, value: str, mode: str) -> None:
    """ORS_LAB_VIEWS sets the mode (case and spaces ignored, empty is auto) until live_views() sets one."""
    monkeypatch.setenv(ENV_VAR, value)
    assert live_views() == mode
    assert live_views("off") == "off"
    assert live_views() == "off"


@pytest.mark.usefixtures("switch")
def test_a_bad_mode_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown mode, given or in the environment, is a ValueError listing the valid ones and its source."""
    with pytest.raises(ValueError, match=r"live_views: .*auto, widgets, text, off.*'fancy'"):
        live_views("fancy")  # type: ignore[arg-type]
    assert live_views() == "auto"  # unchanged
    monkeypatch.setenv(ENV_VAR, "loud")
    with pytest.raises(ValueError, match=rf"{ENV_VAR}: .*auto, widgets, text, off.*'loud'"):
        live_views()


@pytest.mark.usefixtures("switch")
def test_outside_a_kernel_views_are_text() -> None:
    """In plain Python, auto resolves to text, text and off stay, and widgets is an error saying what to do."""
    assert not settings.in_kernel()
    assert resolve() == "text"
    live_views("text")
    assert resolve() == "text"
    live_views("off")
    assert resolve() == "off"
    live_views("widgets")
    with pytest.raises(
        RuntimeError,
        match=rf"'widgets' but this is not a Jupyter kernel nor a marimo notebook; use 'auto' or 'text' \({ENV_VAR}\)",
    ):
        resolve()


def test_ipython_in_a_terminal_is_not_a_kernel(tmp_path: Path) -> None:
    """A fresh interpreter is not a kernel, with IPython imported or an IPython shell running."""
    code = (
        "from ors_lab.notebook.settings import in_kernel, resolve\n"
        "print(in_kernel(), resolve())\n"
        "import IPython\n"
        "print(in_kernel())\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "InteractiveShell.instance()\n"
        "print(in_kernel(), resolve())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "IPYTHONDIR": str(tmp_path)},
    )  # fmt: skip
    assert done.stdout.split() == ["False", "text", "False", "False", "text"]


# -- a view drawn as text ------------------------------------------------------------------------


class Count(ViewState):
    """Counts text deltas: the smallest view state there is."""

    name = "count"
    kinds = ("text-delta",)

    def __init__(self) -> None:
        self.n = 0

    def apply(self, event: Any) -> bool:
        self.n += 1
        return True

    def snapshot(self) -> dict[str, Any]:
        return {"n": self.n}

    def text(self) -> str:
        return f"{self.n} events"

    def html(self) -> str:
        return f"<b>{self.n} events</b>"


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def feed(view: LiveView, seconds: float) -> tuple[EventStream, float]:
    """Attach ``view`` to a stream and publish text deltas (and other events) on it for about ``seconds``."""
    stream = EventStream()
    view.attach(stream)
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        stream.publish(TextDeltaEvent(id="t", delta="x"))
        stream.publish(TextStartEvent(id="t"))  # not a kind the view takes
        time.sleep(0.0005)
    return stream, time.monotonic() - started


def test_on_a_terminal_one_line_is_rewritten() -> None:
    """On a TTY the view rewrites one line with \\r (at most about 10 a second) and ends it at close()."""
    terminal = Terminal()
    view = LiveView(Count(), mode="text", text_stream=terminal).show()
    _, seconds = feed(view, 0.45)
    view.close()
    out = terminal.getvalue()
    assert out.endswith("\n") and out.count("\n") == 1 and out.startswith("\r")
    shown = [segment.rstrip() for segment in out[:-1].split("\r")[1:]]
    counts = [int(re.fullmatch(r"(\d+) events", text).group(1)) for text in shown]  # type: ignore[union-attr]
    assert counts[0] == 0 and counts[-1] == view.state.n > 100  # type: ignore[attr-defined]
    assert counts == sorted(counts)
    assert 3 <= len(shown) <= math.floor(seconds / 0.1) + 3  # show, the updates, close


def test_in_a_log_lines_come_periodically() -> None:
    """Not on a TTY: a line at show(), one every text_interval seconds, the final one at close(); no \\r."""
    log = io.StringIO()
    view = LiveView(Count(), mode="text", text_stream=log, text_interval=0.15).show()
    _, seconds = feed(view, 0.5)
    view.close()
    out = log.getvalue()
    assert "\r" not in out and out.endswith("\n")
    lines = out.splitlines()
    assert lines[0] == "0 events" and lines[-1] == f"{view.state.n} events"  # type: ignore[attr-defined]
    assert 3 <= len(lines) <= math.floor(seconds / 0.15) + 2


def test_off_writes_nothing() -> None:
    """Mode off: the view keeps its state but shows nothing, live or at close()."""
    log = Terminal()
    view = LiveView(Count(), mode="off", text_stream=log).show()
    feed(view, 0.05)
    view.close()
    assert log.getvalue() == ""
    assert view.state.n > 0  # type: ignore[attr-defined]


def test_close_is_idempotent_and_detaches() -> None:
    """A second close() writes nothing more; events after close() no longer reach the state."""
    log = io.StringIO()
    view = LiveView(Count(), mode="text", text_stream=log).show()
    stream, _ = feed(view, 0.01)
    view.close()
    written, n = log.getvalue(), view.state.n  # type: ignore[attr-defined]
    view.close()
    stream.publish(TextDeltaEvent(id="t", delta="x"))
    assert log.getvalue() == written and view.state.n == n  # type: ignore[attr-defined]
    assert view.closed


@pytest.mark.usefixtures("switch")
@pytest.mark.parametrize("mode", ["auto", "text", "off"])
def test_outside_a_kernel_a_view_shows_its_text_and_html(mode: str) -> None:
    """Displayed outside a kernel, a view gives its text and its static HTML, and no widget."""
    live_views(mode)  # type: ignore[arg-type]
    view = LiveView(Count(), mode="off")
    feed(view, 0.01)
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert bundle["text/plain"] == repr(view) == f"{view.state.n} events"  # type: ignore[attr-defined]
    assert bundle["text/html"] == f"<b>{view.state.n} events</b>"  # type: ignore[attr-defined]
    assert WIDGET_MIME not in bundle


@pytest.mark.usefixtures("switch")
def test_outside_a_kernel_or_marimo_there_is_no_host() -> None:
    """Plain Python with marimo imported is no marimo notebook: no host draws widgets, views are text."""
    import marimo  # as a marimo notebook imports it; no notebook runs this code

    assert marimo.running_in_notebook() is False
    assert not settings.in_marimo() and hosts.current() is None and resolve() == "text"


@pytest.mark.usefixtures("switch")
def test_what_a_notebook_shows_is_plain_str() -> None:
    """A trace's and a tool result's bundles hold plain ``str`` (marimo's encoder turns a ``Markup`` into ``{}``), and a
    trace answers marimo's ``_display_`` with its bundle."""
    trace = ol.load_trace(Path(__file__).resolve().parents[2] / "recordings" / "demo.parquet")
    result = ToolResult(ok=True, blocks=(TextBlock("16"),), reward=1.0, finished=True)
    for bundle in (trace._repr_mimebundle_(), result._repr_mimebundle_()):
        assert {type(value) for value in bundle.values()} == {str}, bundle
    shown = trace._display_()
    assert isinstance(shown, display.Shown) and shown._repr_mimebundle_() == trace._repr_mimebundle_()


# -- the widget --------------------------------------------------------------------------------


def test_the_front_end_is_one_module_with_every_renderer() -> None:
    """The ES module is common.js, each view's file, then main.js (whose default export renders)."""
    module = esm()
    assert module.startswith("// ors_lab front end, part 1")
    assert module.count("export default") == 1 and module.rstrip().endswith("export default { render };")
    positions = [module.index(f"ORS.views.{name}") if f"ORS.views.{name}" in module else -1 for name in VIEWS]
    assert module.index("const ORS") < module.index("function render(")
    assert all(p == -1 or p < module.index("function render(") for p in positions)


def test_a_page_of_its_own_adds_its_model_and_entry_to_the_same_module() -> None:
    """page_esm is the widget's module unchanged, then page.js (the model a page plays) and the page's entry."""
    assert PAGES == ("report", "watch", "comparison")
    for page in PAGES:
        module = page_esm(page)
        assert module.startswith(esm()) and module.count("export default") == 1
        assert module.index("ORS.pageModel =") < module.index(f"ORS.{page} =")
    with pytest.raises(ValueError, match="no page 'nope'; the pages: report, watch, comparison"):
        page_esm("nope")


def test_the_widget_answers_its_front_ends_requests() -> None:
    """A message from the front end reaches on_request; the widget carries the view, data and text."""
    asked: list[Any] = []
    front = make_front("count", {"n": 1}, "1 events", lambda message: asked.append(message))
    assert (front.view, front.data, front.text, repr(front)) == ("count", {"n": 1}, "1 events", "1 events")
    front._handle_custom_msg({"page": 2}, [])
    front._handle_custom_msg("not a dict", [])
    assert asked == [{"page": 2}]
    front.close()


# -- the HTML pieces -----------------------------------------------------------------------------


def test_escape_and_fmt() -> None:
    """Text is escaped, Markup passes through, values read as a person reads them."""
    assert html.escape('<a href="x">&\'') == "&lt;a href=&quot;x&quot;&gt;&amp;&#x27;"
    assert html.escape(html.Markup("<b>ok</b>")) == "<b>ok</b>"
    assert html.escape(1 / 3) == "0.3333" and html.escape(None) == "-"
    assert [html.fmt(v) for v in (None, True, False, float("nan"), 12345.678, 7, "x")] == [
        "-", "yes", "no", "-", "1.235e+04", "7", "x",
    ]  # fmt: skip


def test_card_and_table_escape_what_they_hold() -> None:
    """A card is a title and name/value rows; a table right-aligns its numeric columns; both escape."""
    card = html.card("<run>", [("mean", 0.5), ("<k>", "<v>")], subtitle="a & b", extra="<i>extra</i>")
    assert card.startswith(
        '<div class="ol-card"><div class="ol-title">&lt;run&gt;<span class="ol-sub">a &amp; b</span>'
    )
    assert "<tr><th>mean</th><td>0.5</td></tr><tr><th>&lt;k&gt;</th><td>&lt;v&gt;</td></tr>" in card
    assert card.endswith("<i>extra</i></div>")
    assert "ol-sub" not in html.card("t", [])
    table = html.table(["task", "reward"], [["<a>", 1.0], ["b", None]], numeric=[False, True])
    assert table == (
        '<table class="ol-table"><thead><tr><th>task</th><th class=num>reward</th></tr></thead><tbody>'
        "<tr><td>&lt;a&gt;</td><td class=num>1</td></tr><tr><td>b</td><td class=num>-</td></tr></tbody></table>"
    )


def test_styled_carries_its_style_sheet() -> None:
    """styled() wraps a body in .ors-lab with the whole style sheet: no network needed."""
    out = html.styled("<p>x</p>")
    assert out.startswith('<div class="ors-lab"><style>') and out.endswith("<p>x</p></div>")
    assert html.stylesheet() in out and ".ol-card" in html.stylesheet()


def test_pretty_json() -> None:
    """JSON values and JSON text are indented; other text passes through; long text is cut."""
    assert html.pretty_json({"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}'
    assert html.pretty_json('{"a":1}') == '{\n  "a": 1\n}'
    assert html.pretty_json("not json") == "not json"
    assert html.pretty_json("x" * 50, limit=10) == "x" * 10 + " …"


def test_the_colour_scale_ends() -> None:
    """Rewards go red (0) through amber to green (1), clipped; no reward is grey, an error dark red."""
    assert html.colour(0.0) == html.colour(-3) == "hsl(0, 65%, 45%)"
    assert html.colour(0.5) == "hsl(60, 65%, 45%)"
    assert html.colour(1.0) == html.colour(7) == "hsl(120, 65%, 45%)"
    assert html.colour(None) == html.colour(float("nan")) == "#d0d7de"
    assert html.colour(1.0, error=True) == "#82071e"
