"""AI Platform Training `config.yaml` -> Vertex AI worker pools.

AI Platform Training's documents ("Using GPUs for training models in the cloud",
https://cloud.google.com/ai-platform/training/docs/using-gpus, and "Training overview",
https://cloud.google.com/ai-platform/training/docs/overview) describe jobs as
configurations with scale tiers, legacy machine types and master/worker/parameterServer/
evaluator; Vertex AI takes worker pool specs. Converting them lets a user migrate the
documents' own examples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from components.gpu import catalog as cat
from components.gpu.ai_platform_job import not_used
from components.gpu.validation import (
    POOL_ROLES,
    GpuConfigError,
    ValidationResult,
    listed,
    validate_worker_pool_specs,
)
from components.gpu.worker_pool import as_int, is_int
from trainer.cluster.roles import POOLS
from trainer.common.schema import short

#: The fields of AI Platform Training's TrainingInput (its REST reference); the cluster's
#: are converted, the others belong to the job and are not needed on Vertex AI.
TRAINING_INPUT_KEYS = frozenset({
    "scaleTier", "masterType", "masterConfig", "workerType", "workerConfig", "workerCount",
    "parameterServerType", "parameterServerConfig", "parameterServerCount", "evaluatorType",
    "evaluatorConfig", "evaluatorCount", "region", "runtimeVersion", "pythonVersion", "jobDir",
    "packageUris", "pythonModule", "args", "hyperparameters", "scheduling", "network",
    "serviceAccount", "useChiefInTfConfig", "encryptionConfig", "enableWebAccess"})

#: (AI Platform task, Vertex pool index).
_TASKS = tuple((pool.ai_platform, pool.index) for pool in POOLS)


@dataclasses.dataclass(frozen=True)
class Conversion:
    """An AI Platform `trainingInput` converted to Vertex AI worker pool specs."""

    specs: list[dict[str, Any]]
    errors: list[str]
    warnings: list[str]
    labels: list[str]


def _gpu_type(value: Any) -> Any:
    # gcloud flags spell GPU types as nvidia-tesla-t4; the API as NVIDIA_TESLA_T4.
    return value.strip().upper().replace("-", "_") if isinstance(value, str) else value


def convert_ai_platform_config(training_input: Any, *, check_legacy: bool = False
                               ) -> Conversion:
    """Converts an AI Platform Training `trainingInput` to Vertex AI worker pool specs.

    Args:
        training_input: The parsed config.yaml, with or without its `trainingInput` key.
        check_legacy: Refuse a legacy type or tier whose GPUs the image cannot run, with
            the configuration to paste instead (`legacy_gpus.refusal`); off, they convert
            as the GPU guide's tables say (and the image's check refuses their GPUs).

    Returns:
        The specs (not yet checked against the GPU rules) with every conversion problem.
    """
    errors: list[str] = []
    warnings: list[str] = []
    labels = [f"trainingInput.{task} (worker_pool_specs[{i}], {POOL_ROLES[i]})"
              for task, i in _TASKS]
    if isinstance(training_input, Mapping) and "trainingInput" in training_input:
        training_input = training_input["trainingInput"]
    if not isinstance(training_input, Mapping):
        return Conversion([], [f"trainingInput is {short(training_input)}; expected a mapping with "
                               "scaleTier, masterType, ..."], [], labels)
    unknown = [k for k in training_input if k not in TRAINING_INPUT_KEYS]
    for key in unknown:
        close = [k for k in TRAINING_INPUT_KEYS if str(key).lower() == k.lower()]
        errors.append(f"trainingInput has the unknown key {short(key)}"
                      + (f"; did you mean {close[0]}?" if close else
                         f"; valid keys are {listed(sorted(TRAINING_INPUT_KEYS))}"))
    warnings += not_used(training_input)  # the job's fields the pipeline does not take
    tier = training_input.get("scaleTier", "BASIC")
    if not isinstance(tier, str):
        errors.append(f"trainingInput.scaleTier is {short(tier)}; expected one of "
                      f"{listed([*cat.SCALE_TIERS, *cat.UNCONVERTIBLE_TIERS, 'CUSTOM'])}")
    if errors:
        return Conversion([], errors, warnings, labels)
    if tier != tier.upper():  # gcloud's --scale-tier takes lower case; the API, upper
        warnings.append(f"trainingInput.scaleTier {short(tier)} read as {tier.upper()}, the "
                        "spelling the API takes")
        tier = tier.upper()
    if check_legacy:
        from components.gpu.legacy_gpus import refusal

        refused = refusal({**training_input, "scaleTier": tier}, None,
                          convert_ai_platform_config)
        if refused:
            return Conversion([], refused, warnings, labels)
    cluster_fields = [k for k in training_input if k.startswith(
        tuple(task for task, _ in _TASKS))]
    if tier in cat.SCALE_TIERS:
        if cluster_fields:
            verb = "is" if len(cluster_fields) == 1 else "are"
            errors.append(f"trainingInput.scaleTier is {tier}, which fixes the cluster, but "
                          f"{listed(sorted(cluster_fields))} {verb} set; those need scaleTier "
                          "CUSTOM")
        legacy = cat.LEGACY_MACHINES[cat.SCALE_TIERS[tier]]
        return Conversion([_legacy_pool(legacy, 1)], errors, warnings, labels)
    if tier in cat.UNCONVERTIBLE_TIERS:
        return Conversion([], [f"trainingInput.scaleTier is {tier}, which has no fixed machine "
                               "types to carry over to Vertex AI; use scaleTier CUSTOM with "
                               "masterType, workerType, ... set explicitly"], [], labels)
    if tier != "CUSTOM":
        valid = listed([*cat.SCALE_TIERS, *cat.UNCONVERTIBLE_TIERS, "CUSTOM"])
        return Conversion([], [f"trainingInput.scaleTier is {short(tier)}; valid tiers are "
                               f"{valid}"], [], labels)
    pools = [_custom_pool(training_input, task, index, errors, warnings)
             for task, index in _TASKS]
    while pools and not pools[-1]:
        pools.pop()
    return Conversion(pools, errors, warnings, labels)


def _replicas(training_input: Mapping[str, Any], task: str, index: int,
              errors: list[str], warnings: list[str]) -> int:
    """How many replicas a scaleTier CUSTOM task asks for (0: none, or a problem noted)."""
    machine = training_input.get(f"{task}Type")
    if index == 0:
        if not machine:
            errors.append("trainingInput.masterType is not set; scaleTier CUSTOM needs the "
                          "master's machine type (e.g. n1-highcpu-16)")
            return 0
        return 1
    count = as_int(training_input.get(f"{task}Count", 0))
    if not is_int(count) or count < 0:
        errors.append(f"trainingInput.{task}Count is {short(count)}; expected a whole number")
        return 0
    if count and not machine:
        errors.append(f"trainingInput.{task}Type is not set; {task}Count is {count} and needs "
                      "a machine type")
        return 0
    if not count and (machine or training_input.get(f"{task}Config")):
        warnings.append(f"trainingInput.{task}Type/{task}Config are set but {task}Count is 0: "
                        f"no {POOL_ROLES[index]} runs")
    return count


def _custom_pool(training_input: Mapping[str, Any], task: str, index: int,
                 errors: list[str], warnings: list[str]) -> dict[str, Any]:
    """The Vertex AI pool of one scaleTier CUSTOM task (`{}` when it has none or a problem,
    which `errors` then names)."""
    count = _replicas(training_input, task, index, errors, warnings)
    if not count:
        return {}
    machine = training_input.get(f"{task}Type")
    config = training_input.get(f"{task}Config") or {}
    if not isinstance(config, Mapping):
        errors.append(f"trainingInput.{task}Config is {short(config)}; expected a mapping")
        return {}
    accelerator = config.get("acceleratorConfig")
    legacy = cat.LEGACY_MACHINES.get(machine) if isinstance(machine, str) else None
    if legacy is not None:
        if accelerator:
            errors.append(f"trainingInput.{task}Config.acceleratorConfig is set, but "
                          f"{task}Type {machine} is a legacy type that carries its own GPUs "
                          f"({_legacy_gpus(legacy)}); use a Compute Engine machine type with "
                          "acceleratorConfig, or the legacy type alone")
            return {}
        return _legacy_pool(legacy, count)
    pool: dict[str, Any] = {"machine_spec": {"machine_type": machine}, "replica_count": count}
    if not accelerator:
        return pool
    if not isinstance(accelerator, Mapping):
        errors.append(f"trainingInput.{task}Config.acceleratorConfig is {short(accelerator)}; "
                      "expected a mapping with count and type")
        return {}
    gpu = _gpu_type(accelerator.get("type"))
    gpus = as_int(accelerator.get("count"))
    if not gpu or gpus in (None, 0):
        errors.append(f"trainingInput.{task}Config.acceleratorConfig needs both count and "
                      f"type (got count {short(accelerator.get('count'))}, type "
                      f"{short(accelerator.get('type'))})")
        return {}
    pool["machine_spec"].update(accelerator_type=gpu, accelerator_count=gpus)
    return pool


def _legacy_gpus(legacy: cat.LegacyMachine) -> str:
    return f"{legacy.gpu[1]} x {legacy.gpu[0]}" if legacy.gpu else "no GPU"


def _legacy_pool(legacy: cat.LegacyMachine, count: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"machine_type": legacy.equivalent}
    if legacy.gpu:
        spec.update(accelerator_type=legacy.gpu[0], accelerator_count=legacy.gpu[1])
    return {"machine_spec": spec, "replica_count": count}


def from_ai_platform_config(training_input: Any) -> list[dict[str, Any]]:
    """Converts an AI Platform Training config to Vertex AI worker pool specs.

    Legacy machine types become their Compute Engine equivalents with the GPUs they
    carry; master -> pool 0, workers -> pool 1, parameter servers -> pool 2, evaluators
    -> pool 3 (an unused pool between used ones stays `{}`).

    Args:
        training_input: The parsed config.yaml, with or without its `trainingInput` key.

    Returns:
        Worker pool specs for `validate_worker_pool_specs` and the CustomJob API.

    Raises:
        GpuConfigError: The config cannot be converted (every problem listed).
    """
    conversion = convert_ai_platform_config(training_input)
    if conversion.errors:
        raise GpuConfigError(conversion.errors, "cannot convert the AI Platform config")
    return conversion.specs


def validate_ai_platform_config(training_input: Any, region: str | None = None
                                ) -> ValidationResult:
    """Converts and validates an AI Platform config in one step (messages name its fields)."""
    conversion = convert_ai_platform_config(training_input)
    if conversion.errors:
        return ValidationResult(False, conversion.errors, conversion.warnings, conversion.specs)
    result = validate_worker_pool_specs(conversion.specs, region, labels=conversion.labels)
    result = dataclasses.replace(result, warnings=conversion.warnings + result.warnings)
    from components.gpu.legacy_gpus import refusal

    refused = refusal(_inner(training_input), region, convert_ai_platform_config)
    if not refused:
        return result
    # The legacy types imply the GPUs: say so, with what to paste, rather than refuse a GPU
    # type the user never wrote.
    others = [e for e in result.errors if " cannot run the trainer image" not in e]
    return dataclasses.replace(result, ok=False, errors=refused + others)


def _inner(training_input: Any) -> Mapping[str, Any]:
    """The `trainingInput` mapping of a parsed config.yaml, with or without that key."""
    if isinstance(training_input, Mapping) and "trainingInput" in training_input:
        training_input = training_input["trainingInput"]
    return training_input if isinstance(training_input, Mapping) else {}
