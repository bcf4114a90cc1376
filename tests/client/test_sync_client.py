"""The sync Client: in scripts, inside a running loop (asyncio.run), and in a real Jupyter kernel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import nbformat
import pytest
from jupyter_client.manager import start_new_kernel
from nbclient import NotebookClient

import ors_lab as ol
from ors_lab.client.aclient import EXIT_TIMEOUT
from ors_lab.demo.launch import ServerProcess
from tests.conftest import REPO_ROOT
from tests.envs import common
from tests.envs.counting_envs import live_sessions, sessions_made
from tests.notebook.kernel import Kernel


def ping_status(url: str, sid: str) -> int:
    """Status of a bare POST /ping for a session id, outside the client."""
    return httpx2.post(f"{url}/ping", headers={"X-Session-ID": sid}).status_code


def test_sync_client_mirrors_the_async_one() -> None:
    """Client, Environment and Session have every public method of their async twins."""
    pairs = [(ol.Client, ol.AsyncClient), (ol.Environment, ol.AsyncEnvironment), (ol.Session, ol.AsyncSession)]
    for sync, aio in pairs:
        public = {n for n in vars(aio) if not n.startswith("_")} - {"aclose"}
        assert public <= set(dir(sync)), (sync, public - set(dir(sync)))


def test_sync_episode(reference_server: Any) -> None:
    """A whole episode through the sync client, on both servers, uses a private loop thread."""
    with ol.Client(reference_server.url) as client:
        assert client._runner.nested is False
        assert client.environments() == common.ENV_NAMES
        env = client.environment("lab")
        assert env.num_tasks("test") == 2
        assert [t.spec for t in env.tasks("test")] == common.LAB_TASKS["test"]
        with env.session(split="test", index=0) as session:
            assert session.prompt()[0].text == common.lab_prompt(common.LAB_TASKS["test"][0])
            assert "submit" in [t.name for t in session.tools()]
            result = session.call("submit", {"answer": "15"})
        assert (result.reward, result.finished) == (1.0, True)
        assert ping_status(reference_server.url, session.sid) == 404


def test_sync_session_pings_while_the_script_is_idle(ors_sdk_server: Any) -> None:
    """Between sync calls, with no loop running in the caller, the session keeps pinging."""
    with ol.Client(ors_sdk_server.url, ping_interval=0.2) as client:
        with client.environment("lab").session(split="test", index=0) as session:
            time.sleep(1.0)
            assert session.pings >= 3


def test_keyboard_interrupt_deletes_the_session(ors_sdk_server: Any) -> None:
    """Ctrl-C inside a session block still deletes the session on the server."""
    with ol.Client(ors_sdk_server.url) as client:
        with pytest.raises(KeyboardInterrupt):
            with client.environment("lab").session(split="test", index=0) as session:
                raise KeyboardInterrupt
        assert session.closed
        assert ping_status(ors_sdk_server.url, session.sid) == 404


def ctrl_c_once_running(event: Any) -> None:
    """A real SIGINT, as Ctrl-C sends, once the server has started the tool (its ``task_id`` came)."""
    if event.event == "task_id":
        os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.usefixtures("sigint_raises")
def test_keyboard_interrupt_during_a_call_deletes_the_session(ors_sdk_server: Any) -> None:
    """Ctrl-C while a sync call waits on a slow tool cancels it and deletes the session."""
    with ol.Client(ors_sdk_server.url) as client:
        session = client.environment("lab").session(split="test", index=0)
        started = time.monotonic()
        with client.events.subscribe(ctrl_c_once_running, kinds={"event"}), pytest.raises(KeyboardInterrupt), session:
            session.call("slow", {"seconds": 20})
        assert time.monotonic() - started < 5
        assert ping_status(ors_sdk_server.url, session.sid) == 404


def test_a_session_opens_on_its_first_call_and_lives_between_calls(reference_server: Any) -> None:
    """Without `with`, the first call opens the session; it keeps pinging between calls until close()."""
    with ol.Client(reference_server.url, ping_interval=0.2) as client:
        session = client.environment("lab").session(split="test", index=0)
        assert session.state == "new"
        assert session.call("step", {"value": 1}).reward == common.step_result(1)[1]
        time.sleep(0.7)  # the script idles: the session lives
        assert session.pings >= 2 and ping_status(reference_server.url, session.sid) == 200
        assert session.prompt()[0].text == common.lab_prompt(common.LAB_TASKS["test"][0])
        session.close()
        assert ping_status(reference_server.url, session.sid) == 404


def test_two_threads_first_calls_create_one_session(counting_server: tuple[ServerProcess, Path]) -> None:
    """Two threads calling a new session at once: the server sets up one session, and both calls are answered."""
    server, live = counting_server
    made = sessions_made(live)
    with ol.Client(server.url) as client:
        session = client.environment("lab").session(split="test", index=0)
        go = threading.Barrier(2)
        results: list[Any] = []

        def first_call(value: int) -> None:
            go.wait()
            results.append(session.call("step", {"value": value}).text)

        threads = [threading.Thread(target=first_call, args=(v,)) for v in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert sorted(results) == sorted(common.step_result(v)[0] for v in (1, 2))
        assert sessions_made(live) - made == 1
    assert sessions_made(live) - made == 1 and not live_sessions(live)


def in_a_fresh_interpreter(code: str, url: str) -> str:
    """What ``code`` prints, run with warnings as errors in a fresh interpreter, given ``url`` (it must exit 0)."""
    done = subprocess.run([sys.executable, "-W", "error", "-c", code, url], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


IN_A_RUNNING_LOOP = """
import asyncio, sys
import ors_lab as ol

