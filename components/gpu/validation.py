"""Vertex AI worker pools checked against the GPU rules.

Checks every rule of AI Platform Training's "Using GPUs for training models in the cloud"
(https://cloud.google.com/ai-platform/training/docs/using-gpus; valid GPU counts per machine type,
vCPU and memory backing, legacy machine types, regions and zones, Vertex AI worker pool
rules) before anything is spent: on the command line, before compile and run, and as the
pipeline's validation stage. The facts live in `components.gpu.catalog`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from components.gpu import catalog as cat
from components.gpu.image_support import image_cannot_serve
from components.gpu.regions import check_region, listed
from components.gpu.reservations import Reservation, ReservationError, from_affinity, parse
from components.gpu.worker_pool import WorkerPool, as_int, is_int, parse_pools
from trainer.cluster.roles import POOLS
from trainer.cluster.training_plan import TrainingPlan
from trainer.common.errors import InputError
from trainer.common.schema import short

ACCELERATOR_TYPES = cat.ACCELERATOR_TYPES

#: Vertex AI's fixed worker pool roles, by index, in words.
POOL_ROLES = tuple(pool.description for pool in POOLS)

#: Valid GPU counts per machine type: the GPU guide's table plus the fixed-GPU families.
VALID_GPU_COUNTS: dict[str, dict[str, tuple[int, ...]]] = {
    **cat.SEED_TABLE,
    **{name: {m.fixed_gpu[0]: (m.fixed_gpu[1],)} for name, m in cat.MODERN_MACHINES.items()},
}

#: Replicas of one pool: far beyond any quota, but within what the API's int64 takes.
MAX_REPLICAS = 10_000
_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")


class GpuConfigError(InputError):
    """An invalid GPU configuration; the message lists every problem."""

    def __init__(self, errors: Sequence[str], title: str = "invalid GPU configuration"):
        self.errors = list(errors)
        super().__init__(f"{title}:\n" + "\n".join(f"  - {e}" for e in errors))


@dataclasses.dataclass(frozen=True)
class ValidationResult:
    """Outcome of validating worker pool specs.

    Attributes:
        ok: True when there are no errors (warnings do not make a configuration invalid).
        errors: One message per problem, naming the pool, field, value and what is valid.
        warnings: Advice that does not block the run.
        specs: The normalised worker pool specs (integers as integers, unused trailing
            pools dropped, an unused pool between used ones kept as `{}`).
        plan: The training plan (`components.gpu.pools.with_role_checks` adds it
            when the pools and options allow one; a result refused for what the image
            lacks still carries it, to show what the pools would run).
    """

    ok: bool
    errors: list[str]
    warnings: list[str]
    specs: list[dict[str, Any]]
    plan: TrainingPlan | None = None

    @functools.cached_property
    def pools(self) -> tuple[WorkerPool | None, ...]:
        """The normalised specs parsed, None where a pool is unused."""
        return parse_pools(self.specs)

    @property
    def training_machines(self) -> int:
        """Machines that train: the chief and the worker pool's replicas (pools 0 and 1)."""
        return sum(p.replicas for p in self.pools[:2] if p) or 1

    def describe(self) -> str:
        """The used pools in words: `1 x n1-standard-8 + 1 x NVIDIA_TESLA_T4; ...`."""
        return "; ".join(pool.describe() for pool in self.pools if pool)

    def raise_for_errors(self) -> ValidationResult:
        """Raises GpuConfigError when the result has errors, else returns self."""
        if not self.ok:
            raise GpuConfigError(self.errors)
        return self


def _gb(value: float) -> str:
    return f"{value:g} GB"


def machine_types_accepting(accelerator_type: str, count: int) -> list[str]:
    """Returns the machine types that accept `count` GPUs of `accelerator_type`."""
    return [m for m, row in VALID_GPU_COUNTS.items() if count in row.get(accelerator_type, ())]


def derive_valid_counts(machine_type: str) -> dict[str, tuple[int, ...]]:
    """Rebuilds a machine type's row of the table from the rules the documents state.

    A count is valid when the GPU type attaches in that count and the GPUs back at least
    the machine's vCPUs and memory (with the K80 and P100 caps); A2 machines carry A100s.

    Args:
        machine_type: A machine type of the GPU guide's table.

    Returns:
        GPU type -> valid counts, without empty entries.
    """
    if machine_type in cat.A2_MACHINES:
        gpu, count = cat.A2_MACHINES[machine_type].fixed_gpu
        return {gpu: (count,)}
    machine = cat.N1_MACHINES[machine_type]
    row = {}
    for gpu, counts in cat.GPU_COUNTS.items():
        ok = tuple(c for c in counts if _backs(gpu, c, machine))
        if ok:
            row[gpu] = ok
    return row


