"""The ``ors-lab`` command line.

- ``ors-lab demo``: start the bundled demo environments on 127.0.0.1, evaluate the demo agent on
  them with recording, print the summaries, and say where the trace is and how to replay it.
- ``ors-lab eval URL --env NAME [--split S] (--agent MODULE:OBJECT | --openai-model M
  --openai-base-url U) --out TRACE``: evaluate an agent, record the trace, print the summary, and
  write the episodes as Parquet next to the trace (``TRACE`` → ``TRACE.episodes.parquet``). Without
  ``--split``, the environment's only split is run (one with several is an error naming them). An
  existing trace is continued (``--resume``, the default), refused (``--no-resume``) or replaced
  (``--overwrite``). A run that fails before its first episode leaves no trace it created behind.
  ``--feed PORT`` serves the run's events live on 127.0.0.1 (0: a free port; its URL is said first).
  ``--ray [ADDRESS] --workers N`` runs it on N Ray workers: a private loopback cluster on this machine
  without ADDRESS, else the cluster at ADDRESS (``auto``, ``ray://HOST:PORT``); ``--concurrency`` is
  then each worker's (``docs/scale-out.md``).
- ``ors-lab watch FEED [--port P]``: serve a page on 127.0.0.1 showing the live dashboard of the run
  behind a live feed (``eval --feed``'s URL), until Ctrl-C.
- ``ors-lab demo-server [--port P]``: serve the demo environments until Ctrl-C.
- ``ors-lab proxy UPSTREAM --port P --out TRACE``: a recording reverse proxy on 127.0.0.1 in front
  of an ORS server, so any client's traffic is recorded; Ctrl-C (or SIGTERM) writes the trace.
  ``eval`` and ``proxy`` take ``--redact NAME`` (a header, query parameter or JSON key, any case)
  and ``--redact-pattern REGEX`` (both repeatable), on top of the default redactions.
- ``ors-lab show TRACE``: print a summary of a recorded trace (or of the parts of an unfinished
  one): sessions, calls by tool, rewards, latency percentiles, pings and errors.
- ``ors-lab replay TRACE --port P --speed S [--fault F]``: serve a trace as an ORS server on 127.0.0.1
  (speed 0: no waiting; faults as in ``ors_lab.replay.faults``); prints what went unplayed at the end.
- ``ors-lab report TRACE [-o RUN.html] [--timelines N]``: write the run's report, one self-contained
  HTML file (summary, dashboards, per-task tables, episodes with their timelines and transcripts)
  that opens offline in any browser; an existing file at ``-o`` is replaced.
- ``ors-lab export TRACE --format F [--min-reward R] [-o FILE]``: write each episode's conversation as the
  LLM API ``F``'s messages (``openai``: chat completions, ``anthropic``: Messages, ``responses``: the Responses
  API), one JSON line per episode with its reward (``Trace.conversations``); those below ``R`` left out.
- ``ors-lab compare BASE CAND... [-o cmp.html] [--fail-if-worse]``: compare each candidate run (a trace)
  with the baseline, paired by task (``ol.compare``): a text table of the figures on stdout; ``-o`` writes
  the comparison's self-contained page; ``--fail-if-worse`` exits 1 when a candidate's 95% interval of the
  mean reward delta lies below 0 (a regression gate for CI).
- ``ors-lab check TRACE [--ping-interval S]``: check every ``/call`` stream of a trace against the
  ORS protocol; prints one line per violation and a summary, exits 1 when there is any.

An expected failure (an ``ORSError``, such as an unknown environment, a server that cannot be
reached, a missing or unreadable trace; a file or port error; a network error; a value the run
refuses) ends any command with one line on stderr, ``ors-lab COMMAND: what happened``, and exit
status 1; Ctrl-C with ``ors-lab COMMAND: interrupted`` and 130. A bad option is a usage error
(status 2). Only a bug shows a traceback; ``ors-lab --debug COMMAND ...`` (or ``ORS_LAB_DEBUG=1``)
shows it for every failure, before the line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2

from ors_lab.agents.openai import OpenAIAgent
from ors_lab.analysis.conversations import FORMATS
from ors_lab.client import Client
from ors_lab.demo.launch import serve
from ors_lab.protocol.errors import ORSError, SplitRequiredError, TraceExistsError
from ors_lab.viewer.watch import serve_watch

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from ors_lab.demo.run import run_demo  # pandas, pyarrow: only for this command

    run_demo(args.out, split=args.split, rollouts=args.rollouts, port=args.port)
    return 0


def _load_agent(spec: str) -> object:
    """``module:object`` (a dotted object path after the colon) → the object; a class is instantiated."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise argparse.ArgumentTypeError(f"--agent takes MODULE:OBJECT (e.g. mypkg.agents:solver), not {spec!r}")
    try:
        value: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise argparse.ArgumentTypeError(f"--agent {spec}: {exc}") from exc
    return value() if inspect.isclass(value) else value