async def main():
    with ol.Client(sys.argv[1], ping_interval=0.2) as client:
        with client.environment("echo").session(split="dev", index=0) as session:
            result = session.call("echo", {"text": "in a loop"})
            deadline = asyncio.get_running_loop().time() + 10
            while session.pings < 3 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)  # the caller's loop is idle: pings run on it
            print(client._runner.nested, result.text, session.pings, sep="|")

asyncio.run(main())
"""


def test_sync_client_inside_a_running_loop(reference_server: Any) -> None:
    """Inside asyncio.run, the sync client runs on that loop (nest_asyncio2) and keeps pinging: three pings
    of 0.2 s come while the loop idles (within 10 s: a loaded server answers each ping late).

    It runs in a fresh interpreter: nest_asyncio2 patches asyncio for the whole process.
    """
    nested, text, pings = in_a_fresh_interpreter(IN_A_RUNNING_LOOP, reference_server.url).strip().split("|")
    assert (nested, text) == ("True", "in a loop")
    assert int(pings) >= 3


NESTED_RUNS = """
import asyncio, json, sys
import _asyncio
import ors_lab as ol

async def main():
    loop = asyncio.get_running_loop()
    with ol.Client(sys.argv[1]) as client:
        with client.environment("echo").session(split="dev", index=0) as session:
            texts = {session.call("echo", {"text": "nested"}).text for _ in range(100)}
            timers = len(loop._scheduled)  # asyncio's heap of timers, cancelled ones included
    mine = asyncio.ensure_future(asyncio.sleep(0, "awaited"))  # the caller's own, made after the client
    print(json.dumps({"texts": sorted(texts), "timers": timers, "task": type(mine).__module__,
                      "future": type(loop.create_future()).__module__, "awaited": await mine}))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def nested_runs(ors_sdk_server: ServerProcess) -> dict[str, Any]:
    """What 100 sync calls inside asyncio.run leave (a fresh interpreter: nest_asyncio2 patches the whole process)."""
    result: dict[str, Any] = json.loads(in_a_fresh_interpreter(NESTED_RUNS, ors_sdk_server.url))
    assert result["texts"] == ["nested"]
    return result


def test_the_sync_client_in_a_running_loop_keeps_asyncios_own_tasks(nested_runs: dict[str, Any]) -> None:
    """After the sync client ran nested in a loop, asyncio's Task and Future are still its C ones: tasks and futures
    made afterwards (the caller's own) are native, not nest_asyncio2's pure-Python twins."""
    assert (nested_runs["task"], nested_runs["future"], nested_runs["awaited"]) == ("_asyncio", "_asyncio", "awaited")


