"""The study on Vertex AI: a HyperparameterTuningJob (gcpc's `HyperparameterTuningJobRunOp`)
whose trials run the trainer on the training run's own worker pools, then the best trial,
read back with the aiplatform client (gcpc's `GetBestTrialOp` went away with its
`experimental` module).

Each trial is a CustomJob of the trial job spec with the trial's parameters appended as
`--<parameter_id> <value>`; its base output directory is `<job's>/<trial id>/` (gcpc's
`base_output_directory` docs), where the trainer keeps its reports (`trainer.run.history`). The
trainer reports the study's metric with cloudml-hypertune from the chief.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from components.cloud_names import vertex_endpoint
from components.gpu.worker_pool import WorkerPool, parse_pools
from components.training.vertex_job import custom_job_spec
from components.tuning.local_study import Trial, typed
from components.tuning.tuning_options import (
    MEASUREMENT_SELECTION,
    TuningOptions,
    vertex_problems,
)
from trainer.common.cloud_calls import remote_call
from trainer.common.errors import InputError, StageError

_SCALES = {"UNIT_LINEAR_SCALE": "linear", "UNIT_LOG_SCALE": "log",
           "UNIT_REVERSE_LOG_SCALE": "reverse_log"}
#: Trial states of the v1 API, as the trials table says them.
_STATES = {"SUCCEEDED": "SUCCEEDED", "INFEASIBLE": "FAILED"}


class TuningJobError(StageError):
    """The tuning job cannot be read, or no trial succeeded."""


def study_spec(tuning: TuningOptions) -> tuple[list[dict], list[dict]]:
    """(metrics, parameters) of the StudySpec as gcpc's `serialize_metrics` and
    `serialize_parameters` make them (aiplatform's parameter specs, `to_dict` of the v1
    types). Their module is not imported here: it imports gcpc's component definitions,
    which need the KFP SDK's compile-time DSL that a component's runtime lacks."""
    from google.cloud.aiplatform import hyperparameter_tuning as hpt
    from google.cloud.aiplatform_v1.types import study

    def serialize_metrics(goals: dict[str, str]) -> list[dict]:
        return [study.StudySpec.MetricSpec.to_dict(study.StudySpec.MetricSpec(
            {"metric_id": metric, "goal": goal.upper()})) for metric, goal in goals.items()]

    def serialize_parameters(specs: dict[str, Any]) -> list[dict]:
        return [study.StudySpec.ParameterSpec.to_dict(
            spec._to_parameter_spec(parameter_id=name)) for name, spec in specs.items()]

    specs: dict[str, Any] = {}
    for p in tuning.parameters:
        scale = _SCALES[p.scale]
        if p.type == "DOUBLE":
            specs[p.name] = hpt.DoubleParameterSpec(min=p.min_value, max=p.max_value,
                                                    scale=scale)
        elif p.type == "INTEGER":
            specs[p.name] = hpt.IntegerParameterSpec(min=int(p.min_value),
                                                     max=int(p.max_value), scale=scale)
        elif p.type == "DISCRETE":
            specs[p.name] = hpt.DiscreteParameterSpec(values=[float(v) for v in p.values],
                                                      scale=scale)
        else:
            specs[p.name] = hpt.CategoricalParameterSpec(values=[str(v) for v in p.values])
    return (serialize_metrics({tuning.metric: tuning.goal.lower()}),
            serialize_parameters(specs))


def tuning_job_spec(pools: Sequence[WorkerPool | None], images: Mapping[str, Any],
                    *, dataset_path: str, output_uri: str, output_path: str,
                    trainer_args: Sequence[str], tuning: TuningOptions,
                    job_name: str) -> dict[str, Any]:
    """The HyperparameterTuningJob's settings: the training run's pools (`custom_job_spec`)
    with the trainer told to report the study's metric, and the study.

    Raises:
        InputError: The study has no parameters, or asks what Vertex AI's studies lack.
    """
    if not tuning.enabled:
        raise InputError("tuning has no parameters, but this pipeline was compiled with a "
                         "study: give tuning.parameters, or compile without tuning")
    problems = vertex_problems(tuning)
    if problems:
        raise InputError("; ".join(problems))
    job = custom_job_spec(pools, images, dataset_path=dataset_path,
                          output_uri=output_uri, output_path=output_path,
                          trainer_args=[*trainer_args, "--hypertune-metric", tuning.metric],
                          job_name=f"{job_name}_tuning")
    metrics, parameters = study_spec(tuning)
    return {"worker_pool_specs": job["worker_pool_specs"],
            "base_output_directory": job["base_output_directory"],
            "display_name": job["display_name"], "study_spec_metrics": metrics,
            "study_spec_parameters": parameters, "max_trial_count": tuning.max_trials,
            "parallel_trial_count": tuning.parallel_trials,
            "max_failed_trial_count": tuning.max_failed_trials,
            "study_spec_algorithm": tuning.algorithm,
            # gcpc 2.22's op defaults to BEST_MEASUREMENT; the study's own choice is sent.
            "study_spec_measurement_selection_type": MEASUREMENT_SELECTION[tuning.measurement]}


def job_name_of(gcp_resources: str) -> str:
    """The job's resource name in gcpc's `gcp_resources` output."""
    try:
        uri = json.loads(gcp_resources)["resources"][0]["resourceUri"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise TuningJobError(f"gcp_resources names no job: {gcp_resources[:200]!r}") from None
    return uri.split("/v1/", 1)[-1]


def read_tuning_job(name: str) -> Any:
    """The HyperparameterTuningJob (aiplatform_v1), from its region's endpoint."""
    from google.cloud import aiplatform_v1

    region = name.split("/locations/", 1)[1].split("/", 1)[0]
    with remote_call(f"reading the tuning job {name}"):
        client = aiplatform_v1.JobServiceClient(
            client_options={"api_endpoint": vertex_endpoint(region)})
        return client.get_hyperparameter_tuning_job(name=name)


