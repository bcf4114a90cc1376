"""A live view in a real kernel: its widget updates leave while the cell runs, at most about 10 a second.

The kernel is this venv's (jupyter_client), and the messages are the ones a front end receives on
iopub, timed by the kernel's clock. The cell feeds the view from a loop of its own: 20,000 events
in about 2 s, far more than any front end should be sent.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from ors_lab.notebook import INTERVAL
from ors_lab.notebook.hosts import twin
from tests.notebook.kernel import COUNTING_STATE, WIDGET_MIME, Cell, Kernel, most_in_window

EVENTS = 20_000

DRIVE = f"""
stream = EventStream()
view = LiveView(Count())
view.attach(stream)
view.show()
pump(stream, events={EVENTS}, seconds=2.0)
view.close()
print(view.updates, view.front().model_id)
"""


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    """One kernel for the module, with ``Count`` and ``pump`` defined."""
    with Kernel() as started:
        setup = started.run(COUNTING_STATE)
        assert not setup.problems(), setup.problems()
        yield started


@pytest.fixture(scope="module")
def driven(kernel: Kernel) -> Cell:
    """The cell that shows a live view and feeds it 20,000 events, run once for the module."""
    cell = kernel.run(DRIVE, timeout=60)
    assert not cell.problems(), cell.problems()
    return cell


def test_updates_leave_while_the_cell_runs(driven: Cell) -> None:
    """Widget updates go out during the cell, spread over its run, not all at its end."""
    (model_id,) = driven.widget_models()
    during = [u for u in driven.updates(model_id) if u.during]
    assert driven.seconds >= 1.5
    assert len(during) >= 10
    assert (during[0].at - driven.started).total_seconds() < 0.5  # the first one at once
    assert (during[-1].at - during[0].at).total_seconds() >= 0.6 * driven.seconds  # and on through the run


def test_updates_stay_under_the_throttle(driven: Cell) -> None:
    """At most 10 updates in any second (and one trailing), however many events the view took."""
    (model_id,) = driven.widget_models()
    updates = driven.updates(model_id)
    assert most_in_window(updates, 1.0) <= round(1 / INTERVAL) + 1
    assert len(updates) <= math.floor(driven.seconds / INTERVAL) + 2
    assert len(updates) < EVENTS / 100


def test_the_final_state_arrives(driven: Cell) -> None:
    """The last update holds the final state, and the view counted every update it sent."""
    (model_id,) = driven.widget_models()
    updates = driven.updates(model_id)
    sent, shown_id = driven.stdout().split()
    assert shown_id == model_id
    assert int(sent) == len(updates)
    assert updates[-1].state["data"] == {"n": EVENTS}
    assert updates[-1].state["text"] == f"{EVENTS} events"


def test_closing_refreshes_the_static_summary(driven: Cell) -> None:
    """The view leaves two outputs, the widget's (the widget, its text) and its static twin (its HTML) showing the
    state at display time; close() draws both again with the final state."""
    shown, static, *rest = driven.outputs()
    assert set(shown) == {WIDGET_MIME, "text/plain"} and shown["text/plain"] == "0 events"
    assert static == {"text/html": twin("<b>0 events</b>")}
    final, final_static = rest[-2:]
    assert final["text/plain"] == f"{EVENTS} events" and "text/html" not in final
    assert final[WIDGET_MIME]["model_id"] == shown[WIDGET_MIME]["model_id"]
    assert final_static == {"text/html": twin(f"<b>{EVENTS} events</b>")}


def test_a_displayed_view_is_its_widget(kernel: Kernel, driven: Cell) -> None:
    """Displaying the view in a kernel gives the widget's output (the same model, its text) and its static twin."""
    (model_id,) = driven.widget_models()
    cell = kernel.run("view")
    assert not cell.problems(), cell.problems()
    data, static = cell.outputs()
    assert data[WIDGET_MIME]["model_id"] == model_id
    assert data["text/plain"] == f"{EVENTS} events" and "text/html" not in data
    assert static == {"text/html": twin(f"<b>{EVENTS} events</b>")}


def test_in_a_kernel_views_are_widgets(kernel: Kernel) -> None:
    """In a Jupyter kernel the switch's auto mode draws widgets; text and off stay as set."""
    cell = kernel.run(
        "from ors_lab.notebook import live_views, resolve, settings\n"
        "print(settings.in_kernel(), resolve())\n"
        "live_views('text'); print(resolve())\n"
        "live_views('off'); print(resolve())\n"
        "live_views('auto')"
    )
    assert not cell.problems(), cell.problems()
    assert cell.stdout().split() == ["True", "widgets", "text", "off"]
