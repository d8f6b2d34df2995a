"""Stage 1's entry point: every rule of Vertex AI worker pools (`check_pools`).

The GPU rules (`components.gpu.validation`), then the roles a job's pools hold and whether
the trainer can run them. Vertex AI gives pools fixed roles (0 chief, 1 workers, 2
parameter servers or a Reduction Server, 3 evaluator; AI Platform Training's config.yaml
maps master, workers, parameterServers and evaluators onto them). The strategy a layout
runs is chosen in one place, `trainer.cluster.training_plan.choose_strategy`; these rules
say before submission, naming the pool, the field and the value, what that strategy cannot
run, and make the training plan the pools run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from components import images
from components.durations import duration_seconds
from components.gpu.validation import validate_worker_pool_specs
from trainer.cluster.accelerators import ACCELERATORS, weakest
from trainer.cluster.roles import ClusterConfigError, Layout
from trainer.cluster.training_plan import (
    PlanError,
    TrainingPlan,
    choose_strategy,
    plan_training,
    requested,
)

POOL_NAMES = ("worker_pool_specs[0] (chief)", "worker_pool_specs[1] (workers)",
              "worker_pool_specs[2] (parameter servers)", "worker_pool_specs[3] (evaluator)")
#: Vertex AI's Reduction Server image (docs: "Reduction Server"): a pool 2 running it
#: speeds up MultiWorkerMirroredStrategy's all-reduce instead of holding parameters. The
#: docs name it under `us-docker.pkg.dev`; Artifact Registry serves the same path under
#: each of its multi-regions (`us`, `europe`, `asia`), and a job pulls fastest from the
#: one nearest its region, so the image is recognised under any `*-docker.pkg.dev` host.
REDUCTION_SERVER = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver"
_REDUCTION_SERVER_PATH = re.compile(
    r"[a-z0-9-]+-docker\.pkg\.dev/vertex-ai-restricted/training/reductionserver([:@].*)?")
#: Pool 2 when it runs the Reduction Server, as messages name it.
REDUCERS = "worker_pool_specs[2] (Reduction Server)"


def _replicas(pool: Any) -> int:
    if not isinstance(pool, Mapping) or not pool:
        return 0
    count = pool.get("replica_count", 1)
    return int(count) if isinstance(count, (int, float)) and not isinstance(count, bool) else 0


def is_reduction_server(pool: Any) -> bool:
    """Whether a pool runs Vertex AI's Reduction Server image (under any Artifact
    Registry host)."""
    image = (pool.get("container_spec") or {}).get("image_uri", "") \
        if isinstance(pool, Mapping) else ""
    return isinstance(image, str) and bool(_REDUCTION_SERVER_PATH.fullmatch(image))


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
            f"{REDUCTION_SERVER}:latest, or the same path under europe-docker.pkg.dev or "
            "asia-docker.pkg.dev nearer the job)")
    if chosen == "parameter_server":
        for pool in pools[2:3]:
            spec = pool.get("machine_spec") or {} if isinstance(pool, Mapping) else {}
            if spec.get("accelerator_count"):
                warnings.append(
                    f"{POOL_NAMES[2]}: machine_spec.accelerator_count is "
                    f"{spec['accelerator_count']}; parameter servers hold variables and "
                    "need no GPU: a CPU machine such as n1-highmem-8 costs less")
    return errors, warnings


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
    seconds = duration_seconds(timeout) or 0.0
    if seconds > cat.FLEX_START_MAX_SECONDS:
        errors.append(f"timeout is {timeout!r}; scheduling_strategy FLEX_START runs a job for "
                      f"at most {cat.FLEX_START_MAX_SECONDS}s (7 days)")
    return errors


def pool_accelerator(pool: Any) -> tuple[str, int]:
    """A pool's GPU type and GPUs per replica ("" and 0 without GPUs)."""
    spec = (pool.get("machine_spec") or {}) if isinstance(pool, Mapping) else {}
    if not spec.get("accelerator_type") or not spec.get("accelerator_count"):
        return "", 0
    return str(spec["accelerator_type"]), int(spec["accelerator_count"])


