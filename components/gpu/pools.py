"""Stage 1's entry point: every rule of Vertex AI worker pools (`check_pools`).

The GPU rules (`components.gpu.validation`), then the roles a job's pools hold and whether
the trainer can run them. Vertex AI gives pools fixed roles (0 chief, 1 workers, 2
parameter servers or a Reduction Server, 3 evaluator; AI Platform Training's config.yaml
maps master, workers, parameterServers and evaluators onto them). The pools are read as
`components.gpu.worker_pool.WorkerPool`s. The training plan chooses the strategy
(`trainer.cluster.training_plan`, the one place); these rules compare the pools with the
plan and say before submission, naming the pool, the field and the value, what it cannot
run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from components import images
from components.durations import duration_seconds
from components.gpu.validation import ValidationResult, validate_worker_pool_specs
from components.gpu.worker_pool import REDUCTION_SERVER, WorkerPool, replicas
from trainer.cluster.accelerators import ACCELERATORS, Accelerator, weakest
from trainer.cluster.roles import Layout
from trainer.cluster.training_plan import (
    PlanError,
    StrategyError,
    TrainingPlan,
    plan_training,
    requested,
)

if TYPE_CHECKING:
    from trainer.run.training_options import TrainingOptions

POOL_NAMES = ("worker_pool_specs[0] (chief)", "worker_pool_specs[1] (workers)",
              "worker_pool_specs[2] (parameter servers)", "worker_pool_specs[3] (evaluator)")
#: Pool 2 when it runs the Reduction Server, as messages name it.
REDUCERS = "worker_pool_specs[2] (Reduction Server)"

Pools = Sequence[WorkerPool | None]


def reduction_server(pools: Pools) -> bool:
    """Whether pool 2 runs Vertex AI's Reduction Server."""
    pool = pools[2] if len(pools) > 2 else None
    return bool(pool and pool.reduction_server)


def layout_of(pools: Pools) -> Layout:
    """The roles of Vertex AI worker pools (a Reduction Server pool holds no parameters)."""
    return Layout(workers=replicas(pools, 1),
                  parameter_servers=0 if reduction_server(pools) else replicas(pools, 2),
                  evaluators=replicas(pools, 3))


def check_layout(pools: Pools) -> list[str]:
    """The problems of the pools' roles that no strategy changes: an unused pool between
    used ones, an evaluator pool of several replicas. Each names the pool, the field, the
    value and what is valid."""
    errors: list[str] = []
    used = [i for i, p in enumerate(pools) if p]
    for gap in (i for i in range(1, max(used, default=0)) if i not in used):
        errors.append(
            f"{POOL_NAMES[gap]} is empty while pool {max(used)} is used; "
            "google-cloud-pipeline-components' CustomJob launcher drops empty pools (2.22: "
            "recursive_remove_empty), so every later pool would reach Vertex AI one role "
            "earlier (an evaluator would become a parameter server); fill the pool or remove "
            "the pools after it")
    if replicas(pools, 3) > 1:
        errors.append(f"{POOL_NAMES[3]}: replica_count is {replicas(pools, 3)}; a sidecar "
                      "evaluator is exactly 1 replica")
    return errors


