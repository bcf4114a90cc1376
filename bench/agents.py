"""The agent side of an LLM turn: decoding and events per wire format, and ``llm_client()`` against a plain client.

    .venv/bin/python bench/agents.py                  # 2 runs of 8 rounds: 8-10 minutes
    .venv/bin/python bench/agents.py --quick          # 1 short round: a smoke test
    .venv/bin/python bench/agents.py --only decode    # part 1 alone (or --only client)
    .venv/bin/python bench/agents.py --profile        # where an llm_client() turn's CPU goes, by module
    .venv/bin/python bench/agents.py --check          # exit 1 if the target is missed
    git worktree add /tmp/agents-before COMMIT        # another checkout, measured beside this one
    .venv/bin/python bench/agents.py --baseline /tmp/agents-before

The turns are ``bench/agent_turns.py``'s: one answer in each wire format (chat completions, Anthropic
Messages, OpenAI Responses) framed and chunked as the provider fixtures of ``tests/wild/streams`` are, a
short one (text and a tool call) and a 100 KB one (reasoning first).

1. **Decoding plus events.** A worker (a fresh interpreter; ``--baseline``: one per checkout, in turns)
   runs ``--rounds`` batches of each turn (the turns in turns within a round). A batch feeds each turn, one
   SSE event a network read (as a live model's answer arrives), to ``Turn`` (the one mapping of
   ``ors_lab/agents/turn.py``, with the format's decoder) of a real ``Episode``, whose events go to an
   ``EventStream`` with a ``Recorder`` subscribed (required, inline, as in a run). Per turn: the CPU of the
   feeding thread (``time.thread_time``: decoding, events, the recorder's inline ``record``), and of the
   process once the recorder's writer put the rows on disk (``flush()``; ``time.process_time``); per KB of
   the wire; the agent events made; and, as machine-independent figures, the Python calls (cProfile) and
   tracemalloc's Python memory: the peak above the start within the turn and the blocks still held after it
   (the recorder's rows, waiting for their part; tracemalloc cannot count what was allocated and freed again).
2. **``llm_client()`` against a plain client.** A server in a process of its own on 127.0.0.1 (``--serve``)
   answers ``POST /v1/chat/completions``, ``/v1/messages`` and ``/v1/responses`` with those turns, kept
   alive, each SSE event its own HTTP chunk, flushed, ``PACE`` apart (so that each arrives in a read of
   its own, as a live model's do). A client worker runs one real ``evaluate`` of one episode on the quiz
   environment (an ors-sdk server, a process of its own), recorded to a trace; its agent reads turns with
   the official SDKs, streaming, as a user's loop does (``openai.AsyncOpenAI``: ``chat.completions.create``
   and ``responses.create`` with ``stream=True``, iterated, text and tool calls gathered;
   ``anthropic.AsyncAnthropic``: ``messages.stream()`` and ``get_final_message()``), every turn checked
   against what was sent. Modes, in blocks of turns, their order turned each round:
   - ``llm_client``: ``http_client=episode.llm_client()`` (decoded, published, recorded);
   - ``plain``: ``http_client=httpx.AsyncClient()`` for openai; anthropic 2.16 takes no httpx client
     (a ``TypeError``), so its own default client (httpx2);
   - ``default``: openai's own default client (httpx2), for the record;
   - ``unrecorded``: an ``httpx2.AsyncClient`` on ``llm_client()``'s wire (ors_lab's ``WireTransport``),
     nothing decoded or recorded: ``llm_client`` ÷ ``unrecorded`` is what decoding and recording cost;
   - ``tapped``: the same with ``llm_client()``'s recording (``RecordingTransport`` and the episode's
     ``ExchangeTap``: the request, response, each read and SSE event as rows), nothing decoded.
   A block's figure is the client process's CPU (``time.process_time``: every thread, so the recorder's
   writer too; each block ends with ``Recorder.flush()``, so its rows are on disk inside it) and the wall
   time, over its turns. Outside every block: the servers' CPU (other processes), the episode's own ORS
   calls (its session's opening, prompt and tools before the agent runs, its ``answer`` after the last
   block, the deletion), the clients' making and a warm-up turn of each. Inside, and alike for every
   mode: the session's keep-alive ping every 10 s (about 0.3 ms), garbage collection.
   Figures pooled over the rounds (CPU summed over turns summed), with a bootstrap 95% interval over rounds.

Target: ``llm_client`` CPU per turn <= 1.2x the plain client's, for each format and turn size.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import random
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.append(str(REPO_ROOT))

TARGET = 1.2
PACE = 0.0005  # seconds between the server's events
BOOTSTRAP = 2_000
KEY = "sk-bench-agents"
CASES = (("openai", "chat"), ("anthropic", "messages"), ("openai", "responses"))
DECODE_TURNS = {"typical": 1_500, "reasoning": 60}  # turns per batch of part 1 (about 0.3 s)
CLIENT_TURNS = {"typical": 40, "reasoning": 3}  # turns per block of part 2


def _ours(root: str) -> None:
    """Put the ``ors_lab`` of checkout ``root`` first on the path, and check it is the one imported."""
    sys.path.insert(0, root)
    import ors_lab

    assert Path(ors_lab.__file__).resolve().is_relative_to(Path(root).resolve()), ors_lab.__file__


def _turns_module() -> Any:
    """``bench/agent_turns.py`` of this checkout, whichever checkout's ``ors_lab`` the worker runs."""
    spec = importlib.util.spec_from_file_location("agent_turns", REPO_ROOT / "bench" / "agent_turns.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the LLM server (``--serve``): a process of its own --------------------------------------------------------


def serve(pace: float) -> None:
    """Answer the three formats' requests with ``agent_turns``' turns until stdin closes; print the port first.

    The request's ``model`` names the turn's size (``bench-typical``, ``bench-reasoning``)."""
    turns = _turns_module()
    routes = {path: fmt for fmt, path in turns.PATHS.items()}

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                line = self.rfile.readline()
                if not line:
                    return
                length = 0
                while (header := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = json.loads(self.rfile.read(length) or b"{}")
                fmt = routes.get(line.split()[1].decode().split("?")[0])
                size = str(body.get("model", "")).removeprefix("bench-")
                if fmt is None or size not in turns.SIZES:
                    self.wfile.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                                 b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")  # fmt: skip
                for event in turns.turn(fmt, size):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                    if pace:
                        time.sleep(pace)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    with Server(("127.0.0.1", 0), Handler) as server:
        print(server.server_address[1], flush=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        sys.stdin.read()


# -- part 1: decoding plus events -----------------------------------------------------------------------------


def decode_worker(root: str, rounds: int, quick: bool) -> dict[str, Any]:
    """Part 1 with the ``ors_lab`` of ``root``: per format and size, ``rounds`` batches of turns (the cases in turns
    within a round), then one turn's events, Python calls and memory."""
    _ours(root)
    turns = _turns_module()
    folder = Path(tempfile.mkdtemp(prefix="bench-agents-"))
    cases = {f"{fmt}/{size}": (fmt, size) for fmt in turns.FORMATS for size in turns.SIZES}
    timed = {case: _Decoding(turns, fmt, size, folder / f"{fmt}-{size}-timed.parquet")
             for case, (fmt, size) in cases.items()}  # fmt: skip
    results: dict[str, Any] = {case: {"batches": []} for case in cases}
    for case, decoding in timed.items():
        decoding.check()
        for _ in range(DECODE_TURNS[cases[case][1]] // 4):  # warm-up
            decoding.one()
    for _ in range(rounds):
        for case, decoding in timed.items():
            results[case]["batches"].append(_batch(decoding, DECODE_TURNS[cases[case][1]] // (8 if quick else 1)))
    for case, (fmt, size) in cases.items():
        timed[case].recorder.close()
        results[case] |= _one_turn(turns, fmt, size, folder)
    shutil.rmtree(folder)
    return results


def _batch(decoding: _Decoding, n: int) -> dict[str, Any]:
    """``n`` turns: the feeding thread's CPU, and the process's once the recorder's rows are on disk."""
    decoding.recorder.flush()
    decoding.events = 0
    gc.collect()
    thread, process = time.thread_time(), time.process_time()
    for _ in range(n):
        decoding.one()
    thread = time.thread_time() - thread
    decoding.recorder.flush()
    process = time.process_time() - process
    return {"turns": n, "thread_s": thread, "process_s": process, "events": decoding.events / n}


class _Decoding:
    """One format's turn fed to ``Turn`` of a real ``Episode`` whose stream has a ``Recorder`` (and a counter)."""

    def __init__(self, turns: Any, fmt: str, size: str, path: Path, **options: Any) -> None:
        import types

        from ors_lab import Recorder
        from ors_lab.agents.episode import Episode
        from ors_lab.agents.turn import decoder_for
        from ors_lab.events import EventStream

        known = decoder_for("POST", turns.PATHS[fmt])
        assert known is not None, fmt
        self.decoder = known[1]
        self.model = turns.MODEL[fmt]
        self.chunks = turns.turn(fmt, size)
        self.want = turns.expected(fmt, size)
        stream = EventStream()
        self.recorder = Recorder(path, **options)
        stream.subscribe(self.recorder, required=True)
        self.events = 0
        stream.subscribe(self._count)
        session = types.SimpleNamespace(sid="2b7c0c8e-5f1e-4a61-9f0a-1c2d3e4f5a6b")  # the one thing publish reads
        self.episode = Episode(session, rollout=0, prompt=[], tools=[], max_steps=None, events=stream)  # type: ignore[arg-type]

    def _count(self, _event: Any) -> None:
        self.events += 1

    def one(self) -> Any:
        """One turn: its bytes, a read per SSE event, through ``Turn`` to events."""
        from ors_lab.agents.turn import Turn

        turn = Turn(self.episode, self.decoder)
        turn.begin("text/event-stream; charset=utf-8")
        for chunk in self.chunks:
            turn.feed(chunk)
        turn.close()
        turn.end(self.model)
        return turn

    def check(self) -> None:
        """One turn's events say what was sent: its reasoning, text and tool call."""
        seen: list[Any] = []
        with self.episode.events.subscribe(seen.append):
            self.one()

        def joined(kind: str, field: str) -> str:
            return "".join(getattr(e, field) for e in seen if e.kind == kind)

        said = (joined("reasoning-delta", "delta"), joined("text-delta", "delta"),
                [e.tool_name for e in seen if e.kind == "tool-input-start"],
                joined("tool-input-delta", "input_text_delta"))  # fmt: skip
        want = self.want
        assert said == (want.reasoning, want.text, [want.tool], want.arguments), said


def _one_turn(turns: Any, fmt: str, size: str, folder: Path) -> dict[str, Any]:
    """One turn's wire bytes and reads, Python calls (cProfile) and Python memory (tracemalloc: the peak above
    the start, and what is still held after the turn, its rows waiting in the recorder for their part)."""
    import cProfile
    import pstats
    import tracemalloc

    traced = _Decoding(turns, fmt, size, folder / f"{fmt}-{size}-traced.parquet", flush_interval=3600,
                       part_rows=10**9)  # fmt: skip
    traced.one()
    profile = cProfile.Profile()
    profile.runcall(traced.one)
    calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    start, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    traced.one()
    current, peak = tracemalloc.get_traced_memory()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    mine = [tracemalloc.Filter(False, tracemalloc.__file__)]
    held = sum(s.count_diff for s in after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename"))
    traced.recorder.close()
    return {"bytes": sum(len(c) for c in traced.chunks), "reads": len(traced.chunks), "calls": calls,
            "peak_bytes": peak - start, "held_bytes": current - start, "held_blocks": held}  # fmt: skip


# -- part 2: llm_client() against a plain client --------------------------------------------------------------


class BenchAgent:
    """Reads turns through the official SDKs in blocks, each mode in turn, inside one episode (see the docstring)."""

    def __init__(self, llm_url: str, recorder: Any, rounds: int, quick: bool, profile: bool) -> None:
        self.llm_url = llm_url
        self.recorder = recorder
        self.rounds = rounds
        self.quick = quick
        self.profile = profile
        self.blocks: list[dict[str, Any]] = []
        self.profiles: dict[str, Any] = {}
        self.turns = _turns_module()

    def clients(self, episode: Any) -> dict[tuple[str, str], Any]:
        import anthropic
        import httpx
        import httpx2
        import openai

        from ors_lab.client import ExchangeTap, RecordingTransport, WireTransport

        def unrecorded() -> httpx2.AsyncClient:  # llm_client()'s wire and options, with nothing decoded or recorded
            return httpx2.AsyncClient(transport=WireTransport(), timeout=600.0, follow_redirects=True)

        def tap(request: httpx2.Request) -> ExchangeTap:  # llm_client()'s tap
            return ExchangeTap(episode.events, session_id=episode.session.sid, rollout=episode.rollout, agent=True)

        def tapped() -> httpx2.AsyncClient:  # llm_client()'s wire and recording, with nothing decoded
            return httpx2.AsyncClient(transport=RecordingTransport(tap), timeout=600.0, follow_redirects=True)

        chat = {"base_url": self.llm_url + "/v1", "api_key": KEY, "max_retries": 0}
        claude = {"base_url": self.llm_url, "api_key": KEY, "max_retries": 0}
        return {
            ("openai", "llm_client"): openai.AsyncOpenAI(**chat, http_client=episode.llm_client()),
            ("openai", "plain"): openai.AsyncOpenAI(**chat, http_client=httpx.AsyncClient(timeout=600.0)),
            ("openai", "unrecorded"): openai.AsyncOpenAI(**chat, http_client=unrecorded()),
            ("openai", "tapped"): openai.AsyncOpenAI(**chat, http_client=tapped()),
            ("openai", "default"): openai.AsyncOpenAI(**chat),
            ("anthropic", "llm_client"): anthropic.AsyncAnthropic(**claude, http_client=episode.llm_client()),
            ("anthropic", "plain"): anthropic.AsyncAnthropic(**claude),
            ("anthropic", "unrecorded"): anthropic.AsyncAnthropic(**claude, http_client=unrecorded()),
            ("anthropic", "tapped"): anthropic.AsyncAnthropic(**claude, http_client=tapped()),
        }

    async def one(self, client: Any, fmt: str, size: str) -> None:
        """One turn, read as a user's loop reads it, and checked."""
        model = f"bench-{size}"
        messages = [{"role": "user", "content": "Should I take an umbrella in Paris tomorrow?"}]
        schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        text, name, arguments = "", "", ""
        if fmt == "chat":
            tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
            stream = await client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True)
            async for chunk in stream:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for call in choice.delta.tool_calls or []:
                        if call.function is not None:
                            name += call.function.name or ""
                            arguments += call.function.arguments or ""
        elif fmt == "messages":
            tools = [{"name": "get_weather", "input_schema": schema}]
            async with client.messages.stream(model=model, max_tokens=1024, messages=messages, tools=tools) as stream:
                message = await stream.get_final_message()
            for block in message.content:
                if block.type == "text":
                    text += block.text
                elif block.type == "tool_use":
                    name, arguments = block.name, json.dumps(block.input, separators=(", ", ": "))
        else:
            tools = [{"type": "function", "name": "get_weather", "parameters": schema}]
            stream = await client.responses.create(model=model, input=messages, tools=tools, stream=True)
            async for event in stream:
                if event.type == "response.output_text.delta":
                    text += event.delta
                elif event.type == "response.completed":
                    for item in event.response.output:
                        if item.type == "function_call":
                            name, arguments = item.name, item.arguments
        want = self.turns.expected(fmt, size)
        if (text, name, arguments) != (want.text, want.tool, want.arguments):
            raise AssertionError(f"{fmt}/{size}: read {(text, name, arguments)!r}")

    async def run(self, episode: Any) -> None:
        clients = self.clients(episode)
        cases = [(sdk, fmt, size) for sdk, fmt in CASES for size in self.turns.SIZES]
        for sdk, fmt, size in cases:  # a warm-up turn of each
            for mode in _modes(sdk):
                await self.one(clients[sdk, mode], fmt, size)
        self.recorder.flush()
        for number in range(self.rounds):
            for sdk, fmt, size in cases:
                modes = _modes(sdk)
                turn = number % len(modes)
                order = modes[turn:] + modes[:turn]
                for mode in order if number % 2 == 0 else list(reversed(order)):
                    await self.block(clients[sdk, mode], number, sdk, fmt, size, mode)
        for client in clients.values():
            await client.close()
        await episode.call("answer", {"answer": _answer(episode)})

    async def block(self, client: Any, number: int, sdk: str, fmt: str, size: str, mode: str) -> None:
        n = max(1, CLIENT_TURNS[size] // (4 if self.quick else 1))
        gc.collect()
        profile = None
        if self.profile and mode == "llm_client":
            import cProfile

            profile = self.profiles.setdefault(f"{fmt}/{size}", cProfile.Profile(time.thread_time))  # CPU, not waits
            profile.enable()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            await self.one(client, fmt, size)
        self.recorder.flush()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if profile is not None:
            profile.disable()
        self.blocks.append({"round": number, "sdk": sdk, "format": fmt, "size": size, "mode": mode, "turns": n,
                            "cpu_s": cpu, "wall_s": wall})  # fmt: skip


def _modes(sdk: str) -> list[str]:
    return ["llm_client", "plain", "unrecorded", "tapped", *(["default"] if sdk == "openai" else [])]


def _answer(episode: Any) -> str:
    from bench.quiz_data import expected_answer

    return expected_answer(episode.index)


def client_worker(root: str, llm_url: str, ors_url: str, rounds: int, quick: bool, profile: bool) -> dict[str, Any]:
    """Part 2 with the ``ors_lab`` of ``root``: one recorded evaluation whose one episode reads every block."""
    _ours(root)
    import ors_lab as ol
    from bench.quiz_data import SPLIT

    folder = Path(tempfile.mkdtemp(prefix="bench-agents-"))
    recorder = ol.Recorder(folder / "run.parquet")
    agent = BenchAgent(llm_url, recorder, rounds, quick, profile)
    with ol.Client(ors_url) as client:
        result = ol.evaluate(client.environment("quiz"), agent, split=SPLIT, tasks=1, record=recorder,
                             progress=False)  # fmt: skip
    episodes = result.episodes
    if len(episodes) != 1 or episodes["reward"].iloc[0] != 1.0 or episodes["error"].notna().any():
        raise SystemExit(f"the episode went wrong:\n{episodes.to_string()}")
    events = ol.load_trace(folder / "run.parquet").events
    kinds = events[events["layer"] == "agent"]["kind"].value_counts().to_dict()
    shutil.rmtree(folder)
    out: dict[str, Any] = {"blocks": agent.blocks, "rows": {k: int(v) for k, v in kinds.items()}}
    if profile:
        out["profile"] = {case: _by_area(p, agent.blocks, case) for case, p in agent.profiles.items()}
    return out


AREAS = (
    ("ors_lab/client/tap.py", "ours: the tap (chunks, SSE events as rows)"),
    ("ors_lab/agents/llm_client.py", "ours: llm_client's call and streams"),
    ("ors_lab/agents/turn.py", "ours: Turn (pieces to events)"),
    ("ors_lab/agents/", "ours: the decoders and the episode"),
    ("ors_lab/protocol/sse.py", "ours: the SSE decoder"),
    ("ors_lab/events/", "ours: events and the stream"),
    ("ors_lab/recording/", "ours: the recorder"),
    ("ors_lab/client/wire.py", "ours: the wire transport"),
    ("ors_lab/", "ours: the rest"),
    ("/aiohttp/", "aiohttp"),
    ("/httpx2/", "httpx2"),
    ("/httpx/", "httpx"),
    ("/httpcore", "httpcore"),
    ("/h11/", "h11"),
    ("/openai/", "the openai SDK"),
    ("/anthropic/", "the anthropic SDK"),
    ("/pydantic", "pydantic"),
    ("/json/", "json"),
    ("asyncio", "asyncio"),
    ("/pyarrow/", "pyarrow"),
)


def _area(filename: str) -> str:
    return next((label for part, label in AREAS if part in filename), "other")


def _by_area(profile: Any, blocks: list[dict[str, Any]], case: str) -> dict[str, Any]:
    """A profile's own time (tottime) summed by area, in µs per turn, with its top functions; the time of a builtin
    (``isinstance``, a lock) or of the standard library outside asyncio and json (``typing``, ``inspect``) goes to
    the area of the function that called it."""
    import pstats

    stats = pstats.Stats(profile)
    turns = sum(b["turns"] for b in blocks if f"{b['format']}/{b['size']}" == case and b["mode"] == "llm_client")
    areas: dict[str, float] = {}
    top = []
    for (filename, line, name), (_cc, _nc, tottime, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if _area(filename) == "other":
            for (caller, _line, _name), (_c, _n, spent, _t) in callers.items():
                areas[_area(caller)] = areas.get(_area(caller), 0.0) + spent
        else:
            areas[_area(filename)] = areas.get(_area(filename), 0.0) + tottime
        top.append((tottime, f"{filename.split('site-packages/')[-1].split(str(REPO_ROOT))[-1]}:{line} {name}"))
    top.sort(reverse=True)
    return {"turns": turns, "areas_us": {k: 1e6 * v / turns for k, v in sorted(areas.items(), key=lambda kv: -kv[1])},
            "top_us": [(1e6 * t / turns, where) for t, where in top[:15]]}  # fmt: skip


# -- the parent: servers, rounds, tables ----------------------------------------------------------------------


def _run_worker(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, cwd="/")
    if done.returncode:
        raise SystemExit(f"worker {args[:2]} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def _ratio(pairs: list[tuple[float, float, float, float]]) -> float:
    """Pooled: (cpu a summed ÷ turns a summed) ÷ (cpu b summed ÷ turns b summed)."""
    return (sum(p[0] for p in pairs) / sum(p[1] for p in pairs)) / (sum(p[2] for p in pairs) / sum(p[3] for p in pairs))


def _interval(pairs: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """A bootstrap 95% interval over rounds of the pooled ratio; ``pairs``: (cpu a, turns a, cpu b, turns b)."""
    rng = random.Random(0)  # the same interval for the same rounds
    ratios = sorted(_ratio(rng.choices(pairs, k=len(pairs))) for _ in range(BOOTSTRAP))
    return ratios[int(0.025 * BOOTSTRAP)], ratios[int(0.975 * BOOTSTRAP) - 1]


def decode_table(results: dict[str, list[dict[str, Any]]]) -> None:
    print("\n### Decoding plus events, per turn (a read per SSE event; pooled over every batch, batches min-max)\n")
    print("| checkout | turn | wire | reads | agent events | CPU µs, feeding thread | µs per KB | CPU µs with the "
          "writer | Python calls | tracemalloc peak | held after (blocks) |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        for case in runs[0]:
            batches = [b for run in runs for b in run[case]["batches"]]
            turns = sum(b["turns"] for b in batches)
            thread = 1e6 * sum(b["thread_s"] for b in batches) / turns
            process = 1e6 * sum(b["process_s"] for b in batches) / turns
            each = [1e6 * b["thread_s"] / b["turns"] for b in batches]
            r = runs[0][case]
            print(f"| {name} | {case} | {r['bytes'] / 1000:.1f} KB | {r['reads']} | {batches[0]['events']:.0f} | "
                  f"{thread:,.0f} ({min(each):,.0f}-{max(each):,.0f}) | {thread / (r['bytes'] / 1000):.1f} | "
                  f"{process:,.0f} | {r['calls']:,} | {r['peak_bytes'] / 1000:,.0f} KB | "
                  f"{r['held_bytes'] / 1000:,.0f} KB ({r['held_blocks']:,}) |")  # fmt: skip


def _pooled_ratio(mine: list[dict[str, Any]], mode: str, base: str) -> tuple[float, float, float]:
    """``mode``'s CPU per turn ÷ ``base``'s, pooled over every round, with a bootstrap 95% interval over rounds."""
    pairs = []
    for key in sorted({(b["run"], b["round"]) for b in mine}):
        a = [b for b in mine if (b["run"], b["round"]) == key and b["mode"] == mode]
        p = [b for b in mine if (b["run"], b["round"]) == key and b["mode"] == base]
        pairs.append((sum(b["cpu_s"] for b in a), sum(b["turns"] for b in a), sum(b["cpu_s"] for b in p),
                      sum(b["turns"] for b in p)))  # fmt: skip
    return (_ratio(pairs), *_interval(pairs))


def client_table(results: dict[str, list[dict[str, Any]]]) -> bool:
    """Print part 2's table and verdicts; True when every case met the target."""
    met = True
    print("\n### An SDK's streamed turn: llm_client() against a plain client (client process CPU ms per turn, pooled; "
          "ratios with a 95% interval over rounds)\n")  # fmt: skip
    print("| checkout | SDK, turn | llm_client | plain | default | unrecorded | tapped | wall ms, llm_client / plain "
          "| **llm_client ÷ plain** | llm_client ÷ unrecorded | tapped ÷ unrecorded | rounds |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    verdicts = []
    for name, runs in results.items():
        blocks = [b | {"run": i} for i, run in enumerate(runs) for b in run["blocks"]]
        for sdk, fmt in CASES:
            for size in ("typical", "reasoning"):
                mine = [b for b in blocks if (b["sdk"], b["format"], b["size"]) == (sdk, fmt, size)]

                def per_turn(mode: str, key: str = "cpu_s", mine: list[dict[str, Any]] = mine) -> str:
                    chosen = [b for b in mine if b["mode"] == mode]
                    if not chosen:
                        return "–"
                    return f"{1e3 * sum(b[key] for b in chosen) / sum(b['turns'] for b in chosen):.2f}"

                value, low, high = _pooled_ratio(mine, "llm_client", "plain")
                own, own_low, own_high = _pooled_ratio(mine, "llm_client", "unrecorded")
                tapped, tap_low, tap_high = _pooled_ratio(mine, "tapped", "unrecorded")
                rounds = len({(b["run"], b["round"]) for b in mine})
                print(f"| {name} | {sdk} {fmt}, {size} | {per_turn('llm_client')} | {per_turn('plain')} | "
                      f"{per_turn('default')} | {per_turn('unrecorded')} | {per_turn('tapped')} | "
                      f"{per_turn('llm_client', 'wall_s')} / {per_turn('plain', 'wall_s')} | **{value:.2f}** "
                      f"({low:.2f}-{high:.2f}) | {own:.2f} ({own_low:.2f}-{own_high:.2f}) | {tapped:.2f} "
                      f"({tap_low:.2f}-{tap_high:.2f}) | {rounds} |")  # fmt: skip
                ok = value <= TARGET
                met &= ok
                verdict = "met" if ok else "MISSED"
                verdicts.append(f"{name}, {sdk} {fmt} {size}: llm_client CPU per turn ÷ plain {value:.3f} (95% "
                                f"interval {low:.2f}-{high:.2f}; target <= {TARGET}): {verdict}")  # fmt: skip
    print()
    for line in verdicts:
        print(line)
    for name, runs in results.items():
        rows: dict[str, int] = {}
        for run in runs:
            for kind, count in run["rows"].items():
                rows[kind] = rows.get(kind, 0) + count
        turns = sum(b["turns"] for run in runs for b in run["blocks"] if b["mode"] in ("llm_client", "tapped"))
        by_kind = dict(sorted(rows.items(), key=lambda kv: -kv[1]))
        print(f"{name}: reads per SSE event of the recorded turns (the trace's agent-layer chunk ÷ event rows): "
              f"{rows.get('chunk', 0) / max(1, rows.get('event', 0)):.3f}; agent-layer rows by kind over "
              f"{turns:,} timed turns of llm_client and tapped (and their warm-up's): {by_kind}")  # fmt: skip
    return met


def profile_table(results: dict[str, list[dict[str, Any]]]) -> None:
    for name, runs in results.items():
        for case in runs[0].get("profile", {}):
            profiles = [run["profile"][case] for run in runs]
            print(f"\n### Where an llm_client() turn's CPU goes, {name}, {case} (the agent's thread under cProfile: "
                  "its CPU, inflated by the profiler; µs per turn)\n")  # fmt: skip
            print("| area | µs per turn |")
            print("|---|---:|")
            areas: dict[str, float] = {}
            for p in profiles:
                for area, us in p["areas_us"].items():
                    areas[area] = areas.get(area, 0.0) + us / len(profiles)
            for area, us in sorted(areas.items(), key=lambda kv: -kv[1]):
                print(f"| {area} | {us:,.0f} |")
            print(f"| total (under cProfile) | {sum(areas.values()):,.0f} |")
            print("\ntop functions (own time, µs per turn, first run):")
            for us, where in profiles[0]["top_us"]:
                print(f"  {us:8,.0f}  {where}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="worker processes per checkout, in turns (default 2)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of the modes in a client worker (default 8)")
    parser.add_argument("--quick", action="store_true", help="1 round of short blocks: a smoke test")
    parser.add_argument("--only", choices=("decode", "client"))
    parser.add_argument("--profile", action="store_true", help="part 2 under cProfile: where llm_client's time goes")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    parser.add_argument("--baseline", type=Path, help="another checkout of ors_lab, measured beside this one")
    parser.add_argument("--pace", type=float, default=PACE, help="seconds between the LLM server's events")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.pace)
        return 0
    if args.worker:
        kind, root, *rest = args.worker
        if kind == "decode":
            print(json.dumps(decode_worker(root, int(rest[0]), args.quick)))
        else:
            llm_url, ors_url, rounds = rest
            print(json.dumps(client_worker(root, llm_url, ors_url, int(rounds), args.quick, args.profile)))
        return 0

    from ors_lab.demo.launch import serve as serve_ors

    rounds, runs = (1, 1) if args.quick else (args.rounds, args.runs)
    quick = ["--quick"] if args.quick else []
    profile = ["--profile"] if args.profile else []
    checkouts = {"ours": REPO_ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    decoded: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
    clients: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
    llm = subprocess.Popen([sys.executable, __file__, "--serve", "--pace", str(args.pace)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert llm.stdout is not None
        llm_url = f"http://127.0.0.1:{int(llm.stdout.readline())}"
        with serve_ors("bench.quiz_env:ENVIRONMENTS", env={"PYTHONPATH": str(REPO_ROOT)}) as ors:
            for number in range(runs):
                order = list(checkouts) if number % 2 == 0 else list(reversed(checkouts))
                for name in order:
                    root = str(checkouts[name])
                    if args.only != "client":
                        decoded[name].append(_run_worker("--worker", "decode", root, str(rounds), *quick))
                    if args.only != "decode":
                        clients[name].append(_run_worker("--worker", "client", root, llm_url, ors.url, str(rounds),
                                                         *quick, *profile))  # fmt: skip
                print(f"run {number + 1} of {runs} done", flush=True)
    finally:
        assert llm.stdin is not None
        llm.stdin.close()
        llm.wait(timeout=10)
    met = True
    if args.only != "client":
        decode_table(decoded)
    if args.only != "decode":
        met = client_table(clients)
        if args.profile:
            profile_table(clients)
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