def _episodes_path(trace: Path) -> Path:
    """Where ``ors-lab eval`` writes the episodes: ``run.parquet`` → ``run.episodes.parquet``."""
    return trace.with_name(f"{trace.stem}.episodes.parquet")


def _eval(args: argparse.Namespace) -> int:
    # pandas, pyarrow: only for this command
    from ors_lab.evaluation.run import discard_unstarted, evaluate, trace_exists
    from ors_lab.recording.recorder import Recorder  # pyarrow: as above

    if args.agent is not None and args.openai_model is not None:
        print("ors-lab eval: give --agent or --openai-model, not both", file=sys.stderr)
        return 2
    if args.agent is not None:
        agent = _load_agent(args.agent)
    elif args.openai_model is not None:
        agent = OpenAIAgent(args.openai_model, base_url=args.openai_base_url, api_key_env=args.openai_api_key_env)
    else:
        print("ors-lab eval: give --agent MODULE:OBJECT or --openai-model MODEL", file=sys.stderr)
        return 2
    if args.overwrite and args.resume:
        print("ors-lab eval: give --resume or --overwrite, not both", file=sys.stderr)
        return 2
    if args.workers is not None and args.ray is None:
        print("ors-lab eval: --workers N goes with --ray [ADDRESS]", file=sys.stderr)
        return 2
    backend = None
    if args.ray is not None:
        from ors_lab.evaluation.ray import RayBackend  # pandas, pyarrow: as above (Ray itself when the run starts)

        backend = RayBackend(address=args.ray or None, workers=args.workers or 1)
    resume = not args.overwrite and args.resume is not False
    out = Path(args.out)
    made = [d for d in (out.parent, *out.parent.parents) if not d.exists()]  # removed again if the run fails
    out.parent.mkdir(parents=True, exist_ok=True)
    created = not trace_exists(out)
    try:
        with Client(args.url) as client, contextlib.ExitStack() as stack:
            if backend is not None:
                stack.callback(backend.close)  # its workers, and the cluster it started, end with the run
            record: Path | Recorder = out
            if args.overwrite or args.redact or args.redact_pattern:  # else evaluate opens the trace itself
                record = stack.enter_context(Recorder(out, append=not created and resume, overwrite=args.overwrite,
                                                      **_redaction(args)))  # fmt: skip
            result = evaluate(client.environment(args.env), agent, split=args.split,  # type: ignore[arg-type]
                              tasks=args.tasks, rollouts=args.rollouts, concurrency=args.concurrency,
                              max_steps=args.max_steps, timeout=args.timeout, record=record,
                              resume=resume, feed=args.feed, backend=backend)  # fmt: skip
    except TraceExistsError:
        raise TraceExistsError(f"{out} already holds a trace; pass --resume to continue it or --overwrite to "
                               "replace it", path=str(out)) from None  # fmt: skip
    except Exception as exc:
        if created:  # a run that recorded nothing leaves nothing it made (evaluate removes a trace it opened)
            discard_unstarted(out)
            for directory in made if not trace_exists(out) else ():
                with contextlib.suppress(OSError):
                    directory.rmdir()
        if isinstance(exc, SplitRequiredError):  # in the command's terms: its option, not evaluate's keyword
            raise SplitRequiredError(exc.message.replace("pass split=", "pass --split"), environment=exc.environment,
                                     available=exc.available) from None  # fmt: skip
        raise
    episodes = _episodes_path(out)
    result.episodes.to_parquet(episodes, index=False)
    print(f"{result!r}\n{result.table_text()}\ntrace: {out}\nepisodes: {episodes}")
    return 0


def _watch(args: argparse.Namespace) -> int:
    serve_watch(args.feed, port=args.port, say=lambda text: print(text, flush=True))
    return 0


