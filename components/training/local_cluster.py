"""Local training: the trainer as several worker processes on localhost.

Each process gets TF_CONFIG in the format Vertex AI sets (one `chief`, the rest
`worker` from index 0), so the trainer runs exactly as it does on a Vertex cluster.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Sequence, TextIO

from trainer.cluster import vertex_tf_config
from trainer.errors import StageError


class LocalTrainingError(StageError):
    """A worker process failed or the cluster did not finish in time."""


def free_ports(count: int) -> list[int]:
    """Returns `count` distinct free TCP ports on the loopback interface."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def cluster_environments(num_workers: int, base_env: dict[str, str]) -> list[dict[str, str]]:
    """Environments of the `num_workers` processes: chief first, then workers 0..n-2."""
    if num_workers < 1:
        raise LocalTrainingError(f"num_workers is {num_workers}; expected >= 1")
    addresses = [f"localhost:{p}" for p in free_ports(num_workers)]
    envs = []
    for i in range(num_workers):
        task_type, index = ("chief", 0) if i == 0 else ("worker", i - 1)
        env = dict(base_env)
        if num_workers > 1:
            env["TF_CONFIG"] = vertex_tf_config(addresses[0], addresses[1:], task_type, index)
        else:
            env.pop("TF_CONFIG", None)
        envs.append(env)
    return envs


def _pump(stream, out: TextIO | None, tail: deque) -> None:
    for line in iter(stream.readline, ""):
        tail.append(line.rstrip("\n"))
        target = out or sys.stdout  # looked up per line: KFP may redirect stdout
        target.write(line)
        target.flush()


def run_local_cluster(num_workers: int, trainer_args: Sequence[str],
                      timeout_seconds: float = 1800, out: TextIO | None = None) -> None:
    """Runs `python -m trainer.task` as `num_workers` processes and waits for all.

    If one process fails, the others are stopped (they would otherwise wait forever in
    a collective) and the error carries the end of the failed process's log.

    Args:
        num_workers: Processes to start (1 chief + num_workers-1 workers).
        trainer_args: Arguments for trainer.task.
        timeout_seconds: Stop everything after this long.
        out: Where the processes' output lines go (default: stdout).

    Raises:
        LocalTrainingError: A process failed or the timeout passed.
    """
    base = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
            "PYTHONUNBUFFERED": "1"}
    procs: list[tuple[str, subprocess.Popen, deque, threading.Thread]] = []
    for i, env in enumerate(cluster_environments(num_workers, base)):
        name = "chief" if i == 0 else f"worker-{i - 1}"
        proc = subprocess.Popen([sys.executable, "-m", "trainer.task", *trainer_args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1)
        tail: deque = deque(maxlen=40)
        pump = threading.Thread(target=_pump, args=(proc.stdout, out, tail), daemon=True)
        pump.start()
        procs.append((name, proc, tail, pump))

    deadline = time.monotonic() + timeout_seconds
    failed: tuple[str, int, deque] | None = None
    try:
        while True:
            codes = [(name, p.poll(), tail) for name, p, tail, _ in procs]
            failed = next(((n, c, t) for n, c, t in codes if c not in (None, 0)), None)
            if failed or all(c == 0 for _, c, _ in codes):
                break
            if time.monotonic() > deadline:
                raise LocalTrainingError(f"training did not finish within {timeout_seconds:.0f} s")
            time.sleep(0.2)
    finally:
        for _, p, _, _ in procs:
            if p.poll() is None:
                p.terminate()
        for _, p, _, pump in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            pump.join(timeout=5)
    if failed:
        name, code, tail = failed
        raise LocalTrainingError(f"training process {name} exited with code {code}; last lines:\n"
                                 + "\n".join(tail))
