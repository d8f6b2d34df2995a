"""GPU-configuration validation of Vertex AI worker pools.

The rules come from the project's source documents on using GPUs for training in the
cloud (valid GPU counts per Compute Engine machine type, vCPU and memory limits, regions,
Vertex AI worker pools). This module is pure Python and must not import TensorFlow: it
runs on the command line before anything is spent, and as the pipeline's validation stage.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Iterable, Mapping, Sequence

ACCELERATOR_TYPES = (
    "NVIDIA_TESLA_A100",
    "NVIDIA_TESLA_K80",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100",
)

_K80, _P4, _P100, _T4, _V100, _A100 = (
    "NVIDIA_TESLA_K80",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_A100",
)


def _n1_row(k80: Sequence[int], p4: Sequence[int], p100: Sequence[int],
            t4: Sequence[int], v100: Sequence[int]) -> dict[str, tuple[int, ...]]:
    row = {_K80: k80, _P4: p4, _P100: p100, _T4: t4, _V100: v100}
    return {gpu: tuple(counts) for gpu, counts in row.items() if counts}


_SMALL = _n1_row((1, 2, 4, 8), (1, 2, 4), (1, 2, 4), (1, 2, 4), (1, 2, 4, 8))
_16 = _n1_row((2, 4, 8), (1, 2, 4), (1, 2, 4), (1, 2, 4), (2, 4, 8))
_32 = _n1_row((4, 8), (2, 4), (2, 4), (2, 4), (4, 8))
# 64/96 vCPUs with >= 208 GB: 8 x K80 caps memory at 208 GB and 4 x P100 at 64 vCPUs and
# 208 GB, so those columns are empty; n1-highcpu-64 (57.6 GB) still takes both.
_BIG = _n1_row((), (4,), (), (4,), (8,))

#: Valid GPU counts per machine type and accelerator (the documents' compatibility table).
#: The table's text lost its empty cells; the rows are rebuilt from the rules it states:
#: A100 attaches only to A2 machines, a GPU backs a bounded number of vCPUs and GB, and the
#: K80 and P100 caps above.
VALID_GPU_COUNTS: dict[str, dict[str, tuple[int, ...]]] = {
    "n1-standard-4": _SMALL,
    "n1-standard-8": _SMALL,
    "n1-standard-16": _16,
    "n1-standard-32": _32,
    "n1-standard-64": _BIG,
    "n1-standard-96": _BIG,
    "n1-highmem-2": _SMALL,
    "n1-highmem-4": _SMALL,
    "n1-highmem-8": _SMALL,
    "n1-highmem-16": _16,
    "n1-highmem-32": _32,
    "n1-highmem-64": _BIG,
    "n1-highmem-96": _BIG,
    "n1-highcpu-16": _16,
    "n1-highcpu-32": _32,
    "n1-highcpu-64": _n1_row((8,), (4,), (4,), (4,), (8,)),
    "n1-highcpu-96": _BIG,
    "a2-highgpu-1g": {_A100: (1,)},
    "a2-highgpu-2g": {_A100: (2,)},
    "a2-highgpu-4g": {_A100: (4,)},
    "a2-highgpu-8g": {_A100: (8,)},
    "a2-megagpu-16g": {_A100: (16,)},
}

#: Regions offering GPUs for training (the newer documents' list).
GPU_REGIONS = (
    "us-west1",
    "us-west2",
    "us-central1",
    "us-east1",
    "us-east4",
    "northamerica-northeast1",
    "southamerica-east1",
    "europe-west1",
    "europe-west2",
    "europe-west4",
    "asia-south1",
    "asia-southeast1",
    "asia-east1",
    "asia-northeast1",
    "asia-northeast3",
    "australia-southeast1",
)

#: Vertex AI's fixed worker pool roles, by index.
POOL_ROLES = ("chief", "worker", "parameter server", "evaluator")


class GpuConfigError(ValueError):
    """An invalid worker pool configuration; the message lists every problem."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        super().__init__("invalid GPU configuration:\n" + "\n".join(f"  - {e}" for e in errors))