def test_nested_runs_drop_the_timers_they_cancelled(nested_runs: dict[str, Any]) -> None:
    """The timeouts that 100 nested calls set and cancelled (several a call) do not pile up on the loop's heap until
    their deadlines: once they are most of it, the heap is made again without them, as asyncio's own loop does."""
    assert nested_runs["timers"] <= 150


KERNEL_SETUP = """
import ors_lab as ol
client = ol.Client({url!r}, ping_interval=0.5)
session = client.environment("lab").session(split="test", index=0)
session.open()
print(client._runner.nested, session.call("submit", {{"answer": "15"}}))
"""

KERNEL_CHECK = """
print(session.pings)
session.close()
client.close()
"""


def test_sync_client_in_a_jupyter_kernel(reference_server: Any) -> None:
    """In a real kernel the sync client works, and pings go on while the kernel idles between cells."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(KERNEL_SETUP.format(url=reference_server.url)),
        nbformat.v4.new_code_cell(KERNEL_CHECK),
    ]
    runner = NotebookClient(nb, kernel_name="python3", timeout=60)
    with runner.setup_kernel():
        runner.execute_cell(nb.cells[0], 0)
        time.sleep(2.0)  # the kernel sits idle, as a notebook does between cells
        runner.execute_cell(nb.cells[1], 1)
    # the session's live view, displayed as it opened (the widget, then its static twin for a reader with no
    # kernel); then the print
    *shown, printed = nb.cells[0].outputs
    assert "application/vnd.jupyter.widget-view+json" in shown[0].data
    assert [output.output_type for output in shown] == ["display_data", "display_data"]
    assert printed["text"].strip() == "True ToolResult(ok=True, reward=1.0, finished=True, blocks=1)"
    assert int(nb.cells[1].outputs[0]["text"]) >= 3


NOTEBOOK_CELLS = (
    "import ors_lab as ol\n"
    "client = ol.Client({url!r}, ping_interval=0.3)\n"
    "session = client.environment('lab').session(split='test', index=0)\n"
    "print(session.state)",
    "session.call('step', {{'value': 1}})",
    "print(session.call('step', {{'value': 2}}).reward, session.pings >= 3, session.state)",
    "session.close()\nprint(session.state, '|', repr(session.view))",
)


def test_a_notebook_session_made_in_one_cell_is_called_in_the_next(counting_server: tuple[ServerProcess, Path]) -> None:
    """In a real kernel: made in one cell, opened by the call of the next, called again after the kernel idled,
    closed in a fourth; the server set it up once and dropped it at the close, and its live view saw it all."""
    server, live = counting_server
    made, before = sessions_made(live), live_sessions(live)
    with Kernel() as kernel:
        cells = []
        for code in NOTEBOOK_CELLS:
            cells.append(kernel.run(code.format(url=server.url)))
            assert not cells[-1].problems(), cells[-1].problems()
            if len(cells) == 1:
                assert cells[0].stdout().strip() == "new" and sessions_made(live) == made  # nothing on the server yet
            if len(cells) == 2:
                assert sessions_made(live) - made == 1 and len(live_sessions(live) - before) == 1
                time.sleep(1.0)  # the kernel idles between cells, as a notebook does
    opened, again, closed = cells[1], cells[2], cells[3]
    assert sessions_made(live) - made == 1 and live_sessions(live) == before
    assert opened.widget_models(), "the view is shown in the cell that opened the session"
    assert again.updates(opened.widget_models()[0]), "the next cell's call updates that view in place"
    assert again.stdout().split() == [str(common.step_result(2)[1]), "True", "open"]
    state, view = closed.stdout().split(" | ")
    assert state == "closed" and "2 steps" in view and view.strip().endswith("closed")


def test_a_session_left_open_in_a_notebook_is_deleted_when_the_kernel_shuts_down(
    counting_server: tuple[ServerProcess, Path],
) -> None:
    """A kernel shut down as Jupyter's Shut Down does it, with a session still open, deletes it on its way out.

    ``shutdown_kernel(now=False)`` interrupts the kernel, then sends the shutdown request. ipykernel's shutdown
    stops the kernel's loop twice, the second time from a timer 0.1 s later that is still set when the loop
    has stopped; an exit that takes longer than that to reach the finalizers (1 in 4 to 2 in 3 under load) had
    the timer stop the loop under the delete. The atexit hook makes every exit that slow (it runs before the
    finalizers: registered after the client)."""
    server, live = counting_server
    before = live_sessions(live)
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=60)
    try:
        reply = kc.execute_interactive(
            f"import atexit, time\nimport ors_lab as ol\nsession = ol.Client({server.url!r}).environment('lab')"
            ".session(split='test', index=0, view=False)\nsession.call('step', {'value': 1})\n"
            "atexit.register(time.sleep, 0.3)",
            timeout=60,
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        assert len(live_sessions(live) - before) == 1
    finally:
        kc.stop_channels()
        km.shutdown_wait_time = 30.0  # Jupyter kills a kernel still exiting after 5 s; under load it exits later
        km.shutdown_kernel(now=False)  # Jupyter's Shut Down: an interrupt, then the shutdown request
    deadline = time.monotonic() + 10.0  # the server may tear the session down just after it answers the delete
    while live_sessions(live) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_sessions(live) == before


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that shows every warning (``-W default``), from the repo root."""
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", code, *args],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