def _backs(gpu: str, count: int, machine: cat.Machine) -> bool:
    vcpus, memory = cat.GPU_BACKING[gpu].limits(count)
    return machine.vcpus <= vcpus and machine.memory_gb <= memory


def _shortfall(machine_type: str, gpu: str, count: int) -> str:
    """Why `count` x `gpu` cannot serve `machine_type`, from the backing rules."""
    machine = cat.N1_MACHINES.get(machine_type)
    if machine is None or gpu not in cat.GPU_BACKING:
        return ""
    if count not in cat.GPU_COUNTS[gpu]:
        return f" ({gpu} attaches in counts of {listed(cat.GPU_COUNTS[gpu])} only)"
    vcpus, memory = cat.GPU_BACKING[gpu].limits(count)
    return (f" ({count} x {gpu} back at most {vcpus:g} vCPUs and {_gb(memory)}; {machine_type} "
            f"has {machine.vcpus} vCPUs and {_gb(machine.memory_gb)})")


def _check_machine(name: str, machine_type: Any, accelerator_type: str | None,
                   accelerator_count: int, errors: list[str], warnings: list[str]) -> None:
    """Checks the machine type against its GPUs; appends problems."""
    if not isinstance(machine_type, str) or not machine_type:
        errors.append(f"{name}: machine_spec.machine_type is {short(machine_type)}; expected a "
                      "Compute Engine machine type such as n1-standard-8")
        return
    legacy = cat.LEGACY_MACHINES.get(machine_type)
    if legacy is not None:
        carries = f" with {legacy.gpu[1]} x {legacy.gpu[0]}" if legacy.gpu else ""
        errors.append(f"{name}: machine_spec.machine_type {short(machine_type)} is a legacy AI "
                      f"Platform type, which Vertex AI does not accept; use its Compute Engine "
                      f"equivalent {legacy.equivalent}{carries}")
        return
    if not _MACHINE_TYPE.match(machine_type):
        known = [*VALID_GPU_COUNTS, *cat.A2_MACHINES, *cat.MODERN_MACHINES]
        errors.append(f"{name}: machine_spec.machine_type is {short(machine_type)}"
                      f"{did_you_mean(machine_type, known)}; expected a Compute Engine machine "
                      "type such as n1-standard-8")
        return
    row = VALID_GPU_COUNTS.get(machine_type)
    fixed = (cat.A2_MACHINES.get(machine_type) or cat.MODERN_MACHINES.get(machine_type))
    if fixed is not None and fixed.arm:
        errors.append(f"{name}: machine_spec.machine_type {short(machine_type)} has Arm (aarch64) "
                      f"CPUs, and the trainer image ({cat.TRAINER_PLATFORM}) cannot run on "
                      "them; choose an x86 machine such as a4-highgpu-8g (B200) or "
                      "a3-ultragpu-8g (H200)")
        return
    if accelerator_type is None:
        if fixed is not None:
            gpu, count = fixed.fixed_gpu
            errors.append(f"{name}: machine_spec.accelerator_type is not set, but {machine_type} "
                          f"comes with {count} x {gpu}; set accelerator_type {gpu} and "
                          f"accelerator_count {count}")
        return
    if row is None:
        accepting = machine_types_accepting(accelerator_type, accelerator_count)
        # A machine of a series no known type has (n1-standrd-8) is likely a typo.
        series = {t.rsplit("-", 1)[0] for t in [*VALID_GPU_COUNTS, *cat.N1_MACHINES]}
        typo = "" if machine_type.rsplit("-", 1)[0] in series else \
            did_you_mean(machine_type, accepting)
        errors.append(f"{name}: machine_spec.machine_type is {short(machine_type)}{typo}"
                      ", which takes no GPUs; machine "
                      f"types taking {accelerator_count} x {accelerator_type}: "
                      f"{listed(accepting) or 'none'}")
    elif accelerator_type not in row:
        reason = ""
        if accelerator_type in cat.GPU_COUNTS and machine_type in cat.N1_MACHINES:
            reason = _shortfall(machine_type, accelerator_type,
                                max(cat.GPU_COUNTS[accelerator_type]))
        elif accelerator_type == cat.A100:
            reason = " (A100 GPUs come only with A2 machine types: a2-highgpu-*, a2-megagpu-16g)"
        errors.append(f"{name}: machine_spec.accelerator_type {accelerator_type} cannot be "
                      f"attached to {machine_type}{reason}; {machine_type} takes {listed(row)}")
    elif accelerator_count not in row[accelerator_type]:
        others = machine_types_accepting(accelerator_type, accelerator_count)
        errors.append(f"{name}: machine_spec.accelerator_count is {accelerator_count}; "
                      f"{machine_type} takes {listed(row[accelerator_type])} x {accelerator_type}"
                      f"{_shortfall(machine_type, accelerator_type, accelerator_count)}; "
                      f"machine types taking {accelerator_count}: {listed(others) or 'none'}")
    unserved = image_cannot_serve(accelerator_type)
    if unserved:
        errors.append(f"{name}: machine_spec.accelerator_type {accelerator_type} cannot run the "
                      f"trainer image: {unserved}")


