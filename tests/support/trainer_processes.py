"""Trainer processes for the restart tests: a local cluster started as Vertex AI starts its
replicas, and killed mid-training as a maintenance event would."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from components.training.local_cluster import cluster_environments
from trainer.cluster.roles import Layout

#: A chief's epoch line: the epoch done, and the last epoch.
EPOCH_LINE = re.compile(r"\[trainer chief:0\] epoch (\d+)/(\d+):")


def start(layout: Layout, args: list[str]) -> list[subprocess.Popen]:
    """`python -m trainer.task ARGS` per replica of `layout`, chief first."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    return [subprocess.Popen([sys.executable, "-m", "trainer.task", *args], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _, e in cluster_environments(layout, env)]


def finish(procs: list[subprocess.Popen]) -> list[str]:
    """The processes' logs, once each has ended with 0."""
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), "\n".join(
        log[-3000:] for log in logs)
    return logs


def kill_after_epoch(chief: subprocess.Popen, worker: subprocess.Popen, epoch: int,
                     seconds: float) -> tuple[str, list[int]]:
    """Kills the worker once the chief reports `epoch` done, then the chief; returns the
    chief's log and the epochs it reported done."""
    log = []
    deadline = time.monotonic() + seconds
    for line in chief.stdout:
        log.append(line)
        match = EPOCH_LINE.search(line)
        if match and int(match.group(1)) >= epoch:
            worker.send_signal(signal.SIGKILL)
            break
        assert time.monotonic() < deadline, "".join(log)
    worker.wait()
    chief.send_signal(signal.SIGKILL)
    log.extend(chief.stdout.read().splitlines(keepends=True))
    chief.wait()
    text = "".join(log)
    return text, [int(done) for done, _ in EPOCH_LINE.findall(text)]
