"""Cluster awareness from TF_CONFIG, in the format Vertex AI sets it.

Pure Python (no TensorFlow): TF_CONFIG must be read and checked before TensorFlow
starts, because the strategy has to be created before any other TensorFlow op.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Mapping

from trainer.errors import InputError


class ClusterConfigError(InputError):
    """TF_CONFIG is present but unusable."""


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """This process's place in the training cluster.

    Attributes:
        task_type: `chief`, `worker`, ... or None when there is no TF_CONFIG.
        task_index: Index within the task type.
        num_workers: Machines that train (chief + workers).
        cluster: The `cluster` part of TF_CONFIG (empty without TF_CONFIG).
    """

    task_type: str | None
    task_index: int
    num_workers: int
    cluster: Mapping[str, list[str]]

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
        ClusterConfigError: TF_CONFIG is not valid JSON or names a task not in the cluster.
    """
    raw = environ.get("TF_CONFIG", "").strip()
    if not raw:
        return ClusterInfo(None, 0, 1, {})
    try:
        config = json.loads(raw)
        cluster = config.get("cluster") or {}
        task = config.get("task") or {}
        task_type = task.get("type")
        task_index = int(task.get("index", 0))
    except (ValueError, AttributeError, TypeError) as exc:
        raise ClusterConfigError(f"TF_CONFIG is not a valid cluster description: {exc}") from exc
    if task_type not in cluster or not 0 <= task_index < len(cluster[task_type]):
        raise ClusterConfigError(
            f"TF_CONFIG task {task_type}:{task_index} is not in its cluster "
            f"({', '.join(f'{k}: {len(v)}' for k, v in cluster.items()) or 'empty'})")
    num_workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    return ClusterInfo(task_type, task_index, max(num_workers, 1), cluster)


def vertex_tf_config(chief: str, workers: list[str], task_type: str, task_index: int) -> str:
    """Builds TF_CONFIG the way Vertex AI sets it for a chief pool and a worker pool.

    Args:
        chief: `host:port` of the chief (worker pool 0).
        workers: `host:port` of each worker (worker pool 1).
        task_type: `chief` or `worker`.
        task_index: Index within the task type (the chief is always 0).

    Returns:
        The JSON string for the TF_CONFIG environment variable.
    """
    cluster: dict[str, list[str]] = {"chief": [chief]}
    if workers:
        cluster["worker"] = list(workers)
    return json.dumps({
        "cluster": cluster,
        "task": {"type": task_type, "index": task_index, "trial": ""},
        "job": {"worker_pool_specs": []},
        "environment": "cloud",
    })
