"""Worker-pool layouts: which roles a job's pools hold, and whether the trainer can run them.

Vertex AI gives pools fixed roles (0 chief, 1 workers, 2 parameter servers or a Reduction
Server, 3 evaluators; AI Platform Training's config.yaml maps master, workers,
parameterServers and evaluators onto them). The strategy a layout runs is decided in one
place, `trainer.cluster.choose_strategy`; these rules say before submission, naming the
pool, the field and the value, what that strategy cannot run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.cluster import ClusterConfigError, Layout, choose_strategy

POOL_NAMES = ("worker_pool_specs[0] (chief)", "worker_pool_specs[1] (workers)",
              "worker_pool_specs[2] (parameter servers)", "worker_pool_specs[3] (evaluator)")
#: Vertex AI's Reduction Server image (docs: "Reduction Server"): a pool 2 running it
#: speeds up MultiWorkerMirroredStrategy's all-reduce instead of holding parameters.
REDUCTION_SERVER = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver"


def _replicas(pool: Any) -> int:
    if not isinstance(pool, Mapping) or not pool:
        return 0
    count = pool.get("replica_count", 1)
    return int(count) if isinstance(count, (int, float)) and not isinstance(count, bool) else 0


def is_reduction_server(pool: Any) -> bool:
    """Whether a pool runs Vertex AI's Reduction Server image."""
    image = (pool.get("container_spec") or {}).get("image_uri", "") \
        if isinstance(pool, Mapping) else ""
    return isinstance(image, str) and image.startswith(REDUCTION_SERVER)


def layout_of(pools: Sequence[Any]) -> Layout:
    """The roles of Vertex AI worker pools (a Reduction Server pool holds no parameters)."""
    counts = [_replicas(p) for p in list(pools)[:4]] + [0] * 4
    reduction = len(pools) > 2 and is_reduction_server(pools[2])
    return Layout(workers=counts[1], parameter_servers=0 if reduction else counts[2],
                  evaluators=counts[3])


def check_layout(pools: Sequence[Any], strategy: str = "auto") -> tuple[list[str], list[str]]:
    """The problems (errors, warnings) of running `pools` with the `training.strategy`.

    Args:
        pools: Worker pool specs (already checked against the GPU rules, or not).
        strategy: `auto`, `multi_worker_mirrored` or `parameter_server`.

    Returns:
        (errors, warnings), each naming the pool, the field, the value and what is valid.
    """
    errors: list[str] = []
    warnings: list[str] = []
    pools = list(pools)
    used = [i for i, p in enumerate(pools) if _replicas(p)]
    for gap in (i for i in range(1, max(used, default=0)) if i not in used):
        errors.append(
            f"{POOL_NAMES[gap]} is empty while pool {max(used)} is used; "
            "google-cloud-pipeline-components' CustomJob launcher drops empty pools (2.22: "
            "recursive_remove_empty), so every later pool would reach Vertex AI one role "
            "earlier (an evaluator would become a parameter server); fill the pool or remove "
            "the pools after it")
    layout = layout_of(pools)
    if len(pools) > 3 and _replicas(pools[3]) > 1:
        errors.append(f"{POOL_NAMES[3]}: replica_count is {_replicas(pools[3])}; a sidecar "
                      "evaluator is exactly 1 replica")
    try:
        chosen = choose_strategy(Layout(layout.workers, layout.parameter_servers,
                                        min(layout.evaluators, 1)), strategy)
    except ClusterConfigError as exc:
        errors.append(f"{POOL_NAMES[2] if layout.parameter_servers else POOL_NAMES[1]}: {exc}")
        return errors, warnings
    if chosen != "parameter_server" and layout.parameter_servers:
        errors.append(
            f"{POOL_NAMES[2]}: replica_count is {layout.parameter_servers}, but "
            f"training.strategy {strategy} trains with MultiWorkerMirroredStrategy, which has "
            "no use for parameter servers; use training.strategy parameter_server or auto, or "
            f"run Vertex AI's Reduction Server there (container_spec.image_uri "
            f"{REDUCTION_SERVER}:latest)")
    if chosen == "parameter_server":
        for pool in pools[2:3]:
            spec = pool.get("machine_spec") or {} if isinstance(pool, Mapping) else {}
            if spec.get("accelerator_count"):
                warnings.append(
                    f"{POOL_NAMES[2]}: machine_spec.accelerator_count is "
                    f"{spec['accelerator_count']}; parameter servers hold variables and "
                    "need no GPU: a CPU machine such as n1-highmem-8 costs less")
    return errors, warnings


