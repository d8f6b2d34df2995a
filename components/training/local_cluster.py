"""Local training: the trainer as one process per replica on localhost.

Each process gets TF_CONFIG and CLUSTER_SPEC in the format Vertex AI sets them (`chief`,
then `worker`, `ps` from index 0, and an `evaluator` that is not in the cluster), so the
trainer runs exactly as it does on a Vertex cluster, in every layout of roles.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TextIO

from trainer.cluster.local import LOCAL_CLUSTER_ENV, LOCAL_CORES_ENV
from trainer.cluster.roles import ROLES, Layout
from trainer.cluster.tf_config import vertex_tf_config
from trainer.cluster.training_plan import TrainingPlan, plan_training
from trainer.common.errors import StageError

#: Seconds the replicas that do not decide the outcome (parameter servers, PS workers,
#: the evaluator) get to end by themselves once training is done.
WIND_DOWN_SECONDS = 120
#: Seconds the processes get to end after TERM before KILL. A multi-worker process
#: outlives TERM: TensorFlow's coordination service catches it as a preemption notice
#: (its SIGTERM preemption notifier), so waiting longer only delays the KILL.
STOP_GRACE_SECONDS = 3


class LocalTrainingError(StageError):
    """A process of the local cluster failed or the cluster did not finish in time."""


class ClusterStopped(LocalTrainingError):
    """The cluster was stopped on request (`stop`) before training ended."""


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


def replica_names(layout: Layout) -> list[tuple[str, int]]:
    """(task type, index) of every replica of a layout, in Vertex AI's pool order."""
    return ([("chief", 0)] + [("worker", i) for i in range(layout.workers)]
            + [("ps", i) for i in range(layout.parameter_servers)]
            + [("evaluator", i) for i in range(layout.evaluators)])


def cluster_environments(layout: Layout, base_env: dict[str, str]
                         ) -> list[tuple[str, dict[str, str]]]:
    """(name, environment) of every process: TF_CONFIG and CLUSTER_SPEC as Vertex AI sets
    them (no TF_CONFIG for a single replica, no evaluator in the cluster)."""
    replicas = replica_names(layout)
    addresses = iter(f"localhost:{p}" for p in free_ports(len(replicas)))
    by_role: dict[str, list[str]] = {}
    for task_type, _ in replicas:
        by_role.setdefault(task_type, []).append(next(addresses))
    pools = {f"workerpool{i}": by_role[role] for i, role in enumerate(ROLES) if role in by_role}
    pool_of = {role: i for i, role in enumerate(ROLES)}
    envs = []
    for task_type, index in replicas:
        env = {**base_env, LOCAL_CLUSTER_ENV: "1"}
        if len(replicas) > 1:
            env["TF_CONFIG"] = vertex_tf_config(by_role, task_type, index)
        else:
            env.pop("TF_CONFIG", None)
        env["CLUSTER_SPEC"] = json.dumps({
            "cluster": pools, "environment": "cloud",
            "task": {"type": f"workerpool{pool_of[task_type]}", "index": index}})
        name = "chief" if task_type == "chief" else f"{task_type}-{index}"
        envs.append((name, env))
    return envs


def core_sets(names: Sequence[str], cores: Sequence[int]) -> dict[str, list[int]]:
    """Disjoint sets of cores for the training processes (the chief and the workers).

    Each TensorFlow process sizes its thread pools for every core it may run on, so
    processes sharing a machine oversubscribe it: two workers on two cores ran each step
    ~25% slower unpinned (benchmarks/multiworker.py). When there are at least as many cores
    as training processes, each gets an equal share of its own; otherwise (and for the
    parameter servers and the evaluator, which mostly wait) nothing is pinned.

    Args:
        names: Process names (`chief`, `worker-0`, `ps-0`, `evaluator-0`, ...).
        cores: The cores this process may use.

    Returns:
        Cores per pinned process name; names not in it run unpinned.
    """
    training = [n for n in names if n == "chief" or n.startswith("worker-")]
    share = len(cores) // len(training) if training else 0
    if share < 1:
        return {}
    ordered = sorted(cores)
    return {name: ordered[i * share:(i + 1) * share] for i, name in enumerate(training)}


#: TensorFlow's start-up and device notices (absl's `I0000 00:00:...` lines, oneDNN, CUDA
#: probing on a machine without GPUs): in every process's log, and never a run's reason.
TENSORFLOW_CHATTER = re.compile(
    r"^\s*([IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog"
    r"|.*This TensorFlow binary is optimized|.*To enable the following instructions"
    r"|.*oneDNN custom operations are on)")
#: A line that says why a trainer failed: its own error line, or a traceback's last line.
_REASON = re.compile(r"^(trainer: |[A-Za-z_.]*(Error|Exception|Exit)\b.*: )")


def failure_summary(name: str, code: int | None, tail: Sequence[str]) -> str:
    """A failed process in a few lines: its reason first (its own error line, or the
    last line of its traceback), then its last other lines (a traceback), without
    TensorFlow's chatter or its progress lines, which its log already shows."""
    lines = [line for line in tail if line.strip() and not TENSORFLOW_CHATTER.match(line)]
    reasons = [line for line in lines if _REASON.match(line)]
    reason = reasons[-1] if reasons else "no error line (see its log above)"
    before = [line for line in lines
              if line != reason and not line.startswith("[trainer ")][-12:]
    return (f"training process {name} exited with code {code}: {reason}"
            + ("\nits last lines:\n" + "\n".join(before) if before else ""))


