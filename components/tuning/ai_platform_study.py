"""AI Platform Training's `trainingInput.hyperparameters` as the `tuning` section.

The fields of AI Platform's `HyperparameterSpec` (REST reference, "projects.jobs":
goal, hyperparameterMetricTag, maxTrials, maxParallelTrials, maxFailedTrials,
enableTrialEarlyStopping, algorithm, params with parameterName, type, minValue,
maxValue, scaleType, discreteValues, categoricalValues) map one to one onto
`components.tuning.tuning_options`, whose checks then apply; a field with no counterpart is
refused by name, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.common.schema import short

#: AI Platform field -> `tuning` field.
STUDY_FIELDS = {"goal": "goal", "hyperparameterMetricTag": "metric", "maxTrials": "max_trials",
                "maxParallelTrials": "parallel_trials", "maxFailedTrials": "max_failed_trials",
                "algorithm": "algorithm", "enableTrialEarlyStopping": "early_stopping"}
PARAMETER_FIELDS = {"parameterName": "name", "type": "type", "minValue": "min_value",
                    "maxValue": "max_value", "scaleType": "scale"}
#: Where AI Platform's defaults differ from Vertex AI's names.
SCALE_NAMES = {"NONE": "UNIT_LINEAR_SCALE"}
#: AI Platform fields with no counterpart here, and why.
UNSUPPORTED = {
    "resumePreviousJobId": "resuming an earlier study is not supported; start a new one",
}


def convert_hyperparameters(spec: Any) -> tuple[dict[str, Any], list[str]]:
    """(the `tuning` section, problems) of an AI Platform `hyperparameters` block."""
    where = "trainingInput.hyperparameters"
    if not isinstance(spec, Mapping):
        return {}, [f"{where} is {short(spec)}; expected a mapping (AI Platform's "
                    "HyperparameterSpec)"]
    tuning: dict[str, Any] = {}
    problems = []
    for key, value in spec.items():
        if key in STUDY_FIELDS:
            tuning[STUDY_FIELDS[key]] = value
        elif key == "params":
            tuning["parameters"], found = _parameters(value, f"{where}.params")
            problems += found
        else:
            valid = ", ".join(sorted([*STUDY_FIELDS, "params"]))
            reason = UNSUPPORTED.get(key) or f"valid fields are {valid}"
            problems.append(f"{where}.{key} is not converted: {reason}")
    if "params" not in spec:
        problems.append(f"{where} has no params; list the training options to search")
    return tuning, problems


def _parameters(params: Any, where: str) -> tuple[list[Any], list[str]]:
    if not isinstance(params, list):
        return [], [f"{where} is {short(params)}; expected a list of ParameterSpecs"]
    converted, problems = [], []
    for index, param in enumerate(params):
        if not isinstance(param, Mapping):
            problems.append(f"{where}[{index}] is {short(param)}; expected a mapping")
            continue
        out: dict[str, Any] = {}
        for key, value in param.items():
            if key in PARAMETER_FIELDS:
                out[PARAMETER_FIELDS[key]] = value
            elif key in ("discreteValues", "categoricalValues"):
                out["values"] = value
            else:
                valid = ", ".join([*PARAMETER_FIELDS, "discreteValues", "categoricalValues"])
                problems.append(f"{where}[{index}].{key} is not a ParameterSpec field; valid "
                                f"fields are {valid}")
        # AI Platform passes `--<parameterName>=<value>`; the trainer's options use `_`.
        if isinstance(out.get("name"), str):
            out["name"] = out["name"].lstrip("-").replace("-", "_")
        if isinstance(out.get("scale"), str):
            out["scale"] = SCALE_NAMES.get(out["scale"], out["scale"])
        for bound in ("min_value", "max_value"):
            if isinstance(out.get(bound), int) and not isinstance(out[bound], bool):
                out[bound] = float(out[bound])
        converted.append(out)
    return converted, problems
