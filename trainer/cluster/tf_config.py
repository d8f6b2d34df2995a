"""This process's place in the training cluster, from TF_CONFIG as Vertex AI sets it.

Vertex AI's TF_CONFIG `cluster` lists `chief`, `worker` and `ps`, never `evaluator` (the
evaluator only knows its own task). Pure Python (no TensorFlow): TF_CONFIG must be read and
checked before TensorFlow starts, because the strategy has to be created before any other
TensorFlow op.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from trainer.cluster.roles import ROLES, ClusterConfigError, Layout


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
    def training_machines(self) -> int:
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