def _port(text: str) -> int:
    """An argparse type: a TCP port on 127.0.0.1, 0 for a free one."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port, 0 to 65535 (0: a free one), not {text!r}")
    return value


def _demo_server(args: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with serve(port=args.port) as server:
        print(f"demo environments served at {server.url} (Ctrl-C stops)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


def _show(args: argparse.Namespace) -> int:
    from ors_lab.analysis.show import summarize  # pandas, pyarrow: only for this command
    from ors_lab.analysis.trace import load_trace  # pandas, pyarrow: as above

    print(summarize(load_trace(args.trace)), end="")
    return 0


def _report(args: argparse.Namespace) -> int:
    from ors_lab.analysis.trace import load_trace  # pandas, pyarrow: only for this command

    trace = load_trace(args.trace)
    out = Path(args.out) if args.out else Path(args.trace).with_suffix(".html")
    print(trace.to_html(out, timelines=args.timelines).describe())
    return 0


def _compare(args: argparse.Namespace) -> int:
    from ors_lab.analysis.comparison import compare  # pandas, pyarrow: only for this command
    from ors_lab.viewer.compare import CompareState  # as above
    from ors_lab.viewer.compare_page import write_comparison  # as above

    comparison = compare(args.baseline, *args.candidates)
    print(CompareState(comparison).text())
    if args.out:
        print(write_comparison(comparison, Path(args.out)).describe())
    worse = [name for n, name in enumerate(comparison.names[1:])
             if (high := comparison.figures("reward", n).ci_high) is not None and high < 0]  # fmt: skip
    if args.fail_if_worse and worse:
        print(f"worse than the baseline (the 95% interval of the mean reward delta lies below 0): {', '.join(worse)}")
        return 1
    return 0


def _check(args: argparse.Namespace) -> int:
    from ors_lab.analysis.trace import load_trace  # pandas, pyarrow: only for this command
    from ors_lab.replay.check import call_streams, check_trace, format_violations  # pandas, pyarrow: as above

    trace = load_trace(args.trace)
    violations = check_trace(trace, ping_interval=args.ping_interval, ping_slack=args.ping_slack)
    print(format_violations(violations, streams=len(call_streams(trace))))
    return 1 if violations else 0


def _seconds(text: str) -> float:
    """An argparse type: a number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0 or more), not {text!r}")
    return value


def _speed(text: str) -> float:
    """An argparse type: a replay speed, a multiplier of 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"expected a speed, a multiplier of 0 or more (1 keeps the recorded timing, 2 is twice as fast, "
            f"0 does not wait), not {text!r}"
        )
    return value


def _fault(text: str) -> object:
    """An argparse type: a fault, as ``ors_lab.replay.faults`` writes them."""
    from ors_lab.replay.faults import Fault  # the replay loads pandas, pyarrow: only when --fault is given

    try:
        return Fault.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    """An argparse type: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number, 1 or more, not {text!r}")
    return value


