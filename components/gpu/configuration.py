"""Stage 1's one entry: the Vertex AI configuration (the primary pools and every fallback)
checked by every rule, with the training plan the run's replicas apply and the number of
input pipelines the dataset is sharded for.

The pipeline's stage 1, config loading (and so `submit` and `run`) and `validate-gpu` all
call `check_configuration`; what each shows of it is theirs.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from components.gpu.alternatives import (
    Checked,
    batch_lines,
    check_alternatives,
    input_pipelines_of,
)
from trainer.cluster.roles import Layout
from trainer.cluster.training_plan import TrainingPlan, plan_training, requested

if TYPE_CHECKING:
    from components.vertex_options import VertexOptions
    from trainer.run.training_options import TrainingOptions


@dataclasses.dataclass(frozen=True)
class Configuration:
    """A checked configuration.

    Attributes:
        checked: Every alternative (the primary first) with its pools, plan, errors and
            warnings, in the order the training step tries them.
        plan: The plan the run's replicas apply: the primary's, or a local run's own for
            its CPU processes; None while the configuration has errors.
        input_pipelines: The processes that read the training data (the dataset's shard
            multiple: a multiple of every alternative's, or the local run's); 0 with errors.
        local: A local run's layout, else None.
    """

    checked: Checked
    plan: TrainingPlan | None
    input_pipelines: int
    local: Layout | None = None

    def lines(self, training: TrainingOptions, region: str) -> list[str]:
        """What stage 1 says once the configuration is valid."""
        primary = self.checked.primary
        found = [f"GPU configuration valid for {region}: {primary.describe()}",
                 f"training plan on Vertex AI: {primary.plan.summary()}"]
        found += [f"{a.label}, tried when the ones before it find no capacity: "
                  f"{a.describe()}; training plan: {a.plan.summary()}"
                  for a in self.checked.alternatives[1:]]
        if len(self.checked.alternatives) > 1:
            found += batch_lines(self.checked.alternatives, training)
        if self.local is not None and self.plan is not None:
            found.append(f"training plan of this local run: {self.plan.summary()}")
        return found


def check_configuration(vertex: VertexOptions, training: TrainingOptions | None = None,
                        local: Layout | None = None) -> Configuration:
    """Checks `vertex` (`VertexOptions`: pools, region, scheduling, fallbacks) with the
    `training` options (`TrainingOptions`; None for the defaults); with `local`, the plan
    and input pipelines are a local run's on that layout of CPU processes.

    Raises:
        PlanError: The local run's processes cannot train with these options.
    """
    checked = check_alternatives(vertex, training)
    if not checked.ok:
        return Configuration(checked, None, 0, local)
    plan, pipelines = checked.primary.plan, input_pipelines_of(checked.alternatives)
    if local is not None:
        from trainer.run.training_options import TrainingOptions

        plan = plan_training(local, **requested(training or TrainingOptions()))
        pipelines = local.input_pipelines(plan.strategy)
    return Configuration(checked, plan, pipelines, local)