def training_gpus(pools: Sequence[Any], strategy: str) -> tuple[list[str], int]:
    """The GPU types (slowest first) and count of the machines that run training steps:
    the workers (pool 1) under ParameterServerStrategy, where the chief only coordinates;
    the chief and the workers (pools 0 and 1) otherwise.

    Raises:
        PlanError: Under MultiWorkerMirroredStrategy, pools 0 and 1 differ in how many GPUs
            a machine has (a different type with the same count is allowed:
            `check_gpu_types` warns).
    """
    indices = (1,) if strategy == "parameter_server" else (0, 1)
    found = {i: pool_accelerator(pools[i]) for i in indices
             if i < len(pools) and _replicas(pools[i])}
    counts = {n for _, n in found.values()}
    if len(counts) > 1:
        described = "; ".join(f"{POOL_NAMES[i]} has " + (f"{n} x {g}" if n else "no GPU")
                              for i, (g, n) in found.items())
        raise PlanError(
            f"{described}: MultiWorkerMirroredStrategy runs one replica per GPU on every "
            "training machine and all-reduces across all of them, so every training machine "
            "needs the same number of GPUs (TensorFlow sizes the all-reduce group from each "
            "machine's own devices); give pools 0 and 1 the same accelerator_count")
    kinds = sorted({g for g, _ in found.values() if g},
                   key=lambda g: (ACCELERATORS[g].peak_tflops, g) if g in ACCELERATORS
                   else (0.0, g))
    return kinds, counts.pop() if counts else 0


def check_gpu_types(pools: Sequence[Any], strategy: str) -> list[str]:
    """Advice when the training machines' GPUs differ only in type: a synchronous step
    waits for the slowest card, and the plan follows what every card can do."""
    try:
        kinds, _ = training_gpus(pools, strategy)
    except PlanError:
        return []
    if len(kinds) < 2:
        return []
    slow, fast = ACCELERATORS[kinds[0]], ACCELERATORS[kinds[-1]]
    return [f"worker_pool_specs[0] (chief) and [1] (workers) have different GPU types "
            f"({', '.join(kinds)}): MultiWorkerMirroredStrategy steps in lockstep, so every "
            f"step waits for the slower {slow.name} ({slow.peak_tflops:g} against "
            f"{fast.peak_tflops:g} peak TFLOPS on NVIDIA's datasheets), and the training plan "
            "follows what every card can do; the same machine_spec in both pools pays "
            "only for the speed it gets"]


def plan_for_pools(pools: Sequence[Any], *, strategy: str = "auto",
                   mixed_precision: str = "auto", xla: str = "auto") -> TrainingPlan:
    """The training plan of validated Vertex AI worker pools (`trainer.cluster.training_plan`);
    with several GPU types on the training machines, the plan of what every one can do.

    Raises:
        PlanError: The options cannot work on these pools.
    """
    import dataclasses

    layout = layout_of(pools)
    reduction = len(pools) > 2 and is_reduction_server(pools[2])
    try:
        chosen = choose_strategy(layout, strategy)
    except ClusterConfigError as exc:
        raise PlanError(str(exc)) from None
    kinds, count = training_gpus(pools, chosen)
    known = [ACCELERATORS[k] for k in kinds if k in ACCELERATORS]
    gpu = (weakest(known) if len(known) > 1 else known[0]) if known else None
    plan = plan_training(layout, strategy=strategy, mixed_precision=mixed_precision, xla=xla,
                         gpu=gpu, gpus=count, reduction_server=reduction)
    if len(known) > 1:  # the plan names every type it serves
        plan = dataclasses.replace(plan, accelerator="+".join(kinds))
    return plan


def egress_gbps(pool: Any) -> float | None:
    """A pool's machines' maximum egress bandwidth (`catalog`'s tables), None if unknown."""
    from components.gpu import catalog as cat

    spec = (pool.get("machine_spec") or {}) if isinstance(pool, Mapping) else {}
    machine, (gpu, count) = str(spec.get("machine_type", "")), pool_accelerator(pool)
    if machine in cat.FIXED_EGRESS_GBPS:
        return float(cat.FIXED_EGRESS_GBPS[machine])
    if machine.startswith("n1-") and count and gpu in cat.N1_GPU_EGRESS_GBPS:
        return cat.N1_GPU_EGRESS_GBPS[gpu].get(count)
    family, vcpus = machine.partition("-")[0], machine.rsplit("-", 1)[-1]
    if family in cat.GENERAL_PURPOSE_MAX_GBPS and vcpus.isdigit():
        return float(min(cat.GENERAL_PURPOSE_GBPS_PER_VCPU * int(vcpus),
                         cat.GENERAL_PURPOSE_MAX_GBPS[family]))
    return None