def _accelerator_type(name: str, machine_spec: Mapping[str, Any], errors: list[str],
                      warnings: list[str]) -> str | None:
    """A pool's GPU type as given (None when unset or not a name), gcloud's spelling
    (nvidia-tesla-t4) read as the API's (NVIDIA_TESLA_T4) with a warning."""
    accelerator_type = machine_spec.get("accelerator_type") or None
    if accelerator_type is not None and not isinstance(accelerator_type, str):
        errors.append(f"{name}: machine_spec.accelerator_type is {short(accelerator_type)}; "
                      f"expected one GPU type name such as NVIDIA_TESLA_T4")
        return None
    if isinstance(accelerator_type, str) and accelerator_type not in ACCELERATOR_TYPES:
        spelled = accelerator_type.strip().upper().replace("-", "_")
        if spelled in ACCELERATOR_TYPES:
            warnings.append(f"{name}: machine_spec.accelerator_type {short(accelerator_type)} read "
                            f"as {spelled}, the spelling the Vertex AI API takes")
            return spelled
    return accelerator_type


def _validate_pool(name: str, index: int, pool: Mapping[str, Any], errors: list[str],
                   warnings: list[str], project: str = "") -> dict[str, Any]:
    """Validates one non-empty pool and returns its normalised form."""
    machine_spec = pool.get("machine_spec")
    if not isinstance(machine_spec, Mapping):
        errors.append(f"{name}: field 'machine_spec' is {short(machine_spec)}; expected a mapping "
                      "with at least 'machine_type'")
        machine_spec = {}
    unknown = sorted(set(machine_spec) - {"machine_type", "accelerator_type", "accelerator_count",
                                          "reservation_affinity"})
    if unknown:
        errors.append(f"{name}: unknown machine_spec field(s) {listed(unknown)}; valid fields are "
                      "machine_type, accelerator_type, accelerator_count, reservation_affinity")
    machine_type = machine_spec.get("machine_type")
    accelerator_type = _accelerator_type(name, machine_spec, errors, warnings)
    accelerator_count = as_int(machine_spec.get("accelerator_count", 0) or 0)
    replica_count = as_int(pool.get("replica_count", 1))

    if not is_int(replica_count) or not 1 <= replica_count <= MAX_REPLICAS:
        errors.append(f"{name}: replica_count is {short(replica_count)}; expected an integer "
                      f"from 1 to {MAX_REPLICAS}")
    elif index == 0 and replica_count != 1:
        errors.append(f"{name}: replica_count is {replica_count}; the chief pool must have "
                      "exactly 1 replica (put the other machines in pool 1, the workers)")

    if not is_int(accelerator_count) or accelerator_count < 0:
        errors.append(f"{name}: machine_spec.accelerator_count is {short(accelerator_count)}; "
                      "expected a whole number of GPUs")
    elif accelerator_type is None and accelerator_count:
        errors.append(f"{name}: machine_spec.accelerator_count is {accelerator_count} but "
                      "accelerator_type is not set; give both or neither "
                      f"(types: {listed(ACCELERATOR_TYPES)})")
    elif accelerator_type is not None and not accelerator_count:
        given = "is 0" if "accelerator_count" in machine_spec else "is not set"
        errors.append(f"{name}: machine_spec.accelerator_type is {short(accelerator_type)} but "
                      f"accelerator_count {given}; give at least 1 GPU, or neither field")
    elif accelerator_type is not None and accelerator_type not in ACCELERATOR_TYPES:
        errors.append(f"{name}: machine_spec.accelerator_type is {short(accelerator_type)}"
                      f"{did_you_mean(accelerator_type, ACCELERATOR_TYPES)}; valid types are "
                      f"{listed(ACCELERATOR_TYPES)}")
    else:
        _check_machine(name, machine_type, accelerator_type, accelerator_count, errors, warnings)

    normalised: dict[str, Any] = {"machine_spec": {"machine_type": machine_type},
                                  "replica_count": replica_count}
    if accelerator_type is not None and accelerator_count:
        normalised["machine_spec"]["accelerator_type"] = accelerator_type
        normalised["machine_spec"]["accelerator_count"] = accelerator_count
    reservation = _reservation(name, pool, machine_spec, project, errors)
    if reservation is not None:
        normalised["machine_spec"]["reservation_affinity"] = reservation.affinity()
    # Keep whatever else the caller set (container_spec, disk_spec...) untouched.
    for key, value in pool.items():
        if key not in ("machine_spec", "replica_count", "reservation"):
            normalised[key] = copy.deepcopy(value)
    return normalised


