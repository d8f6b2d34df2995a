"""The job fields of an AI Platform Training `trainingInput` (all but its cluster, which
`ai_platform_pools` converts): each carried into the configuration's option that does the
same, or named in a warning that says what to do instead. Nothing is dropped unsaid.

Field names are AI Platform Training's `TrainingInput` REST reference
(https://cloud.google.com/ai-platform/training/docs/reference/rest/v1/projects.jobs#TrainingInput).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.cluster.roles import POOLS
from trainer.common.schema import short

#: `trainingInput` field (a dotted path into it) -> the option that does the same.
CARRIED = {
    "region": "vertex.region",
    "serviceAccount": "vertex.training_service_account",
    "network": "vertex.network",
    "encryptionConfig.kmsKeyName": "vertex.encryption_key",
    "scheduling.maxRunningTime": "vertex.timeout",
    "scheduling.maxWaitTime": "vertex.max_wait_duration",
}

_OWN_TRAINER = ("the pipeline trains with its own trainer, in its own image (built by "
                "`submit`, named by digest); bring your model as training.user_code "
                "(docs/models.md)")
#: `trainingInput` field -> why the pipeline takes no such field, and what to do instead.
NOT_USED = {
    "runtimeVersion": "the trainer image pins its own TensorFlow (requirements/gpu.lock): "
                      "leave it out",
    "pythonVersion": "the trainer image pins its own Python: leave it out",
    "args": "the trainer takes its options from the configuration's training section "
            "(training.epochs, training.batch_size, ...): write them there",
    "packageUris": _OWN_TRAINER,
    "pythonModule": _OWN_TRAINER,
    "jobDir": "each run's job directory is under vertex.pipeline_root",
    "useChiefInTfConfig": "Vertex AI names pool 0 `chief` in TF_CONFIG always: nothing to set",
    "enableWebAccess": "the pipeline's training jobs offer no interactive shell: leave it out",
    "scheduling.priority": "Vertex AI CustomJobs take no priority: leave it out",
}
#: Fields of a task's config (`masterConfig`, `workerConfig`, ...) besides its GPUs.
TASK_NOT_USED = {
    "imageUri": _OWN_TRAINER,
    "containerCommand": _OWN_TRAINER,
    "containerArgs": "the trainer takes its options from the configuration's training section",
    "tpuTfVersion": "the pipeline trains on GPUs: leave it out",
}
#: AI Platform's tasks, in Vertex AI's order of worker pools.
TASKS = tuple(pool.ai_platform for pool in POOLS)


def _at(data: Mapping[str, Any], path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return None
        data = data[part]
    return data


def carried(training_input: Mapping[str, Any]) -> dict[str, Any]:
    """The `vertex` options the job fields set (`CARRIED`), as given (the options'
    validation says when one is not what Vertex AI takes)."""
    found = {}
    for path, option in CARRIED.items():
        value = _at(training_input, path)
        if value is not None:
            found[option.removeprefix("vertex.")] = value
    return found


def not_used(training_input: Mapping[str, Any]) -> list[str]:
    """A warning per field set that the pipeline does not take, with what to do instead."""
    warnings = [f"trainingInput.{path} ({short(value)}) is not used: {why}"
                for path, why in NOT_USED.items()
                if (value := _at(training_input, path)) is not None]
    for task in TASKS:
        config = training_input.get(f"{task}Config")
        if not isinstance(config, Mapping):
            continue
        warnings += [f"trainingInput.{task}Config.{field} ({short(config[field])}) is not "
                     f"used: {why}" for field, why in TASK_NOT_USED.items() if field in config]
    return warnings