def trials_of(job: Any, tuning: TuningOptions) -> list[Trial]:
    """The job's trials as the study's records (parameters typed as the options)."""
    trials = []
    for t in job.trials:
        values = {p.parameter_id: p.value for p in t.parameters}
        measured = {m.metric_id: m.value for m in t.final_measurement.metrics}
        state = _STATES.get(t.state.name, t.state.name)
        metric = measured.get(tuning.metric) if state == "SUCCEEDED" else None
        seconds = (t.end_time - t.start_time).total_seconds() \
            if t.end_time and t.start_time else 0.0
        trials.append(Trial(str(t.id), typed(tuning, values), state if metric is not None
                            or state != "SUCCEEDED" else "FAILED", metric, round(seconds, 1),
                            job_dir=t.custom_job, error=t.infeasible_reason))
    if not any(t.state == "SUCCEEDED" for t in trials):
        raise TuningJobError(f"no trial of {job.name} succeeded ({len(trials)} trial(s), "
                             f"job state {job.state.name})")
    return trials


def finished_study(job: Any, tuning: TuningOptions, prices: Mapping[str, float]
                   ) -> dict[str, Any]:
    """The finished HyperparameterTuningJob (`read_tuning_job`) as the study's record
    (`components.tuning.trials.study_record`), with what its trials cost on the trials'
    pools (`components.capacity.cost.tuning_cost`, `prices` per hour)."""
    from google.protobuf import json_format

    from components.capacity.cost import tuning_cost
    from components.tuning.trials import study_record

    record = study_record(tuning, trials_of(job, tuning))
    pools = parse_pools(json_format.MessageToDict(type(p).pb(p))
                        for p in job.trial_job_spec.worker_pool_specs)
    # The trials' scheduling strategy (STANDARD, SPOT, FLEX_START): Spot trials at Spot
    # prices.
    strategy = job.trial_job_spec.scheduling.strategy.name
    record["cost"] = tuning_cost(record["trials"], pools, prices, strategy)
    return record