def _reservation(name: str, pool: Mapping[str, Any], machine_spec: Mapping[str, Any],
                 project: str, errors: list[str]) -> Reservation | None:
    """The pool's reservation: the config's `reservation` (completed with `project`), or
    the API's `machine_spec.reservation_affinity`; None when it has neither (Vertex AI's
    default) or the one given is malformed (said in `errors`)."""
    given, affinity = pool.get("reservation"), machine_spec.get("reservation_affinity")
    if given is not None and affinity is not None:
        errors.append(f"{name}: both reservation and machine_spec.reservation_affinity are "
                      "set; give one")
        return None
    try:
        if given is not None:
            return parse(given, project)
        return from_affinity(affinity) if affinity is not None else None
    except ReservationError as exc:
        field = "reservation" if given is not None else "machine_spec.reservation_affinity"
        errors.append(f"{name}: {field} {exc}")
        return None


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """` (did you mean X?)` for the closest of `choices` to a mistyped machine or GPU type
    ("" if none is close); a GPU type is compared by its model (NVIDIA_TESLA_T4 -> T4)."""
    from trainer.common.suggest import did_you_mean as suggest

    def key(text: str) -> str:
        return text.upper().replace("-", "_").removeprefix("NVIDIA_").removeprefix("TESLA_")

    return suggest(value, choices, key)


def validate_worker_pool_specs(specs: Sequence[Mapping[str, Any]], region: str | None = None,
                               *, labels: Sequence[str] | None = None,
                               project: str = "") -> ValidationResult:
    """Validates Vertex AI CustomJob worker pool specs against the GPU rules.

    Args:
        specs: Worker pool specs as the CustomJob API takes them (pool 0 chief, 1 workers,
            2 parameter servers, 3 evaluators); an empty mapping marks an unused pool.
        region: Vertex AI region the job runs in; checked when given.
        labels: Names for the pools in messages (default `worker_pool_specs[i] (role)`).
        project: The run's project, which completes a pool's `reservation: ZONE/NAME`.

    Returns:
        A ValidationResult with every problem found, and the normalised specs.
    """
    errors: list[str] = []
    warnings: list[str] = []
    normalised: list[dict[str, Any]] = []
    if isinstance(specs, (str, bytes)) or not isinstance(specs, Sequence):
        return ValidationResult(False, [f"worker_pool_specs is {short(specs)}; expected a list of "
                                        "1 to 4 worker pool specs"], [], [])
    if not 1 <= len(specs) <= len(POOL_ROLES):
        errors.append(f"worker_pool_specs has {len(specs)} pools; Vertex AI takes 1 to "
                      f"{len(POOL_ROLES)} (chief, workers, parameter servers, evaluators)")
    names = [labels[i] if labels and i < len(labels) else f"worker_pool_specs[{i}] ({role})"
             for i, role in enumerate(POOL_ROLES)]
    for index, pool in enumerate(specs[:len(POOL_ROLES)]):
        if not isinstance(pool, Mapping):
            errors.append(f"{names[index]} is {short(pool)}; expected a mapping")
            normalised.append({})
        elif not pool:
            if index == 0:
                errors.append(f"{names[0]} is empty; the chief pool is required")
            normalised.append({})
        else:
            normalised.append(_validate_pool(names[index], index, pool, errors, warnings,
                                             project))
    while normalised and not normalised[-1]:
        normalised.pop()  # Trailing empty pools carry no meaning.
    if region is not None:
        check_region(region, [(names[i], p) for i, p in enumerate(normalised) if p],
                      errors, warnings)
        errors += [f"{names[pool.role]}: {pool.reserved.words()} is in zone "
                   f"{pool.reserved.zone}, outside region {region} where the job runs (a "
                   "reservation is zonal)" for pool in parse_pools(normalised)
                   if pool and pool.reserved and pool.reserved.zone
                   and pool.reserved.zone.rsplit("-", 1)[0] != region]
    return ValidationResult(not errors, errors, warnings, normalised)

