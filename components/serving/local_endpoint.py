"""The rollout on this machine (`rollout.Target`): the champion and the new model each in a
real model-server process on loopback, a weighted router in front (as an endpoint's
traffic split), and the test split's images sent through it as traffic.

The router forwards each request to one model by the split (a deterministic weighted
round-robin: with 10 %, every tenth request goes to the canary) and measures, per model,
what came back and how long it took: the figures the rule reads. The window ends when the
canary has answered `deploy.min_requests`, or after `deploy.traffic_requests` requests, or
at `deploy.watch_window`, whichever comes first; the grace period is not waited for (no
one else calls these servers). A promotion makes the new version the local registry's
default; everything is stopped afterwards (`close`).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any

from components.export import local_registry
from components.serving.deploy_options import DeployOptions
from components.serving.model_server import model_server, post, send
from components.serving.rollout import Figures
from components.serving.serving_check import held_out_images, percentile
from trainer.serving.container import PREDICT_ROUTE, encoded_instance

#: Distinct test images sent round and round as the traffic.
TRAFFIC_IMAGES = 64


class Router:
    """A weighted HTTP router on loopback in front of model servers, measuring each."""

    def __init__(self) -> None:
        self.backends: dict[str, str] = {}  # name -> base URL
        self.weights: dict[str, int] = {}
        self.answers: dict[str, list[tuple[bool, float]]] = {}
        self._sent = 0
        self._lock = threading.Lock()
        router = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, data = router.forward(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self._server.server_port}"
        self.url = self.base + PREDICT_ROUTE
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def choose(self) -> str:
        """The next request's model: smooth weighted round-robin over the split."""
        with self._lock:
            self._sent += 1
            count = self._sent
        for name, weight in sorted(self.weights.items()):
            if weight and (count * weight) // 100 > ((count - 1) * weight) // 100:
                return name
        return max(self.weights, key=lambda n: self.weights[n])

    def forward(self, body: bytes) -> tuple[int, bytes]:
        name = self.choose()
        try:
            status, data, seconds = send(self.backends[name] + PREDICT_ROUTE, body)
        except OSError as error:  # the model's server did not answer
            status, data, seconds = 502, json.dumps({"error": str(error)}).encode(), 0.0
        with self._lock:
            self.answers.setdefault(name, []).append((status == 200, seconds))
        return status, data

    def figures(self, name: str) -> Figures:
        with self._lock:
            answers = list(self.answers.get(name, []))
        times = [seconds for _, seconds in answers]
        return Figures(len(answers), sum(not ok for ok, _ in answers),
                       percentile(times, 0.95) if times else None)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class LocalEndpoint:
    """A rollout of the local registry's version `version` of `model_dir`'s model.

    Args:
        model_dir: The model's directory in the local registry.
        version: The new version (registered, not yet the default).
        dataset_dir: The prepared dataset (its test split is the traffic).
        rule: The deploy options.
    """

    def __init__(self, model_dir: str | Path, version: str, dataset_dir: str | Path,
                 rule: DeployOptions):
        self.model_dir, self.version, self.rule = Path(model_dir), version, rule
        self.images = held_out_images(dataset_dir, "test", TRAFFIC_IMAGES)
        index = local_registry.load(self.model_dir)
        self.champion_version = index["default"] if index["default"] != version else None
        self.router = Router()
        self.done = threading.Event()
        self._servers: dict[str, contextlib.ExitStack] = {}
        self._traffic: threading.Thread | None = None

    def champion(self) -> str | None:
        if self.champion_version is None:
            return None
        return f"version {self.champion_version} (the local registry's default)"

    def _start(self, name: str, version: str) -> None:
        _, saved = local_registry.served(self.model_dir.parent, self.model_dir.name, version)
        stack = contextlib.ExitStack()
        base = stack.enter_context(model_server(saved))
        self._servers[name] = stack
        # Its first request pays for tracing the model (a tenth of a second here), which
        # an endpoint's replica has done before it takes traffic; it is not measured.
        post(base, _instances(self.images[0]))
        self.router.backends[name] = base

    def _stop(self, name: str) -> None:
        stack = self._servers.pop(name, None)
        if stack is not None:
            stack.close()

    def deploy(self, percent: int) -> str:
        self._start("canary", self.version)
        if self.champion_version is not None:
            self._start("champion", self.champion_version)
        self.router.weights = {"canary": percent,
                               **({"champion": 100 - percent} if percent < 100 else {})}
        if percent < 100:
            self._traffic = threading.Thread(target=self._send_traffic, daemon=True)
            self._traffic.start()
        # The router lives as long as this step (`gpu-pipeline serve` starts one that stays).
        return (f"version {self.version} in a model server behind {self.router.url} (this "
                "step's router, stopped when it ends)")

    def _send_traffic(self) -> None:
        sent = 0
        while sent < self.rule.traffic_requests and not self.done.is_set():
            with contextlib.suppress(OSError):
                post(self.router.base, _instances(self.images[sent % len(self.images)]))
            sent += 1
            if self.router.figures("canary").requests >= self.rule.min_requests:
                break
        self.done.set()

    def figures(self) -> tuple[Figures, Figures | None]:
        return (self.router.figures("canary"),
                self.router.figures("champion") if self.champion_version else None)

    def promote(self) -> None:
        self.router.weights = {"canary": 100, "champion": 0}
        local_registry.set_default(self.model_dir, self.version)

    def retire(self) -> None:
        self._stop("champion")

    def keep_old(self, seconds: float) -> str:
        """No one else calls these servers: the old one stops now, as at 0s."""
        self.retire()
        return ""

    def retire_expired(self) -> list[str]:
        return []  # every server of an earlier run stopped with it

    def roll_back(self) -> None:
        self.router.weights = {"champion": 100, "canary": 0}
        self._stop("canary")

    # The window's clock and waits: it ends when the traffic has been sent.
    def clock(self) -> float:
        return time.monotonic() + (1e9 if self.done.is_set() else 0.0)

    def sleep(self, seconds: float) -> None:
        self.done.wait(seconds)

    def close(self) -> None:
        """Stops the traffic, the servers and the router."""
        self.done.set()
        if self._traffic is not None:
            self._traffic.join(timeout=120)
        for name in list(self._servers):
            self._stop(name)
        self.router.close()


def _instances(image: bytes) -> dict[str, Any]:
    """One image as the predict route takes it."""
    return {"instances": [encoded_instance(image)]}