def check_roles(pools: Pools, plan: TrainingPlan, strategy: str) -> tuple[list[str], list[str]]:
    """What the pools hold that the plan's strategy cannot use: parameter servers under
    MultiWorkerMirroredStrategy (an error), GPUs on parameter servers (advice).

    Args:
        pools: The checked pools.
        plan: Their training plan (`plan_for_pools`).
        strategy: The `training.strategy` asked for, as messages name it.

    Returns:
        (errors, warnings).
    """
    layout = layout_of(pools)
    if plan.strategy != "parameter_server" and layout.parameter_servers:
        return [
            f"{POOL_NAMES[2]}: replica_count is {layout.parameter_servers}, but "
            f"training.strategy {strategy} trains with MultiWorkerMirroredStrategy, which has "
            "no use for parameter servers; use training.strategy parameter_server or auto, or "
            f"run Vertex AI's Reduction Server there (container_spec.image_uri "
            f"{REDUCTION_SERVER}:latest, or the same path under europe-docker.pkg.dev or "
            "asia-docker.pkg.dev nearer the job)"], []
    servers = pools[2] if len(pools) > 2 else None
    if plan.strategy == "parameter_server" and servers and servers.gpus_per_machine:
        return [], [f"{POOL_NAMES[2]}: machine_spec.accelerator_count is "
                    f"{servers.gpus_per_machine}; parameter servers hold variables and need "
                    "no GPU: a CPU machine such as n1-highmem-8 costs less"]
    return [], []


def check_scheduling(pools: Pools, strategy: str, timeout: str) -> list[str]:
    """The rules of a scheduling strategy for the pools.

    FLEX_START (Dynamic Workload Scheduler) serves only some GPU types, needs the same
    machine configuration in every pool and runs a job for at most 7 days (Vertex AI docs:
    "Schedule training jobs based on resource availability"); neither it nor SPOT
    consumes a reservation.
    """
    from components.gpu import catalog as cat
    from components.gpu.reservations import NONE, UNRESERVABLE

    used = [pool for pool in pools if pool]
    # Reserved capacity cannot create Spot VMs, and Flex-start finds its own capacity
    # (`components.gpu.reservations`).
    errors = [f"{POOL_NAMES[pool.role]}: consumes {pool.reserved.words()} with "
              f"scheduling_strategy {strategy}, which cannot consume reservations: use "
              f"STANDARD, or reservation none" for pool in used
              if strategy in UNRESERVABLE and pool.reserved and pool.reserved.kind != NONE]
    if strategy != "FLEX_START":
        return errors
    for pool in used:
        if pool.accelerator not in cat.FLEX_START_ACCELERATORS:
            errors.append(f"{POOL_NAMES[pool.role]}: machine_spec.accelerator_type is "
                          f"{(pool.accelerator or None)!r}; scheduling_strategy FLEX_START "
                          f"serves only {', '.join(cat.FLEX_START_ACCELERATORS)}")
    if len({(p.machine, p.accelerator, p.gpus_per_machine) for p in used}) > 1:
        errors.append("worker_pool_specs: the pools use different machine_spec values; "
                      "scheduling_strategy FLEX_START needs the same machine configuration "
                      "in every pool")
    seconds = duration_seconds(timeout) or 0.0
    if seconds > cat.FLEX_START_MAX_SECONDS:
        errors.append(f"timeout is {timeout!r}; scheduling_strategy FLEX_START runs a job for "
                      f"at most {cat.FLEX_START_MAX_SECONDS}s (7 days)")
    return errors


def training_pools(pools: Pools, strategy: str) -> list[WorkerPool]:
    """The pools whose machines run training steps: the workers (pool 1) under
    ParameterServerStrategy, where the chief only coordinates; the chief and the workers
    (pools 0 and 1) otherwise."""
    roles = (1,) if strategy == "parameter_server" else (0, 1)
    return [pool for pool in pools[:2] if pool and pool.role in roles]