def _whole(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 or more, not {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds, more than 0."""
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds more than 0, not {text!r}")
    return value


def _replay(args: argparse.Namespace) -> int:
    from ors_lab.replay.serve import run_replay  # pandas, pyarrow: only for this command

    def say(text: str) -> None:
        print(text, flush=True)

    unplayed = run_replay(args.trace, port=args.port, speed=args.speed, faults=args.fault,
                          allow_repeats=args.allow_repeats, say=say)  # fmt: skip
    if unplayed:
        say(f"{len(unplayed)} recorded requests were not played:")
        for line in unplayed:
            say(f"  {line}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from ors_lab.analysis import load_trace  # pandas, pyarrow: only for this command

    out = Path(args.out) if args.out else Path(args.trace).with_suffix(f".{args.format}.jsonl")
    written = load_trace(args.trace).write_conversations(out, args.format, min_reward=args.min_reward)
    print(f"{written} conversations ({args.format}) written to {out}")
    return 0


def _redaction(args: argparse.Namespace) -> dict[str, Any]:
    """The Recorder keywords for ``--redact`` and ``--redact-pattern``."""
    return {"redact_names": args.redact, "redact_patterns": args.redact_pattern}


def _proxy(args: argparse.Namespace) -> int:
    from ors_lab.replay.proxy import run_proxy  # pyarrow, starlette: only for this command

    bound: dict[str, Any] = {} if args.max_result_bytes is None else {"max_result_bytes": args.max_result_bytes}
    run_proxy(args.upstream, args.out, port=args.port, say=lambda text: print(text, flush=True),
              **bound, **_redaction(args))  # fmt: skip
    return 0


def _pattern(text: str) -> str:
    """An argparse type: a regular expression that compiles."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a valid regular expression: {text!r} ({exc})") from None
    return text


def _add_redaction(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redact", action="append", default=[], metavar="NAME",
                        help="also redact this header, query parameter or JSON key (any case; repeatable)")  # fmt: skip
    parser.add_argument("--redact-pattern", action="append", default=[], type=_pattern, metavar="REGEX",
                        help="also redact every match of this regular expression (repeatable)")  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ors-lab", description="Open Reward Standard environments, workable.")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of a failure too, before its line (also ORS_LAB_DEBUG=1)")  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="evaluate the demo agent on the bundled demo environments, recorded")
    demo.add_argument("--port", type=int, default=0, help="port for the demo server (default: a free one)")
    demo.add_argument("--split", default="test", help="split to take the tasks from (default: test)")
    demo.add_argument("--rollouts", type=_positive_int, default=2, help="episodes per task (default: 2)")
    demo.add_argument("--out", help="the trace to write (default: recordings/demo-DATE-TIME.parquet)")
    demo.set_defaults(run=_demo)
    evaluation = commands.add_parser("eval", help="evaluate an agent on an environment's split, recorded")
    evaluation.add_argument("url", help="the ORS server's base URL, e.g. http://127.0.0.1:8080")
    evaluation.add_argument("--env", required=True, help="the environment's name")
    evaluation.add_argument("--split", help="the split (default: the environment's only one; with several, say which)")
    evaluation.add_argument("--agent", metavar="MODULE:OBJECT", help="an agent or policy (a class is instantiated)")
    evaluation.add_argument("--openai-model", metavar="M", help="use the OpenAI-compatible agent with this model")
    evaluation.add_argument("--openai-base-url", metavar="U", help="the OpenAI-compatible server's base URL")
    evaluation.add_argument("--openai-api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                            help="the environment variable holding the API key (default: OPENAI_API_KEY)")  # fmt: skip
    evaluation.add_argument("--tasks", type=_positive_int, metavar="N", help="only the first N tasks (default: all)")
    evaluation.add_argument("--rollouts", type=_positive_int, default=1, help="episodes per task (default: 1)")
    evaluation.add_argument("--concurrency", type=_positive_int, default=8, help="open sessions at most (default: 8)")
    evaluation.add_argument("--max-steps", type=_positive_int, default=50, help="tool calls per episode (default: 50)")
    evaluation.add_argument(
        "--timeout", type=_positive_seconds, metavar="S", help="seconds per episode (default: no limit)"
    )
    evaluation.add_argument("--out", required=True, help="the trace (an existing one is continued: --resume)")
    evaluation.add_argument("--resume", action=argparse.BooleanOptionalAction, default=None,
                            help="continue an existing trace, running only the episodes it lacks (the default); "
                            "--no-resume refuses an existing trace")  # fmt: skip
    evaluation.add_argument("--overwrite", action="store_true", help="replace an existing trace")
    evaluation.add_argument("--feed", type=_port, metavar="PORT",
                            help="serve the run's events live on 127.0.0.1:PORT (0: a free port), for ors-lab watch "
                            "and ol.watch")  # fmt: skip
    evaluation.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                            help="run on Ray workers: a private cluster on this machine (loopback only), or the "
                            "cluster at ADDRESS (auto, ray://HOST:PORT)")  # fmt: skip
    evaluation.add_argument(
        "--workers",
        type=_positive_int,
        metavar="N",
        help="Ray workers, each with its own client, agent and --concurrency (default: 1)",
    )
    _add_redaction(evaluation)
    evaluation.set_defaults(run=_eval)
    watching = commands.add_parser("watch", help="show the live dashboard of a run behind its live feed, as a page")
    watching.add_argument(
        "feed", help="the live feed's URL (what ors-lab eval --feed says), e.g. http://127.0.0.1:8765"
    )
    watching.add_argument("--port", type=_port, default=0, help="port of the page, on 127.0.0.1 (default: a free one)")
    watching.set_defaults(run=_watch)
    server = commands.add_parser("demo-server", help="serve the bundled demo environments until Ctrl-C")
    server.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    server.set_defaults(run=_demo_server)
    proxy = commands.add_parser("proxy", help="record any client's traffic to an ORS server into a trace")
    proxy.add_argument("upstream", help="the ORS server's base URL, e.g. http://127.0.0.1:8080")
    proxy.add_argument("--port", type=int, default=0, help="port to listen on, on 127.0.0.1 (default: a free one)")
    proxy.add_argument("--out", required=True, help="the trace file to write (must not exist)")
    _add_redaction(proxy)
    proxy.add_argument("--max-result-bytes", type=_positive_int, metavar="N",
                       help="end a /call stream larger than this (default: 256 MiB)")  # fmt: skip
    proxy.set_defaults(run=_proxy)
    show = commands.add_parser("show", help="print a summary of a recorded trace")
    show.add_argument("trace", help="the trace file (its .parts directory is read if the recording never closed)")
    show.set_defaults(run=_show)
    report = commands.add_parser("report", help="write a recorded run's report: one HTML file to share, offline")
    report.add_argument("trace", help="the trace file (its .parts directory is read if the recording never closed)")
    report.add_argument("-o", "--out", metavar="HTML",
                        help="the page to write, replaced if there (default: the trace's name with .html)")  # fmt: skip
    report.add_argument("--timelines", type=_whole, default=None, metavar="N",
                        help="hold the timelines and transcripts of N episodes at most, the failed ones first "
                        "(default: 2000)")  # fmt: skip
    report.set_defaults(run=_report)
    export = commands.add_parser("export", help="write each episode's conversation as an LLM API's messages (JSONL)")
    export.add_argument("trace", help="the trace file (its .parts directory is read if the recording never closed)")
    export.add_argument("--format", required=True, choices=list(FORMATS),
                        help="the API whose messages to write: openai (chat completions), anthropic (Messages), "
                        "responses (the Responses API)")  # fmt: skip
    export.add_argument("--min-reward", type=float, metavar="R", help="only the episodes whose reward is R or more")
    export.add_argument("-o", "--out", metavar="FILE",
                        help="the JSONL file to write, replaced if there (default: the trace's name with "
                        ".FORMAT.jsonl)")  # fmt: skip
    export.set_defaults(run=_export)
    comparing = commands.add_parser("compare", help="compare runs with a baseline, task by task (paired statistics)")
    comparing.add_argument("baseline", help="the baseline run's trace")
    comparing.add_argument("candidates", nargs="+", metavar="candidate", help="a run's trace to compare with it")
    comparing.add_argument("-o", "--out", metavar="HTML", help="also write the comparison's page (replaced if there)")
    comparing.add_argument(
        "--fail-if-worse",
        action="store_true",
        help="exit 1 when a candidate's 95%% interval of the mean reward delta lies below 0",
    )
    comparing.set_defaults(run=_compare)
    check = commands.add_parser("check", help="check every /call stream of a trace against the ORS protocol")
    check.add_argument("trace", help="the trace file (its .parts directory is read if the recording never closed)")
    check.add_argument(
        "--ping-interval",
        type=_positive_seconds,
        default=10.0,
        metavar="S",
        help="how often the server pings a running call, in seconds (default: 10, as both reference servers)",
    )
    check.add_argument(
        "--ping-slack",
        type=_seconds,
        default=2.5,
        metavar="S",
        help="how late a ping may be before the silence is a violation, in seconds (default: 2.5)",
    )
    check.set_defaults(run=_check)
    replay = commands.add_parser("replay", help="serve a recorded trace as an ORS server on 127.0.0.1")
    replay.add_argument("trace", help="the trace file")
    replay.add_argument("--port", type=int, default=0, help="port to listen on, on 127.0.0.1 (default: a free one)")
    replay.add_argument("--speed", type=_speed, default=1.0, metavar="X",
                        help="1 keeps the recorded timing, N is N times faster, 0 does not wait")  # fmt: skip
    replay.add_argument("--fault", action="append", default=[], type=_fault, metavar="FAULT",
                        help="inject a fault: cut:K, stall:S, status:CODE, malformed, no-pings; add ,tool=NAME "
                        "and ,times=N to aim it (repeatable)")  # fmt: skip
    replay.add_argument("--allow-repeats", action="store_true", help="answer a request again when it repeats")
    replay.set_defaults(run=_replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ors-lab`` console script: expected failures end in one line, not a traceback
    (``--debug`` or ``ORS_LAB_DEBUG=1``: the traceback first)."""
    args = _parser().parse_args(argv)
    debug = args.debug or os.environ.get("ORS_LAB_DEBUG", "") not in ("", "0")
    try:
        return int(args.run(args))
    except (ORSError, OSError, httpx2.HTTPError, argparse.ArgumentTypeError, ValueError) as exc:
        if debug:
            traceback.print_exc()
        if isinstance(exc, TraceExistsError) and args.command != "eval":  # the Recorder's words name its keywords
            exc = TraceExistsError(f"{exc.path} already holds a trace; choose another --out", path=exc.path)
        print(f"ors-lab {args.command}: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print(f"ors-lab {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    """An expected failure as one line; a network error keeps its type's name (``ConnectError: ...``)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.strerror:  # "[Errno 2] No such file..." without the number
        text = exc.strerror if exc.filename is None else f"{exc.strerror}: {exc.filename}"
    elif not isinstance(exc, ORSError | OSError | argparse.ArgumentTypeError | ValueError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
