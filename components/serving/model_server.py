"""The registered model's serving container, run here: aiplatform's CPR model server
(`python -m google.cloud.aiplatform.prediction.model_server`) with the project's predictor,
configured as Vertex AI configures a custom container (`trainer.serving.container`: the
`AIP_*` variables, the handler and predictor settings), on loopback.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from components.training.local_cluster import free_ports
from trainer.common.errors import InputError, StageError
from trainer.serving import container

#: How long the server may take to load TensorFlow and the model and answer its health
#: route (about 10 s on two cores).
STARTUP_SECONDS = 180.0
#: Loopback requests must not go through the environment's proxy.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerError(StageError):
    """The model server did not start, or stopped."""


def server_environment(model_dir: str, port: int) -> dict[str, str]:
    """The environment Vertex AI gives the serving container (Vertex AI docs: "Custom
    container requirements for prediction"), with the container spec's own."""
    return {**os.environ, **container.ENVIRONMENT, "AIP_HTTP_PORT": str(port),
            "AIP_PREDICT_ROUTE": container.PREDICT_ROUTE,
            "AIP_HEALTH_ROUTE": container.HEALTH_ROUTE, "AIP_STORAGE_URI": str(model_dir),
            "TF_CPP_MIN_LOG_LEVEL": "2"}


class CannotListenError(InputError):
    """The host or port asked for cannot be listened on (taken, or not this machine's)."""


def check_port(host: str, port: int) -> None:
    """Refuses a port something already listens on, before the server loads TensorFlow.

    Raises:
        CannotListenError: Naming the port and the flag that changes it.
    """
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn binds (SO_REUSEADDR): a port whose last server just stopped, its
        # connections in TIME_WAIT, can be listened on again at once; one a server
        # listens on still cannot.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except (socket.gaierror, OverflowError) as exc:  # no such interface, or port
            raise CannotListenError(
                f"--host {host!r} --port {port} cannot be listened on ({exc}); give an "
                "address of this machine (127.0.0.1, 0.0.0.0) and a port from 1 to "
                "65535") from None
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise CannotListenError(
                    f"--host {host} is not an address of this machine; give one of its "
                    "addresses, 127.0.0.1 (this machine only) or 0.0.0.0 (every "
                    "interface)") from None
            if exc.errno == errno.EACCES:
                raise CannotListenError(
                    f"port {port} on {host} needs privileges this user lacks (ports below "
                    "1024); choose one from 1024 up, e.g. --port 8080") from None
            raise CannotListenError(
                f"port {port} on {host} is taken ({exc.strerror or exc}); choose another "
                f"with --port, e.g. --port {port + 1}") from None


@contextlib.contextmanager
def model_server(model_dir: str, *, port: int = 0, host: str | None = None,
                 startup_seconds: float = STARTUP_SECONDS) -> Iterator[str]:
    """Runs the model server on `model_dir` until the block ends; yields its base URL.

    Args:
        model_dir: The model (a SavedModel and the serving files).
        port: Its port (0: a free one).
        host: Where it listens: None runs aiplatform's own `__main__`, as the serving
            container does (every interface); a host runs the same app bound there
            (`trainer.serving.loopback_server`).
        startup_seconds: How long it may take to answer its health route.

    Raises:
        ServerError: It exited, or did not answer its health route in time (its output's
            last lines say why).
    """
    command = [sys.executable, "-m", container.SERVER_MODULE] if host is None else \
        [sys.executable, "-m", "trainer.serving.loopback_server", "--host", host]
    # A port found free can be taken by another process before the server binds it: a
    # server that could not bind a port chosen here is started again on another.
    for attempt in range(1 if port else PORT_ATTEMPTS):
        chosen = port or free_ports(1)[0]
        with tempfile.TemporaryFile("w+") as log:
            process = subprocess.Popen(command, env=server_environment(model_dir, chosen),
                                       stdout=log, stderr=subprocess.STDOUT)
            base = f"http://{_reach(host)}:{chosen}"
            try:
                try:
                    _wait_healthy(base, process, log, startup_seconds)
                except ServerError as exc:
                    if port or attempt == PORT_ATTEMPTS - 1 or not _port_taken(str(exc)):
                        raise
                    continue
                yield base
                return
            finally:
                _stop(process)


#: Ports tried for a server whose port is chosen here.
PORT_ATTEMPTS = 3


def _port_taken(said: str) -> bool:
    """Whether a server's last lines say its port was taken."""
    return "address already in use" in said.lower() or "errno 98" in said.lower()


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _reach(host: str | None) -> str:
    """How this machine reaches a server listening on `host` (every interface: loopback)."""
    if host in (None, "", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _wait_healthy(base: str, process: subprocess.Popen, log: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with _DIRECT.open(base + container.HEALTH_ROUTE, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException):
            pass  # not up yet, or another program answers on the port (then the server exits)
        if process.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            tail = "\n".join(log.read().splitlines()[-15:])
            state = f"exited with {process.returncode}" if process.poll() is not None \
                else f"did not answer {container.HEALTH_ROUTE} in {seconds:.0f} s"
            raise ServerError(f"the model server ({container.SERVER_MODULE}) {state}:\n{tail}")
        time.sleep(0.3)


def send(url: str, data: bytes, timeout: float = 60.0) -> tuple[int, bytes, float]:
    """POSTs JSON `data` to `url` on loopback (no proxy); returns (HTTP status, the raw
    answer, seconds taken). An HTTP error is an answer; a connection error raises OSError."""
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with _DIRECT.open(request, timeout=timeout) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    return status, body, time.perf_counter() - started


def post(base: str, body: dict[str, Any], timeout: float = 60.0) -> tuple[int, Any, float]:
    """POSTs a prediction request; returns (HTTP status, JSON answer, seconds taken)."""
    status, data, seconds = send(base + container.PREDICT_ROUTE, json.dumps(body).encode(),
                                 timeout)
    try:
        return status, json.loads(data), seconds
    except ValueError:
        return status, data.decode("utf-8", "replace"), seconds