@dataclasses.dataclass(frozen=True)
class ValidationResult:
    """Outcome of validating worker pool specs.

    Attributes:
        ok: True when there are no errors (warnings do not make a configuration invalid).
        errors: One message per problem, naming the pool, field, value and what is valid.
        warnings: Advice that does not block the run.
        specs: The normalised worker pool specs (see `normalise_worker_pool_specs`).
    """

    ok: bool
    errors: list[str]
    warnings: list[str]
    specs: list[dict[str, Any]]

    def raise_for_errors(self) -> "ValidationResult":
        """Raises GpuConfigError when the result has errors, else returns self."""
        if not self.ok:
            raise GpuConfigError(self.errors)
        return self


def _pool_name(index: int) -> str:
    role = POOL_ROLES[index] if index < len(POOL_ROLES) else "unknown"
    return f"worker_pool_specs[{index}] ({role})"


def _fmt(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in values)


def machine_types_accepting(accelerator_type: str, count: int) -> list[str]:
    """Returns the machine types that accept `count` GPUs of `accelerator_type`."""
    return [m for m, row in VALID_GPU_COUNTS.items() if count in row.get(accelerator_type, ())]


def _as_int(value: Any) -> Any:
    """Integral floats become ints: KFP passes list parameters through protobuf Struct,
    whose numbers are all doubles (1 arrives as 1.0). Anything else is returned as is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validate_pool(index: int, pool: Mapping[str, Any], errors: list[str]) -> dict[str, Any]:
    """Validates one non-empty pool and returns its normalised form."""
    name = _pool_name(index)
    machine_spec = pool.get("machine_spec")
    if not isinstance(machine_spec, Mapping):
        errors.append(f"{name}: field 'machine_spec' is {machine_spec!r}; expected a mapping "
                      "with at least 'machine_type'")
        machine_spec = {}
    unknown = sorted(set(machine_spec) - {"machine_type", "accelerator_type", "accelerator_count"})
    if unknown:
        errors.append(f"{name}: unknown machine_spec field(s) {_fmt(unknown)}; valid fields are "
                      "machine_type, accelerator_type, accelerator_count")
    machine_type = machine_spec.get("machine_type")
    accelerator_type = machine_spec.get("accelerator_type") or None
    accelerator_count = _as_int(machine_spec.get("accelerator_count", 0) or 0)
    replica_count = _as_int(pool.get("replica_count", 1))

    if not _is_int(replica_count) or replica_count < 1:
        errors.append(f"{name}: replica_count is {replica_count!r}; expected an integer >= 1")
    elif index == 0 and replica_count != 1:
        errors.append(f"{name}: replica_count is {replica_count}; the chief pool must have "
                      "exactly 1 replica")

    if not isinstance(machine_type, str) or not machine_type:
        errors.append(f"{name}: machine_spec.machine_type is {machine_type!r}; expected a "
                      "machine type such as n1-standard-8")
    if not _is_int(accelerator_count) or accelerator_count < 0:
        errors.append(f"{name}: machine_spec.accelerator_count is {accelerator_count!r}; "
                      "expected a whole number of GPUs")
    elif accelerator_type is None and accelerator_count:
        errors.append(f"{name}: machine_spec.accelerator_count is {accelerator_count} but "
                      "accelerator_type is not set; give both or neither "
                      f"(types: {_fmt(ACCELERATOR_TYPES)})")
    elif accelerator_type is not None and not accelerator_count:
        errors.append(f"{name}: machine_spec.accelerator_type is {accelerator_type!r} but "
                      "accelerator_count is not set; give both or neither")
    elif accelerator_type is not None and accelerator_type not in ACCELERATOR_TYPES:
        errors.append(f"{name}: machine_spec.accelerator_type is {accelerator_type!r}; valid "
                      f"types are {_fmt(ACCELERATOR_TYPES)}")
    elif accelerator_type is not None and isinstance(machine_type, str) and machine_type:
        row = VALID_GPU_COUNTS.get(machine_type)
        if row is None:
            accepting = machine_types_accepting(accelerator_type, accelerator_count)
            errors.append(f"{name}: machine_spec.machine_type is {machine_type!r}, which takes no "
                          f"GPUs; machine types taking {accelerator_count} x {accelerator_type}: "
                          f"{_fmt(accepting) or 'none'}")
        elif accelerator_type not in row:
            errors.append(f"{name}: machine_spec.accelerator_type {accelerator_type!r} cannot be "
                          f"attached to {machine_type}; it takes {_fmt(row)}")
        elif accelerator_count not in row[accelerator_type]:
            others = machine_types_accepting(accelerator_type, accelerator_count)
            errors.append(f"{name}: machine_spec.accelerator_count is {accelerator_count}; "
                          f"{machine_type} takes {_fmt(row[accelerator_type])} x "
                          f"{accelerator_type}; machine types taking {accelerator_count}: "
                          f"{_fmt(others) or 'none'}")

    normalised: dict[str, Any] = {
        "machine_spec": {"machine_type": machine_type},
        "replica_count": replica_count,
    }
    if accelerator_type is not None and accelerator_count:
        normalised["machine_spec"]["accelerator_type"] = accelerator_type
        normalised["machine_spec"]["accelerator_count"] = accelerator_count
    # Keep whatever else the caller set (container_spec, disk_spec...) untouched.
    for key, value in pool.items():
        if key not in ("machine_spec", "replica_count"):
            normalised[key] = copy.deepcopy(value)
    return normalised


def validate_worker_pool_specs(specs: Sequence[Mapping[str, Any]],
                               region: str | None = None) -> ValidationResult:
    """Validates Vertex AI CustomJob worker pool specs against the GPU rules.

    Args:
        specs: Worker pool specs as the CustomJob API takes them (pool 0 chief, 1 workers,
            2 parameter servers, 3 evaluators); an empty mapping marks an unused pool.
        region: Vertex AI region the job runs in; checked when given.

    Returns:
        A ValidationResult with every problem found, and the normalised specs.
    """
    errors: list[str] = []
    warnings: list[str] = []
    normalised: list[dict[str, Any]] = []
    if isinstance(specs, (str, bytes)) or not isinstance(specs, Sequence):
        return ValidationResult(False, [f"worker_pool_specs is {specs!r}; expected a list of "
                                        "1 to 4 worker pool specs"], [], [])
    if not 1 <= len(specs) <= len(POOL_ROLES):
        errors.append(f"worker_pool_specs has {len(specs)} pools; Vertex AI takes 1 to "
                      f"{len(POOL_ROLES)} (chief, workers, parameter servers, evaluators)")
    for index, pool in enumerate(specs[:len(POOL_ROLES)]):
        if not isinstance(pool, Mapping):
            errors.append(f"{_pool_name(index)} is {pool!r}; expected a mapping")
            normalised.append({})
        elif not pool:
            if index == 0:
                errors.append(f"{_pool_name(0)} is empty; the chief pool is required")
            normalised.append({})
        else:
            normalised.append(_validate_pool(index, pool, errors))
    while normalised and not normalised[-1]:
        normalised.pop()  # Trailing empty pools carry no meaning.

    if region is not None:
        gpu_used = any(p.get("machine_spec", {}).get("accelerator_type") for p in normalised if p)
        if gpu_used and region not in GPU_REGIONS:
            errors.append(f"region is {region!r}, which offers no GPUs for training; GPU regions: "
                          f"{_fmt(GPU_REGIONS)}")
    return ValidationResult(not errors, errors, warnings, normalised)