def check_reduction_server(pools: Sequence[Any]) -> list[str]:
    """Advice on a Reduction Server pool's size: Vertex AI's docs ask that pool 2's total
    egress bandwidth match or exceed that of pools 0 and 1 ("Reduce training time with
    Reduction Server": e.g. 8 a2-megagpu-16g workers at 100 Gbps need 25 n1-highcpu-16
    reducers at 32 Gbps)."""
    if len(pools) < 3 or not is_reduction_server(pools[2]):
        return []
    training = [(p, _replicas(p)) for p in pools[:2] if _replicas(p)]
    reducers, each = _replicas(pools[2]), egress_gbps(pools[2])
    rates = [egress_gbps(p) for p, _ in training]
    machine = (pools[2].get("machine_spec") or {}).get("machine_type")
    if each is None or None in rates:
        return [f"{REDUCERS}: the network bandwidth of {machine} or of the training "
                "machines is not recorded here, so the reducers' count cannot be checked "
                "against Vertex AI's rule (reducers' total egress >= the training machines'); "
                "check it on Compute Engine's network bandwidth pages"]
    need = sum(rate * n for rate, (_, n) in zip(rates, training, strict=True))
    if reducers * each >= need:
        return []
    enough = -(-int(need) // int(each))
    return [f"{REDUCERS}: {reducers} x {machine} reducers give {reducers * each:g} Gbps, "
            f"less than the training machines' {need:g} Gbps; Vertex AI's Reduction Server "
            f"docs ask for at least as much: use {enough} x {machine} (or a machine with more "
            "bandwidth, such as n1-highcpu-16 at 32 Gbps)"]


def check_reduction_server_plugin(pools: Sequence[Any]) -> list[str]:
    """A Reduction Server pool needs its NCCL plugin in the GPU image (Vertex AI docs:
    "a custom container with NCCL 2.7 or later and the google-reduction-server package"):
    says which one the image installs, or how it is resolved when the image is built."""
    if len(pools) < 3 or not is_reduction_server(pools[2]):
        return []
    return [f"{REDUCERS}: the training machines' NCCL plugin is "
            f"{images.reduction_server_plugin_source()}"]


def check_pools(pools: Any, *, region: str | None = None, training: Any = None,
                scheduling: str | None = None, timeout: str = "") -> Any:
    """Every rule of Vertex AI worker pools in one result: the GPU rules (machine x GPU type
    x count x region), the roles the strategy needs, the training plan (strategy,
    all-reduce, mixed precision, XLA) and, with `scheduling`, the scheduling strategy's
    rules. The one check the config loader, the validation stage and `gpu-pipeline
    validate-gpu` all run.

    Args:
        pools: Worker pool specs.
        region: The Vertex AI region (its rules are checked when given).
        training: The training options (`strategy`, `mixed_precision`, `xla`); None for
            their defaults.
        scheduling: The scheduling strategy, to check its rules.
        timeout: The job's timeout (FLEX_START's limit).

    Returns:
        A `components.gpu.validation.ValidationResult` with the layout's, the plan's and
        scheduling's errors and advice added, and the plan when there are no errors.
    """
    return with_role_checks(validate_worker_pool_specs(pools, region=region), training,
                            scheduling, timeout)


def with_role_checks(result: Any, training: Any = None, scheduling: str | None = None,
                     timeout: str = "") -> Any:
    """A GPU validation result with the layout's (and scheduling's) errors and advice
    added, and the training plan; unchanged when the GPU rules already failed."""
    import dataclasses

    from trainer.run.training_options import TrainingOptions

    if not result.ok:
        return result
    training = training if training is not None else TrainingOptions()
    errors, advice = check_layout(result.specs, training.strategy)
    if scheduling is not None:
        errors += check_scheduling(result.specs, scheduling, timeout)
    plan = None
    if not errors:
        try:
            plan = plan_for_pools(result.specs, **requested(training))
        except PlanError as exc:
            errors += exc.problems
        advice += check_reduction_server(result.specs)
        advice += check_gpu_types(result.specs, plan.strategy) if plan else []
        advice += check_reduction_server_plugin(result.specs)
    return dataclasses.replace(result, ok=not errors, errors=result.errors + errors,
                               warnings=result.warnings + advice, plan=plan)