def input_pipelines(layout: Layout, strategy: str) -> int:
    """How many processes read the training data: the workers under ParameterServerStrategy
    (the chief only coordinates), the chief and the workers otherwise. The dataset's shard
    count is a multiple of it, so that each reads its own files."""
    return max(1, layout.workers) if strategy == "parameter_server" \
        else layout.training_machines


def layout_dict(layout: Layout) -> dict[str, int]:
    """A layout as the local pipeline's `local_cluster` parameter."""
    return {"workers": layout.workers, "parameter_servers": layout.parameter_servers,
            "evaluators": layout.evaluators}


def check_scheduling(pools: Sequence[Any], strategy: str, timeout: str) -> list[str]:
    """The rules of a scheduling strategy for the pools (normalised by the GPU check).

    FLEX_START (Dynamic Workload Scheduler) serves only some GPU types, needs the same
    machine configuration in every pool and runs a job for at most 7 days (Vertex AI docs:
    "Schedule training jobs based on resource availability").
    """
    from components.gpu import catalog as cat

    if strategy != "FLEX_START":
        return []
    errors = []
    used = [(i, p) for i, p in enumerate(pools) if isinstance(p, Mapping) and p]
    for index, pool in used:
        gpu = (pool.get("machine_spec") or {}).get("accelerator_type")
        if gpu not in cat.FLEX_START_ACCELERATORS:
            errors.append(f"{POOL_NAMES[index]}: machine_spec.accelerator_type is {gpu!r}; "
                          "scheduling_strategy FLEX_START serves only "
                          f"{', '.join(cat.FLEX_START_ACCELERATORS)}")
    shapes = {json.dumps(p.get("machine_spec"), sort_keys=True) for _, p in used}
    if len(shapes) > 1:
        errors.append("worker_pool_specs: the pools use different machine_spec values; "
                      "scheduling_strategy FLEX_START needs the same machine configuration "
                      "in every pool")
    seconds = float(timeout.rstrip("s")) if timeout.rstrip("s").replace(".", "", 1).isdigit() \
        else 0.0
    if seconds > cat.FLEX_START_MAX_SECONDS:
        errors.append(f"timeout is {timeout!r}; scheduling_strategy FLEX_START runs a job for "
                      f"at most {cat.FLEX_START_MAX_SECONDS}s (7 days)")
    return errors


def check_pools(pools: Any, *, region: str | None = None, strategy: str = "auto",
                scheduling: str | None = None, timeout: str = "") -> Any:
    """Every rule of Vertex AI worker pools in one result: the GPU rules (machine x GPU type
    x count x region), the roles the strategy needs, and, with `scheduling`, the
    scheduling strategy's rules. The one check the config loader, the validation stage
    and `gpu-pipeline validate-gpu` all run.

    Returns:
        A `components.gpu.validation.ValidationResult` with the layout's and scheduling's
        errors and advice added.
    """
    from components.gpu.validation import validate_worker_pool_specs

    return with_role_checks(validate_worker_pool_specs(pools, region=region), strategy,
                            scheduling, timeout)


def with_role_checks(result: Any, strategy: str = "auto", scheduling: str | None = None,
                     timeout: str = "") -> Any:
    """A GPU validation result with the layout's (and scheduling's) errors and advice
    added; unchanged when the GPU rules already failed."""
    import dataclasses

    if not result.ok:
        return result
    errors, advice = check_layout(result.specs, strategy)
    if scheduling is not None:
        errors += check_scheduling(result.specs, scheduling, timeout)
    return dataclasses.replace(result, ok=not errors, errors=result.errors + errors,
                               warnings=result.warnings + advice)