def training_gpus(pools: Pools, strategy: str) -> tuple[list[str], int]:
    """The GPU types (slowest first) and count of the machines that run training steps:
    the workers (pool 1) under ParameterServerStrategy, where the chief only coordinates;
    the chief and the workers (pools 0 and 1) otherwise.

    Raises:
        PlanError: Under MultiWorkerMirroredStrategy, pools 0 and 1 differ in how many GPUs
            a machine has (a different type with the same count is allowed:
            `check_gpu_types` warns).
    """
    found = training_pools(pools, strategy)
    counts = {pool.gpus_per_machine for pool in found}
    if len(counts) > 1:
        described = "; ".join(
            f"{POOL_NAMES[p.role]} has "
            + (f"{p.gpus_per_machine} x {p.accelerator}" if p.accelerator else "no GPU")
            for p in found)
        raise PlanError(
            f"{described}: MultiWorkerMirroredStrategy runs one replica per GPU on every "
            "training machine and all-reduces across all of them, so every training machine "
            "needs the same number of GPUs (TensorFlow sizes the all-reduce group from each "
            "machine's own devices); give pools 0 and 1 the same accelerator_count")
    kinds = sorted({p.accelerator for p in found if p.accelerator},
                   key=lambda g: (ACCELERATORS[g].peak_tflops, g) if g in ACCELERATORS
                   else (0.0, g))
    return kinds, counts.pop() if counts else 0


def check_gpu_types(pools: Pools, strategy: str) -> list[str]:
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


def plan_for_pools(pools: Pools, **requested: Any) -> TrainingPlan:
    """The training plan of checked worker pools (`trainer.cluster.training_plan`, which
    chooses the strategy); with several GPU types on the training machines, the plan of
    what every one can do. `requested`: what the options ask of the plan
    (`training_plan.requested`: strategy, mixed precision, XLA, ..., the measurements).

    Raises:
        PlanError: The options cannot work on these pools (`StrategyError` when the
            layout cannot run the strategy asked for).
    """
    import dataclasses

    def devices(chosen: str) -> tuple[Accelerator | None, int]:
        kinds, count = training_gpus(pools, chosen)
        known = [ACCELERATORS[k] for k in kinds if k in ACCELERATORS]
        return ((weakest(known) if len(known) > 1 else known[0]) if known else None), count

    plan = plan_training(layout_of(pools), devices=devices,
                         reduction_server=reduction_server(pools), **requested)
    kinds, _ = training_gpus(pools, plan.strategy)
    if len([k for k in kinds if k in ACCELERATORS]) > 1:  # the plan names every type it serves
        plan = dataclasses.replace(plan, accelerator="+".join(kinds))
    return plan


def egress_gbps(pool: WorkerPool) -> float | None:
    """A pool's machines' maximum egress bandwidth (`catalog`'s tables), None if unknown."""
    from components.gpu import catalog as cat

    machine, gpu, count = pool.machine, pool.accelerator, pool.gpus_per_machine
    if machine in cat.FIXED_EGRESS_GBPS:
        return float(cat.FIXED_EGRESS_GBPS[machine])
    if machine.startswith("n1-") and count and gpu in cat.N1_GPU_EGRESS_GBPS:
        return cat.N1_GPU_EGRESS_GBPS[gpu].get(count)
    family, vcpus = machine.partition("-")[0], machine.rsplit("-", 1)[-1]
    if family in cat.GENERAL_PURPOSE_MAX_GBPS and vcpus.isdigit():
        return float(min(cat.GENERAL_PURPOSE_GBPS_PER_VCPU * int(vcpus),
                         cat.GENERAL_PURPOSE_MAX_GBPS[family]))
    return None


