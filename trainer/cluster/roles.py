"""The cluster's vocabulary: Vertex AI's four worker pools, their roles, and a layout.

The words every layer uses, from the CLI to the trainer:

- **training machines**: the chief and the workers (pools 0 and 1), the machines that run
  training steps (under ParameterServerStrategy the chief only coordinates);
- **workers**: pool 1's replicas, the training machines other than the chief;
- **parameter servers**: pool 2's replicas, which hold the variables under
  ParameterServerStrategy (or Vertex AI's Reduction Server, which holds none);
- **evaluator**: pool 3's single sidecar replica;
- **replicas in sync**: the devices whose batches make one step's global batch;
- **input pipelines**: the processes that read the training data, each its own files.

Vertex AI gives worker pool 0 the task type `chief`, pool 1 `worker`, pool 2 `ps` and pool 3
`evaluator`. Pure Python (no TensorFlow).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from trainer.common.errors import InputError


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
#: The `training.strategy` option's values.
STRATEGIES = ("auto", "multi_worker_mirrored", "parameter_server")


class ClusterConfigError(InputError):
    """TF_CONFIG, or a layout of roles, that the trainer cannot run."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """How many replicas of each role a training cluster has: the one layout type, passed
    between stages as its dict (`to_dict`, `from_dict`).

    Attributes:
        workers: Pool 1's replicas (the training machines besides the chief).
        parameter_servers: Pool 2's replicas that hold parameters.
        evaluators: Pool 3's replicas (0 or 1).
    """

    workers: int = 0
    parameter_servers: int = 0
    evaluators: int = 0

    @property
    def training_machines(self) -> int:
        """The chief and the workers."""
        return 1 + self.workers

    def input_pipelines(self, strategy: str) -> int:
        """How many processes read the training data: the workers under
        ParameterServerStrategy (the chief only coordinates), every training machine
        otherwise. The dataset's shard count is a multiple of it, so that each reads its
        own files."""
        return max(1, self.workers) if strategy == "parameter_server" \
            else self.training_machines

    def to_dict(self) -> dict[str, int]:
        """As a pipeline parameter (JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Layout:
        """From `to_dict`'s form (numbers may arrive as floats through a pipeline spec).

        Raises:
            ClusterConfigError: A key that is not a role, or a count below 0.
        """
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ClusterConfigError(f"a layout has no {', '.join(sorted(unknown))}; its "
                                     "keys are workers, parameter_servers, evaluators")
        counts = {key: int(value) for key, value in data.items()}
        negative = [key for key, value in counts.items() if value < 0]
        if negative:
            raise ClusterConfigError(f"a layout's {negative[0]} is {counts[negative[0]]}; "
                                     "counts are 0 or more")
        return cls(**counts)
