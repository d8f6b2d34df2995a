"""A cluster on one machine: the cores each local process gets, and how long replicas wait.

Pure Python (no TensorFlow): the cores are pinned before TensorFlow sizes its thread pools.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from trainer.cluster.roles import ClusterConfigError

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



def cluster_wait_seconds(option: int, environ: Mapping[str, str]) -> int:
    """The `training.cluster_wait` a replica applies (0: by where it runs)."""
    if option:
        return option
    return LOCAL_CLUSTER_WAIT_SECONDS if environ.get(LOCAL_CLUSTER_ENV) \
        else VERTEX_CLUSTER_WAIT_SECONDS