def check_reduction_server(pools: Pools) -> list[str]:
    """Advice on a Reduction Server pool's size: Vertex AI's docs ask that pool 2's total
    egress bandwidth match or exceed that of pools 0 and 1 ("Reduce training time with
    Reduction Server": e.g. 8 a2-megagpu-16g workers at 100 Gbps need 25 n1-highcpu-16
    reducers at 32 Gbps)."""
    if not reduction_server(pools):
        return []
    reducers = pools[2]
    training = [pool for pool in pools[:2] if pool]
    each, rates = egress_gbps(reducers), [egress_gbps(p) for p in training]
    machine = reducers.machine
    if each is None or None in rates:
        return [f"{REDUCERS}: the network bandwidth of {machine} or of the training "
                "machines is not recorded here, so the reducers' count cannot be checked "
                "against Vertex AI's rule (reducers' total egress >= the training machines'); "
                "check it on Compute Engine's network bandwidth pages"]
    need = sum(rate * pool.replicas for rate, pool in zip(rates, training, strict=True))
    if reducers.replicas * each >= need:
        return []
    enough = -(-int(need) // int(each))
    return [f"{REDUCERS}: {reducers.replicas} x {machine} reducers give "
            f"{reducers.replicas * each:g} Gbps, "
            f"less than the training machines' {need:g} Gbps; Vertex AI's Reduction Server "
            f"docs ask for at least as much: use {enough} x {machine} (or a machine with more "
            "bandwidth, such as n1-highcpu-16 at 32 Gbps)"]


def check_reduction_server_plugin(pools: Pools) -> list[str]:
    """A Reduction Server pool needs its NCCL plugin in the GPU image (Vertex AI docs:
    "a custom container with NCCL 2.7 or later and the google-reduction-server package"):
    says which one the image installs, or how it is resolved when the image is built."""
    if not reduction_server(pools):
        return []
    return [f"{REDUCERS}: the training machines' NCCL plugin is "
            f"{images.reduction_server_plugin_source()}"]


def check_pools(pools: Any, *, region: str | None = None,
                training: TrainingOptions | None = None, scheduling: str | None = None,
                timeout: str = "") -> ValidationResult:
    """Every rule of Vertex AI worker pools in one result: the GPU rules (machine x GPU type
    x count x region), the roles the strategy needs, the training plan (strategy,
    all-reduce, mixed precision, XLA) and, with `scheduling`, the scheduling strategy's
    rules. The one check the config loader, the validation stage and `gpu-pipeline
    validate-gpu` all run.

    Args:
        pools: Worker pool specs as given (the API's mappings).
        region: The Vertex AI region (its rules are checked when given).
        training: The training options (`strategy`, `mixed_precision`, `xla`); None for
            their defaults.
        scheduling: The scheduling strategy, to check its rules.
        timeout: The job's timeout (FLEX_START's limit).

    Returns:
        The GPU rules' result with the layout's, the plan's and scheduling's errors and
        advice added, and the plan when there are no errors.
    """
    return with_role_checks(validate_worker_pool_specs(pools, region=region), training,
                            scheduling, timeout)


def with_role_checks(result: ValidationResult, training: TrainingOptions | None = None,
                     scheduling: str | None = None, timeout: str = "") -> ValidationResult:
    """A GPU validation result with the layout's (and scheduling's) errors and advice
    added, and the training plan; unchanged when the GPU rules already failed."""
    import dataclasses

    from trainer.run.training_options import TrainingOptions

    if not result.ok:
        return result
    training = training if training is not None else TrainingOptions()
    pools = result.pools
    asked = requested(training)
    # A results file or location the plan could not read is named, never fatal.
    errors, advice, problems = check_layout(pools), list(asked["measurements"].problems), []
    plan = None
    try:  # An evaluator pool of several replicas is told once, by check_layout.
        plan = plan_for_pools(pools, **asked) if replicas(pools, 3) <= 1 else None
    except StrategyError as exc:
        name = POOL_NAMES[2] if layout_of(pools).parameter_servers else POOL_NAMES[1]
        errors += [f"{name}: {problem}" for problem in exc.problems]
    except PlanError as exc:
        problems = exc.problems
    if plan is not None:  # what the pools hold that the plan's strategy does not use
        wrong, advice = check_roles(pools, plan, training.strategy)
        errors += wrong
    if scheduling is not None:
        errors += check_scheduling(pools, scheduling, timeout)
    if not errors:
        advice += check_reduction_server(pools)
        advice += check_gpu_types(pools, plan.strategy) if plan else []
        advice += check_reduction_server_plugin(pools)
        errors += problems
    plan = None if errors else plan
    return dataclasses.replace(result, ok=not errors, errors=result.errors + errors,
                               warnings=result.warnings + advice, plan=plan)
