"""The configurations a run may train on: the primary one, then `vertex.fallbacks` in order.

Each alternative is checked by stage 1's rules (`components.gpu.pools.check_pools`)
and gets its own training plan. The dataset is prepared once for all of them: its shard
count is a multiple of every alternative's input pipelines, so that whichever trains, each
pipeline reads its own files. The global batch follows the replicas in sync of the
alternative that trains (`training.batch_size` is per replica), and the learning rate
follows it only with `training.scale_learning_rate`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from components.gpu.pools import check_pools, layout_of
from components.gpu.reservations import with_reservation
from components.gpu.validation import ValidationResult
from components.gpu.worker_pool import WorkerPool, api_specs, parse_pools
from components.vertex_options import VertexOptions
from trainer.cluster.roles import Layout
from trainer.cluster.training_plan import TrainingPlan
from trainer.common.errors import InputError

if TYPE_CHECKING:
    from trainer.run.training_options import TrainingOptions


class AlternativesError(InputError):
    """An alternative configuration breaks a rule."""


@dataclasses.dataclass(frozen=True)
class Alternative:
    """One configuration the training step may run: where, on what, scheduled how.

    Attributes:
        index: Its place in the order tried: 0 the primary, 1 `vertex.fallbacks[0]`, ...
        region: Vertex AI region.
        pools: Its checked worker pools (None where one is unused).
        scheduling_strategy: STANDARD, SPOT or FLEX_START.
        plan: Its training plan.
    """

    index: int
    region: str
    pools: tuple[WorkerPool | None, ...]
    scheduling_strategy: str
    plan: TrainingPlan | None = None

    @property
    def label(self) -> str:
        """How messages and records name it."""
        return label(self.index)

    @property
    def layout(self) -> Layout:
        """The roles its pools hold."""
        return layout_of(self.pools)

    @property
    def worker_pool_specs(self) -> list[dict[str, Any]]:
        """Its pools as the CustomJob API takes them."""
        return api_specs(self.pools)

    def describe(self) -> str:
        """Its machines in a few words, e.g. `2 x n1-standard-8 + 1 x NVIDIA_TESLA_T4 in
        us-central1, STANDARD`."""
        pools = ", ".join(pool.describe() for pool in self.pools if pool)
        return f"{pools} in {self.region}, {self.scheduling_strategy}"

    def to_dict(self) -> dict[str, Any]:
        """As stage 1 passes it on (the pools in the API's form, the plan as its dict)."""
        return {"index": self.index, "label": self.label, "region": self.region,
                "worker_pool_specs": self.worker_pool_specs,
                "scheduling_strategy": self.scheduling_strategy,
                "training_plan": self.plan.to_dict() if self.plan else {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Alternative:
        plan = data.get("training_plan") or None
        return cls(int(data["index"]), str(data["region"]),
                   parse_pools(data["worker_pool_specs"]), str(data["scheduling_strategy"]),
                   TrainingPlan.from_dict(plan) if plan else None)


def label(index: int) -> str:
    """How messages and records name the alternative at `index`."""
    return "primary" if index == 0 else f"fallbacks[{index - 1}]"


def alternatives_of(vertex: VertexOptions) -> list[tuple[int, str, list[Any], str]]:
    """The primary configuration, then each fallback with the primary's values where it
    gives none, in the order the training step tries them, as given: (index, region,
    worker pool specs, scheduling strategy)."""
    found = [(0, vertex.region, list(vertex.worker_pool_specs), vertex.scheduling_strategy)]
    for number, fallback in enumerate(vertex.fallbacks, start=1):
        specs = list(fallback.worker_pool_specs if fallback.worker_pool_specs is not None
                     else vertex.worker_pool_specs)
        if fallback.reservation is not None:
            specs = with_reservation(specs, fallback.reservation)
        found.append((number, fallback.region or vertex.region, specs,
                      fallback.scheduling_strategy or vertex.scheduling_strategy))
    return found


def reservations_named(vertex: VertexOptions) -> list[str]:
    """The specific reservations any configuration's pools name, from the pools as given
    (no plan made: a quick look before anything is read), in order, once each."""
    found: dict[str, None] = {}
    for _, _, specs, _ in alternatives_of(vertex):
        for pool in parse_pools(specs):
            if pool and pool.reserved and pool.reserved.holds_capacity:
                found[pool.reserved.name] = None
    return list(found)


def reserved(alternative: Alternative) -> bool:
    """Whether it runs on a specific reservation (capacity the team already holds)."""
    return any(pool and pool.reserved and pool.reserved.holds_capacity
               for pool in alternative.pools)


@dataclasses.dataclass(frozen=True)
class Checked:
    """Every alternative checked, in the order the training step tries them (those on a
    specific reservation first, then as given), with each one's GPU validation result in
    the order given (the primary's messages as before, a fallback's prefixed with its
    label)."""

    alternatives: list[Alternative]
    results: list[ValidationResult]
    errors: list[str]
    warnings: list[str]

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> Checked:
        if self.errors:
            raise AlternativesError("; ".join(self.errors))
        return self

    @property
    def primary(self) -> ValidationResult:
        """The primary configuration's validation result."""
        return self.results[0]


def check_alternatives(vertex: VertexOptions, training: TrainingOptions | None = None
                       ) -> Checked:
    """Checks every alternative by stage 1's rules (GPU, roles, plan, scheduling) and the
    rules between them: no alternative repeats an earlier one."""
    found, results, errors, warnings = [], [], [], []
    seen: dict[tuple[str, str, tuple[WorkerPool | None, ...]], str] = {}
    for index, region, specs, scheduling in alternatives_of(vertex):
        result = check_pools(specs, region=region, training=training, scheduling=scheduling,
                             timeout=vertex.timeout)
        prefix = "" if index == 0 else f"{label(index)}: "
        errors += [prefix + e for e in result.errors]
        warnings += [prefix + w for w in result.warnings]
        alternative = Alternative(index, region, result.pools, scheduling, result.plan)
        if result.ok:
            key = (region, scheduling, result.pools)
            if key in seen:
                errors.append(f"{alternative.label} is the same configuration as "
                              f"{seen[key]} (region, worker_pool_specs and "
                              "scheduling_strategy); a fallback must differ in at least one")
            seen.setdefault(key, alternative.label)
        found.append(alternative)
        results.append(result)
    # Reserved capacity first: it is paid for, and idle while the run waits elsewhere.
    found.sort(key=lambda a: (not reserved(a), a.index))
    return Checked(found, results, errors, warnings)


def replicas_in_sync(alternative: Alternative) -> int:
    """The replicas whose batches make one step's global batch: every GPU of every
    training machine under MultiWorkerMirroredStrategy, one worker's GPUs under
    ParameterServerStrategy (its workers step on their own), a machine's GPUs alone."""
    plan = alternative.plan
    gpus = max(1, plan.gpus_per_machine if plan else 0)
    if plan is not None and plan.strategy == "multi_worker_mirrored":
        return alternative.layout.training_machines * gpus
    return gpus


def input_pipelines_of(alternatives: Sequence[Alternative]) -> int:
    """The input pipelines the dataset is sharded for: the least common multiple of every
    alternative's, so that each of its pipelines gets its own files whichever trains."""
    counts = [a.layout.input_pipelines(a.plan.strategy)
              for a in alternatives if a.plan is not None]
    return math.lcm(*counts) if counts else 1


def batch_lines(alternatives: Sequence[Alternative], training: TrainingOptions) -> list[str]:
    """How the global batch and the learning rate follow each alternative, one line each."""
    lines = []
    for alternative in alternatives:
        if alternative.plan is None:
            continue
        replicas = replicas_in_sync(alternative)
        rate = training.learning_rate * (replicas if training.scale_learning_rate else 1)
        lines.append(
            f"{alternative.label}: global batch {training.batch_size} x {replicas} "
            f"replica(s) in sync = {training.batch_size * replicas}, learning rate {rate:g}"
            + (" (scale_learning_rate: times the replicas)" if training.scale_learning_rate
               and replicas > 1 else ""))
    return lines