LEFT_OPEN = {
    "in a script": """
import sys
import ors_lab as ol
client = ol.Client(sys.argv[1])
session = client.environment("lab").session(split="test", index=0)
print(session.call("step", {"value": 1}).reward)
""",
    "inside asyncio.run": """
import asyncio, sys
import ors_lab as ol

async def main():
    client = ol.Client(sys.argv[1])
    session = client.environment("lab").session(split="test", index=0)
    print(session.call("step", {"value": 1}).reward)

asyncio.run(main())
""",
}


@pytest.mark.parametrize("where", sorted(LEFT_OPEN))
def test_a_client_left_open_at_exit_deletes_its_sessions_without_a_warning(
    where: str, counting_server: tuple[ServerProcess, Path]
) -> None:
    """A sync Client never closed: the program ends silently, and the server holds none of its sessions."""
    server, live = counting_server
    made, before = sessions_made(live), live_sessions(live)
    done = run_python(LEFT_OPEN[where], server.url)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == str(common.step_result(1)[1])
    assert sessions_made(live) - made == 1 and live_sessions(live) == before


DROPPED = """
import gc, sys, threading, weakref
import ors_lab as ol
from tests.envs.counting_envs import live_sessions

client = ol.Client(sys.argv[1])
session = client.environment("lab").session(split="test", index=0)
session.call("step", {"value": 1})
held = len(live_sessions(sys.argv[2]))
dropped = weakref.ref(client)
del client, session
gc.collect()
loops = [t for t in threading.enumerate() if t.name == "ors-lab-loop"]
print(dropped() is None, held - len(live_sessions(sys.argv[2])), len(loops))
"""


def test_a_dropped_client_deletes_its_sessions_at_once(counting_server: tuple[ServerProcess, Path]) -> None:
    """A sync Client dropped mid-script (with its session) is collected, deletes its session then and there, stops
    its loop thread, and the program ends silently."""
    server, live = counting_server
    before = live_sessions(live)
    done = run_python(DROPPED, server.url, str(live))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.split() == ["True", "1", "0"]  # collected; one session fewer on the server; no loop thread
    assert live_sessions(live) == before


SERVER_GONE = """
import time
import ors_lab as ol
from ors_lab.demo.launch import start

server = start()
session = ol.Client(server.url).environment("guessing").session(split="test", index=0)
session.call("guess", {"number": 50})
server.stop()
print(session.sid, time.time(), flush=True)
"""


def test_exit_is_bounded_when_the_server_is_gone() -> None:
    """With its server gone, a client left open gives up deleting within a few seconds, in one line per session."""
    done = run_python(SERVER_GONE)
    ended = time.time()
    assert done.returncode == 0, done.stderr
    sid, gone = done.stdout.split()
    assert ended - float(gone) < EXIT_TIMEOUT + 2  # the exit's own share: the deletes' bound, and the interpreter's end
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ors_lab: session {sid}, left open, could not be deleted: ")
