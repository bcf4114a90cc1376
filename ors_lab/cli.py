"""The ``ors-lab`` command line.

- ``ors-lab demo``: start the bundled demo environments on 127.0.0.1, run a short scripted
  session on each, and print the prompts, the tool calls and the rewards.
- ``ors-lab demo-server [--port P]``: serve the demo environments until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Sequence

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from ors_lab.client import Client
    from ors_lab.demo.launch import serve
    from ors_lab.demo.script import run_scripted_demo

    with serve(port=args.port) as server:
        print(f"demo environments served at {server.url}")
        with Client(server.url) as client:
            run_scripted_demo(client, split=args.split, index=args.index)
    return 0


def _demo_server(args: argparse.Namespace) -> int:
    from ors_lab.demo.launch import serve

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with serve(port=args.port) as server:
        print(f"demo environments served at {server.url} (Ctrl-C stops)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ors-lab", description="Open Reward Standard environments, workable.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="run a scripted session on the bundled demo environments")
    demo.add_argument("--port", type=int, default=0, help="port for the demo server (default: a free one)")
    demo.add_argument("--split", default="test", help="split to take the tasks from (default: test)")
    demo.add_argument("--index", type=int, default=0, help="task index in the split (default: 0)")
    demo.set_defaults(run=_demo)
    server = commands.add_parser("demo-server", help="serve the bundled demo environments until Ctrl-C")
    server.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    server.set_defaults(run=_demo_server)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ors-lab`` console script."""
    args = _parser().parse_args(argv)
    from ors_lab.protocol.errors import ORSError

    try:
        return int(args.run(args))
    except ORSError as exc:
        print(f"ors-lab {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
