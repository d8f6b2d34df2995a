"""The training cluster from TF_CONFIG, as Vertex AI sets it, and the one place that decides
the distribution strategy.

Vertex AI gives worker pool 0 the task type `chief`, pool 1 `worker`, pool 2 `ps` and pool 3
`evaluator`; its TF_CONFIG `cluster` lists `chief`, `worker` and `ps`, never `evaluator`
(the evaluator only knows its own task). Pure Python (no TensorFlow): TF_CONFIG must be
read and checked before TensorFlow starts, because the strategy has to be created before
any other TensorFlow op.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Mapping

from trainer.errors import InputError


@dataclasses.dataclass(frozen=True)
class Pool:
    """One of Vertex AI's four worker pools, and the names its role goes by.

    Attributes:
        index: Its position in `worker_pool_specs`.
        task_type: The TF_CONFIG task type Vertex AI gives its replicas.
        description: The role in words, for messages.
        ai_platform: The role's name in AI Platform Training's `trainingInput`.
    """

    index: int
    task_type: str
    description: str
    ai_platform: str


#: The worker pools in Vertex AI's order: the one table of roles every layer reads.
POOLS = (Pool(0, "chief", "chief", "master"), Pool(1, "worker", "worker", "worker"),
         Pool(2, "ps", "parameter server", "parameterServer"),
         Pool(3, "evaluator", "evaluator", "evaluator"))
#: Task types in Vertex AI's order of worker pools.
ROLES = tuple(pool.task_type for pool in POOLS)
#: Set by the local cluster (`components.training.local_cluster`) on a process it gives
#: some of the machine's cores: their numbers, comma-separated. TensorFlow would otherwise
#: size its thread pools for the whole machine in every process, and the processes would
#: oversubscribe it.
LOCAL_CORES_ENV = "TRAINER_LOCAL_CORES"
#: Set by the local launcher in every replica's environment: a cluster on localhost.
LOCAL_CLUSTER_ENV = "TRAINER_LOCAL_CLUSTER"
#: How long a replica waits for its cluster to form (`training.cluster_wait: 0`): on
#: localhost the processes start within seconds of each other; Vertex AI provisions each
#: pool's machines separately, and they start minutes apart.
LOCAL_CLUSTER_WAIT_SECONDS = 180
VERTEX_CLUSTER_WAIT_SECONDS = 1800
#: The `training.strategy` option's values.
STRATEGIES = ("auto", "multi_worker_mirrored", "parameter_server")


class ClusterConfigError(InputError):
    """TF_CONFIG, or a layout of roles, that the trainer cannot run."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """How many replicas of each role a training cluster has."""

    workers: int = 0
    parameter_servers: int = 0
    evaluators: int = 0

    @property
    def training_machines(self) -> int:
        """The chief and the workers."""
        return 1 + self.workers


def choose_strategy(layout: Layout, requested: str = "auto") -> str:
    """The distribution strategy for a layout: `parameter_server`, `multi_worker_mirrored`
    or `single` (one machine: the default or MirroredStrategy over its GPUs).

    With `auto`, parameter servers mean ParameterServerStrategy (the chief coordinates,
    workers run the steps, parameter servers hold the variables); otherwise several
    training machines mean MultiWorkerMirroredStrategy (synchronous all-reduce). An
    evaluator runs beside either. `multi_worker_mirrored` asked for explicitly leaves any
    pool-2 replicas out of training (a Reduction Server runs there).

    Raises:
        ClusterConfigError: The layout cannot run the requested strategy.
    """
    if requested not in STRATEGIES:
        raise ClusterConfigError(f"training.strategy is {requested!r}; valid values are "
                                 f"{', '.join(STRATEGIES)}")
    if layout.evaluators > 1:
        raise ClusterConfigError(f"the cluster has {layout.evaluators} evaluators; a sidecar "
                                 "evaluator is one replica (TensorFlow expects no more)")
    wants_ps = requested == "parameter_server" or (requested == "auto"
                                                   and layout.parameter_servers > 0)
    if wants_ps:
        if layout.parameter_servers < 1 or layout.workers < 1:
            raise ClusterConfigError(
                f"parameter-server training needs at least one worker and one parameter "
                f"server; the cluster has {layout.workers} worker(s) and "
                f"{layout.parameter_servers} parameter server(s)")
        return "parameter_server"
    return "multi_worker_mirrored" if layout.training_machines > 1 else "single"


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """This process's place in the training cluster.

    Attributes:
        task_type: `chief`, `worker`, `ps`, `evaluator`, or None without TF_CONFIG.
        task_index: Index within the task type.
        cluster: The `cluster` part of TF_CONFIG (empty without TF_CONFIG).
    """

    task_type: str | None
    task_index: int
    cluster: Mapping[str, list[str]]

    @property
    def layout(self) -> Layout:
        """The replicas of each role (the evaluator counted when it is this task)."""
        workers = len(self.cluster.get("worker", []))
        if "chief" not in self.cluster and workers:
            workers -= 1  # worker 0 is the chief of a cluster without one
        return Layout(workers, len(self.cluster.get("ps", [])),
                      int(self.task_type == "evaluator"))

    @property
    def num_workers(self) -> int:
        """Machines that train (the chief and the workers)."""
        return self.layout.training_machines

    @property
    def is_chief(self) -> bool:
        """The chief writes the model, checkpoints and reports.

        On Vertex AI pool 0 is `chief` and the other workers are `worker` from index 0,
        so the decision is by type; only a cluster without a chief falls back to worker 0.
        """
        if self.task_type is None:
            return True
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def name(self) -> str:
        """A short label for log lines, such as `chief:0` or `worker:1`."""
        return f"{self.task_type or 'single'}:{self.task_index}"


def cluster_from_env(environ: Mapping[str, str]) -> ClusterInfo:
    """Parses TF_CONFIG from an environment mapping.

    Args:
        environ: Usually `os.environ`.

    Returns:
        The cluster info; a single-machine cluster when TF_CONFIG is absent.

    Raises:
        ClusterConfigError: TF_CONFIG is not valid JSON or names a task not in the cluster
            (the evaluator excepted: Vertex AI never lists it).
    """
    raw = environ.get("TF_CONFIG", "").strip()
    if not raw:
        return ClusterInfo(None, 0, {})
    try:
        config = json.loads(raw)
        cluster = config.get("cluster") or {}
        task = config.get("task") or {}
        task_type = task.get("type")
        task_index = int(task.get("index", 0))
    except (ValueError, AttributeError, TypeError) as exc:
        raise ClusterConfigError(f"TF_CONFIG is not a valid cluster description: {exc}") from exc
    listed = task_type in cluster and 0 <= task_index < len(cluster[task_type])
    if not listed and not (task_type == "evaluator" and task_index == 0):
        raise ClusterConfigError(
            f"TF_CONFIG task {task_type}:{task_index} is not in its cluster "
            f"({', '.join(f'{k}: {len(v)}' for k, v in cluster.items()) or 'empty'})")
    return ClusterInfo(task_type, task_index, cluster)


def vertex_tf_config(cluster: Mapping[str, list[str]], task_type: str, task_index: int) -> str:
    """TF_CONFIG the way Vertex AI sets it for one replica.

    Args:
        cluster: `host:port` addresses per role (`chief`, `worker`, `ps`); an `evaluator`
            entry is left out, as Vertex AI leaves it out.
        task_type: `chief`, `worker`, `ps` or `evaluator`.
        task_index: Index within the task type.

    Returns:
        The JSON string for the TF_CONFIG environment variable.
    """
    return json.dumps({
        "cluster": {role: list(cluster[role]) for role in ROLES[:3] if cluster.get(role)},
        "task": {"type": task_type, "index": task_index, "trial": ""},
        "job": {"worker_pool_specs": []},
        "environment": "cloud",
    })


def local_cores(environ: Mapping[str, str]) -> list[int]:
    """The cores a local cluster gave this process (LOCAL_CORES_ENV); empty for all.

    Raises:
        ClusterConfigError: The variable is set but not a list of core numbers.
    """
    value = environ.get(LOCAL_CORES_ENV, "").strip()
    if not value:
        return []
    try:
        cores = sorted({int(c) for c in value.split(",")})
    except ValueError:
        cores = []
    if not cores or cores[0] < 0:
        raise ClusterConfigError(f"{LOCAL_CORES_ENV} is {value!r}; expected core numbers "
                                 "separated by commas, e.g. 0,1")
    return cores


def pin_local_cores(environ: Mapping[str, str]) -> list[int]:
    """Restricts this process to the cores a local cluster gave it (if any); returns them.

    Raises:
        ClusterConfigError: The cores are not a valid list, or not this machine's.
    """
    cores = local_cores(environ)
    if cores:
        try:
            os.sched_setaffinity(0, cores)
        except OSError as exc:
            raise ClusterConfigError(f"{LOCAL_CORES_ENV} is {environ[LOCAL_CORES_ENV]!r}; "
                                     f"this machine has cores {sorted(os.sched_getaffinity(0))} "
                                     f"({exc.strerror})") from None
    return cores


#: What gRPC (TensorFlow's cluster transport) reads to find a proxy, in its order, and what
#: exempts a host from it: "checked in order, and the first one that has a value is used"
#: (grpc/grpc doc/environment_variables.md). Unlike most HTTP clients, gRPC proxies every
#: channel, localhost included, unless one of the exemption lists names the host; and
#: with `no_grpc_proxy` set, it ignores `no_proxy`.
GRPC_PROXY_VARIABLES = ("grpc_proxy", "https_proxy", "http_proxy")
GRPC_NO_PROXY_VARIABLES = ("no_grpc_proxy", "no_proxy")


def grpc_proxy_exemptions(info: ClusterInfo, environ: Mapping[str, str]) -> str | None:
    """The `no_grpc_proxy` that keeps the cluster's traffic off any proxy in `environ`.

    The cluster's hosts (and localhost) join the user's own exemptions (`no_grpc_proxy`,
    else `no_proxy` or `NO_PROXY`, which gRPC would otherwise have used), so that other
    gRPC traffic (Google's clients) still goes where the user sends it; HTTP downloads
    (Keras weights, Cloud Storage) read `no_proxy`, which is left as it is.

    Returns:
        The value to set, or None when no proxy is set or there is no cluster.
    """
    if not info.cluster or not any(environ.get(name) for name in GRPC_PROXY_VARIABLES):
        return None
    user = next((environ[name] for name in (*GRPC_NO_PROXY_VARIABLES, "NO_PROXY")
                 if environ.get(name)), "")
    hosts = [address.rsplit(":", 1)[0].strip("[]")
             for addresses in info.cluster.values() for address in addresses]
    exempt: list[str] = []
    for host in (*user.split(","), "localhost", "127.0.0.1", *hosts):
        if host.strip() and host.strip() not in exempt:
            exempt.append(host.strip())
    return ",".join(exempt)


def keep_cluster_off_proxies(info: ClusterInfo, environ: Mapping[str, str]) -> str | None:
    """Sets `no_grpc_proxy` in this process's environment (before TensorFlow starts its
    gRPC channels) as `grpc_proxy_exemptions` says; returns what was set, if anything."""
    exempt = grpc_proxy_exemptions(info, environ)
    if exempt is not None:
        os.environ["no_grpc_proxy"] = exempt
    return exempt


def cluster_wait_seconds(option: int, environ: Mapping[str, str]) -> int:
    """The `training.cluster_wait` a replica applies (0: by where it runs)."""
    if option:
        return option
    return LOCAL_CLUSTER_WAIT_SECONDS if environ.get(LOCAL_CLUSTER_ENV) \
        else VERTEX_CLUSTER_WAIT_SECONDS


def unreachable(info: ClusterInfo, timeout: float = 2.0) -> list[str]:
    """The other replicas of the cluster whose address accepts no TCP connection (no
    server listening there yet, or the way to it blocked), as `worker:0 (host:port)`."""
    missing = []
    for role, addresses in info.cluster.items():
        for index, address in enumerate(addresses):
            if (role, index) == (info.task_type, info.task_index):
                continue
            host, _, port = address.rpartition(":")
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
            except (OSError, ValueError):
                missing.append(f"{role}:{index} ({address})")
    return missing


def not_formed_message(info: ClusterInfo, seconds: int, environ: Mapping[str, str]) -> str:
    """Why a replica gave up waiting for its cluster, with what it could not reach."""
    missing = unreachable(info)
    proxies = [f"{name}={environ[name]}" for name in (*GRPC_PROXY_VARIABLES, "no_grpc_proxy")
               if environ.get(name)]
    return (f"{info.name}: the training cluster did not form within {seconds} s "
            "(training.cluster_wait): "
            + (f"could not reach {', '.join(missing)}" if missing else
               "every replica's address answers, but not all of them joined")
            + ". Likely causes: a replica that failed to start or died (see its log), a "
            "firewall between the machines, or a proxy"
            + (f" ({', '.join(proxies)})" if proxies else ""))