def _pump(stream, out: TextIO | None, tail: deque) -> None:
    for line in iter(stream.readline, ""):
        tail.append(line.rstrip("\n"))
        target = out or sys.stdout  # looked up per line: KFP may redirect stdout
        target.write(line)
        target.flush()


def run_local_cluster(layout: Layout, trainer_args: Sequence[str], strategy: str = "auto",
                      timeout_seconds: float = 1800, out: TextIO | None = None, *,
                      cores: Sequence[int] | None = None,
                      environ: Mapping[str, str] | None = None,
                      stop: threading.Event | None = None,
                      plan: TrainingPlan | None = None) -> str:
    """Runs `python -m trainer.task` as one process per replica of `layout`.

    Training is done when the replicas that decide it have ended with 0: the chief and
    the workers under MultiWorkerMirroredStrategy, the chief (the coordinator) under
    ParameterServerStrategy, whose workers and parameter servers then stop by themselves,
    as the evaluator does after its last evaluation. A process that fails stops the
    others (they would otherwise wait forever), except a worker under
    ParameterServerStrategy, which the coordinator survives. The error carries the end of
    the failed process's log.

    Args:
        layout: Replicas of each role (the chief is always one).
        trainer_args: Arguments for trainer.task.
        strategy: The `training.strategy` option, for replicas without a `plan`.
        timeout_seconds: Stop everything after this long.
        out: Where the processes' output lines go (default: stdout).
        cores: The cores the cluster may use (default: all this process may); clusters
            that run side by side (tuning trials) get disjoint sets.
        environ: Variables added to the processes' environment.
        stop: Once set, the processes are stopped (a tuning trial stopped early).
        plan: The training plan every process applies (`--training-plan`); without it,
            each makes one by the same rules from TF_CONFIG and `trainer_args`.

    Returns:
        The strategy the cluster ran.

    Raises:
        LocalTrainingError: A process failed or the timeout passed.
        ClusterStopped: `stop` was set before training ended.
    """
    # Without a plan the replicas each make the same one; its strategy says whose end counts.
    chosen = (plan or plan_training(layout, strategy=strategy)).strategy
    if plan is not None:
        trainer_args = [*trainer_args, "--training-plan", plan.to_json()]
    replicas = _start(layout, trainer_args, out, cores, environ or {})
    # The replicas whose success ends training, and those whose failure does not end it.
    deciding = {"chief"} | ({f"worker-{i}" for i in range(layout.workers)}
                            if chosen == "multi_worker_mirrored" else set())
    tolerated = {f"worker-{i}" for i in range(layout.workers)} \
        if chosen == "parameter_server" else set()
    try:
        failed = _wait(replicas, deciding, tolerated, time.monotonic() + timeout_seconds,
                       timeout_seconds, stop or threading.Event())
    finally:
        _stop(replicas)
    if failed:
        raise LocalTrainingError(failure_summary(failed.name, failed.process.returncode,
                                                 list(failed.tail)))
    return chosen


@dataclasses.dataclass
class _Replica:
    """A trainer process, its last output lines and the thread that relays its output."""

    name: str
    process: subprocess.Popen
    tail: deque
    pump: threading.Thread


def _start(layout: Layout, trainer_args: Sequence[str], out: TextIO | None,
           cores: Sequence[int] | None, environ: Mapping[str, str]) -> list[_Replica]:
    """One `python -m trainer.task` per replica, each on its own cores when there are
    enough (the trainer pins itself before TensorFlow starts)."""
    base = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
            "PYTHONUNBUFFERED": "1", **environ}
    environments = cluster_environments(layout, base)
    usable = sorted(cores if cores is not None else os.sched_getaffinity(0))
    pinned = core_sets([name for name, _ in environments], usable) \
        if len(environments) > 1 or cores is not None else {}
    replicas = []
    for name, env in environments:
        env.pop(LOCAL_CORES_ENV, None)
        if name in pinned:
            env[LOCAL_CORES_ENV] = ",".join(map(str, pinned[name]))
        process = subprocess.Popen([sys.executable, "-m", "trainer.task", *trainer_args],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, bufsize=1)
        tail: deque = deque(maxlen=40)
        pump = threading.Thread(target=_pump, args=(process.stdout, out, tail), daemon=True)
        pump.start()
        replicas.append(_Replica(name, process, tail, pump))
    return replicas


def _wait(replicas: list[_Replica], deciding: set[str], tolerated: set[str], deadline: float,
          timeout_seconds: float, stop: threading.Event) -> _Replica | None:
    """Waits until the deciding replicas have succeeded (then lets the others end by
    themselves) or one that matters failed; returns the failed one, if any."""
    def failure() -> _Replica | None:
        return next((r for r in replicas if r.process.poll() not in (None, 0)
                     and r.name not in tolerated), None)

    while not failure():
        if all(r.process.poll() == 0 for r in replicas if r.name in deciding):
            wind_down = time.monotonic() + WIND_DOWN_SECONDS
            while any(r.process.poll() is None for r in replicas) and \
                    time.monotonic() < wind_down:
                time.sleep(0.2)
            return failure()
        if time.monotonic() > deadline:
            raise LocalTrainingError(f"training did not finish within {timeout_seconds:.0f} s")
        if stop.wait(0.2):
            raise ClusterStopped("training was stopped on request")
    return failure()


def _stop(replicas: list[_Replica]) -> None:
    """Stops what still runs (TERM, then KILL) and waits for the output relays."""
    for replica in replicas:
        if replica.process.poll() is None:
            replica.process.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for replica in replicas:
        try:
            replica.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            replica.process.kill()
            replica.process.wait()
        replica.pump.join(timeout=5)
