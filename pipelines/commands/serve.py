"""`gpu-pipeline serve`: the local champion (or a named version) in the model server the
serving container runs, on this machine, until stopped (Ctrl-C)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from pipelines.commands.predict import add_model_flags, local_model

#: Where `serve` listens unless told otherwise: this machine only.
LOOPBACK = "127.0.0.1"


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser(
        "serve", help="Serve the local champion over HTTP, as Vertex AI would, until Ctrl-C.")
    parser.add_argument("--port", type=int, default=8080,
                        help="The HTTP port (default: %(default)s, Vertex AI's).")
    parser.add_argument("--host", default=LOOPBACK, help=(
        "The interface to listen on (default: %(default)s, this machine only; 0.0.0.0 "
        "offers the model to every network this machine is on)."))
    add_model_flags(parser)


def run(args: argparse.Namespace) -> int:
    """Starts the server, says how to call it, and waits."""
    from components.serving.model_server import check_port, model_server
    from components.stage_messages import say
    from trainer.serving.container import HEALTH_ROUTE, PREDICT_ROUTE

    entry, saved = local_model(args)
    check_port(args.host, args.port)  # before TensorFlow loads: one line, not its logs
    if args.host != LOOPBACK:
        say(f"serve: warning: listening on {args.host}, not {LOOPBACK}: anyone who can reach "
            "this machine on that interface can call the model (there is no authentication)")
    say(f"serve: {args.model} version {entry['version']} ({saved}); starting the model "
        f"server (aiplatform's CprModelServer, as the serving container runs it) on "
        f"{args.host}:{args.port}")
    with model_server(saved, port=args.port, host=args.host) as base:
        say(f"serve: ready at {base}{PREDICT_ROUTE} (health: {base}{HEALTH_ROUTE}); Ctrl-C "
            "stops it. A request:")
        print(request_example(base))
        while True:
            time.sleep(3600)


def request_example(base: str) -> str:
    """A shell command that sends one image to the server (the request Vertex AI's
    endpoint takes too)."""
    from trainer.serving.container import PREDICT_ROUTE

    return ("  printf '{\"instances\": [{\"b64\": \"%s\"}]}' \"$(base64 -w0 IMAGE.png)\" | "
            f"curl -s -H 'Content-Type: application/json' -d @- {base}{PREDICT_ROUTE}")
