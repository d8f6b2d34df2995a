"""Each Vertex AI run as a Vertex AI Experiments run, so that runs line up over time: the
export stage creates it (parameters: model, data, plan, cluster; metrics: the accuracy,
the champion's, the gate's decision and its paired test; the per-epoch curves as time
series when `vertex.tensorboard` is set) and associates the pipeline run with it; the
run's end (the exit handler) adds the cost and sets its final state, and creates it
when the run failed before its export.

Through Google's own client (`aiplatform.ExperimentRun`); parameters and metrics are
strings or numbers (`ExperimentRun.log_params`/`log_metrics` refuse anything else).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from trainer.common.cloud_calls import remote_call

if TYPE_CHECKING:
    from components.export.gate import Decision
    from components.vertex_options import VertexOptions

#: What a run's context ID may hold: the experiment's name, `-`, the run's name, within
#: `aiplatform.metadata.constants._EXPERIMENT_RUN_MAX_LENGTH` (128 less the 7 of the
#: TensorBoard run artifact's `-tb-run` suffix).
RUN_ID_LENGTH = 121

#: The run's final states, as Vertex AI Experiments names them (`Execution.State`).
FINAL_STATES = {"SUCCEEDED": "COMPLETE", "FAILED": "FAILED", "CANCELLED": "CANCELLED"}


def experiment_name(vertex: VertexOptions) -> str:
    """`vertex.experiment`, else the model's display name in the characters an experiment
    name takes (lowercase letters, digits, hyphens)."""
    if vertex.experiment:
        return vertex.experiment
    name = re.sub(r"[^a-z0-9-]+", "-", vertex.model_display_name.lower()).strip("-")
    return name[:63].rstrip("-") or "gpu-pipeline"


def run_name(job_name: str, experiment: str) -> str:
    """The run's name in the experiment: the pipeline job's ID, its start cut off when the
    two would be too long together (its end, the time it was made, is what differs)."""
    name = re.sub(r"[^a-z0-9-]+", "-", job_name.rsplit("/", 1)[-1].lower()).strip("-")
    room = RUN_ID_LENGTH - len(experiment) - 1
    return name[-room:].lstrip("-") or "run"


def params(record: Mapping[str, Any]) -> dict[str, str | int | float]:
    """The run's parameters from its lineage record: model and options, data, plan and
    cluster."""
    training, dataset = record.get("training", {}), record.get("dataset", {})
    cluster = record.get("cluster", {})
    plan = cluster.get("training_plan") or {}
    pools = [p for p in cluster.get("worker_pool_specs") or [] if p]
    found: dict[str, Any] = {
        "model": training.get("model"), "epochs": training.get("epochs"),
        "batch_size": training.get("batch_size"), "learning_rate": training.get("learning_rate"),
        "data_source": dataset.get("source"),
        "data_fingerprint": dataset.get("source_fingerprint"),
        "data_examples": dataset.get("examples"),
        "data_image_size": (dataset.get("image_size") or [None])[0]
        if isinstance(dataset.get("image_size"), list) else dataset.get("image_size"),
        "strategy": cluster.get("strategy"), "all_reduce": plan.get("all_reduce"),
        "mixed_precision": plan.get("mixed_precision"),
        "xla": None if not plan else ("on" if plan.get("xla") else "off"),
        "machines": sum(int(p.get("replica_count", 0) or 0) for p in pools) or None,
        "machine_type": (pools[0].get("machine_spec") or {}).get("machine_type") if pools
        else None,
        "accelerator": plan.get("accelerator"),
        "trainer_image": record.get("trainer_image"),
    }
    return {k: v for k, v in found.items() if isinstance(v, (str, int, float))
            and not isinstance(v, bool)}


def metrics(challenger: Mapping[str, Any], decision: Decision) -> dict[str, str | int | float]:
    """The run's metrics: its model's, the champion's compared one, and the gate's
    decision with its paired test's figures."""
    found: dict[str, Any] = {k: v for k, v in challenger.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if decision.champion is not None:
        found[f"champion_{decision.metric}"] = decision.champion
    found["decision"] = ("promoted" if decision.default else
                         "registered" if decision.register else "not registered")
    # Every run's count of champions kept, whatever it registered (`kept_streak`).
    kept = decision.champion_kept or {}
    found.update(champion_kept_runs=int(kept.get("runs") or 0),
                 champion_kept_since=str(kept.get("since") or ""),
                 decided_at=round(time.time(), 3))
    if decision.paired:
        found.update({"gate_p_value": decision.paired["p_value"],
                      "gate_challenger_only": decision.paired["challenger_only"],
                      "gate_champion_only": decision.paired["champion_only"]})
    return found


def series(history: Iterable[Mapping[str, Any]]) -> list[tuple[int, dict[str, float]]]:
    """The per-epoch curves (the training report's `history`) as (step, values)."""
    return [(int(epoch.get("epoch", step)) + 1,
             {k: float(v) for k, v in epoch.items()
              if k != "epoch" and isinstance(v, (int, float))})
            for step, epoch in enumerate(history)]


def _experiment(vertex: VertexOptions, project: str) -> Any:
    from google.cloud import aiplatform

    # The project given, never looked up: in a Vertex AI container the environment names
    # it by number, which aiplatform would turn into an ID through Resource Manager.
    aiplatform.init(project=project, location=vertex.region)
    return aiplatform.Experiment.get_or_create(experiment_name(vertex), project=project,
                                               location=vertex.region)


def _associate(run: Any, pipeline_job: str, project: str, region: str) -> None:
    """Makes the pipeline run a child of the Experiments run (the console links them)."""
    from google.cloud import aiplatform

    run.log(pipeline_job=aiplatform.PipelineJob.get(pipeline_job, project=project,
                                                    location=region))


def record_run(project: str, vertex: VertexOptions, job_name: str, pipeline_job: str, *,
               values: Mapping[str, Any], results: Mapping[str, Any],
               history: Iterable[Mapping[str, Any]] = (),
               log: Callable[[str], None] = print) -> str:
    """Creates the run's Experiments run with its parameters (`values`), metrics
    (`results`) and, with `vertex.tensorboard`, its curves; associates the pipeline run.

    Returns:
        The run's context resource name.
    """
    from google.cloud import aiplatform

    with remote_call("recording the run in Vertex AI Experiments"):
        experiment = _experiment(vertex, project)
        run = aiplatform.ExperimentRun.create(
            run_name(job_name, experiment.name), experiment=experiment,
            tensorboard=vertex.tensorboard or None, project=project, location=vertex.region)
        run.log_params(dict(values))
        run.log_metrics(dict(results))
        if vertex.tensorboard:
            for step, point in series(history):
                run.log_time_series_metrics(point, step=step)
        if pipeline_job:
            _associate(run, pipeline_job, project, vertex.region)
    log(f"experiments: run {run.name} of experiment {experiment.name} (Vertex AI "
        "Experiments), with its parameters, metrics"
        + (" and per-epoch time series" if vertex.tensorboard else ""))
    return run.resource_name


def record_export(vertex: VertexOptions, job_name: str, pipeline_job: str,
                  outcome: Mapping[str, Any], training_job_dir: str = "",
                  log: Callable[[str], None] = print) -> str:
    """`record_run` for the export stage on Vertex AI (`outcome`: `export_and_gate`'s),
    the curves read from the training report in `training_job_dir`. A run that cannot be
    recorded is said, not failed: the model and its decision stand without it.

    Returns:
        The run's context resource name, or "" when it was not recorded.
    """
    from trainer.common import files
    from trainer.common.errors import ProjectError

    project = pipeline_job.split("/")[1] if pipeline_job.startswith("projects/") else ""
    if not project:
        return ""
    report = files.read_json(f"{training_job_dir}/training_report.json", missing=None) \
        if training_job_dir else None
    try:
        return record_run(project, vertex, job_name, pipeline_job,
                          values=params(outcome["lineage"]),
                          results=metrics(outcome["metrics"], outcome["decision"]),
                          history=(report or {}).get("history") or (), log=log)
    except ProjectError as exc:
        log(f"experiments: warning: the run is not recorded in Vertex AI Experiments ({exc})")
        return ""


def end_run(project: str, vertex: VertexOptions, job_name: str, state: str, *,
            cost_usd: float | None, error: str = "", pipeline_job: str = "") -> str:
    """Sets the run's final state and cost; creates the run first when the pipeline ended
    before its export (a failed run is lined up too). Returns what was done, in words; a
    run that cannot be ended is said, not raised (the run's end must not fail on it)."""
    from trainer.common.errors import ProjectError

    try:
        return _end_run(project, vertex, job_name, state, cost_usd=cost_usd, error=error,
                        pipeline_job=pipeline_job)
    except ProjectError as exc:
        return f"not recorded ({exc})"


def _end_run(project: str, vertex: VertexOptions, job_name: str, state: str, *,
             cost_usd: float | None, error: str, pipeline_job: str) -> str:
    import datetime

    from google.cloud import aiplatform
    from google.cloud.aiplatform.compat.types import execution as gca_execution

    final = getattr(gca_execution.Execution.State, FINAL_STATES.get(state, "FAILED"))
    now = datetime.datetime.now(datetime.timezone.utc)
    with remote_call("ending the run in Vertex AI Experiments"):
        experiment = _experiment(vertex, project)
        name = run_name(job_name, experiment.name)
        run = aiplatform.ExperimentRun.get(name, experiment=experiment, project=project,
                                           location=vertex.region)
        if run is None:
            run = aiplatform.ExperimentRun.create(name, experiment=experiment, project=project,
                                                  location=vertex.region)
            if error:
                run.log_params({"error": error[:500]})
            if pipeline_job:
                _associate(run, pipeline_job, project, vertex.region)
        job = aiplatform.PipelineJob.get(pipeline_job, project=project,
                                         location=vertex.region) if pipeline_job else None
        ended: dict[str, Any] = {"ended": now.isoformat(timespec="seconds")}
        if job is not None and job.create_time:
            ended["duration_s"] = round((now - job.create_time).total_seconds(), 1)
        if cost_usd is not None:
            ended["cost_usd"] = round(cost_usd, 4)
        run.log_metrics(ended)
        run.end_run(state=final)
    return (f"run {name} of experiment {experiment.name} ended {final.name}"
            + (f", cost {cost_usd:.2f} USD" if cost_usd is not None else ""))


def list_runs(project: str, vertex: VertexOptions) -> list[dict[str, Any]]:
    """The experiment's runs, read back from Vertex AI Experiments: each one's `name`,
    `state` (COMPLETE, FAILED, CANCELLED, RUNNING), `params` and `metrics`; none when the
    experiment does not exist yet."""
    from google.api_core import exceptions
    from google.cloud import aiplatform

    with remote_call("reading Vertex AI Experiments"):
        aiplatform.init(project=project, location=vertex.region)
        try:
            experiment = aiplatform.Experiment(experiment_name(vertex), project=project,
                                               location=vertex.region)
        except exceptions.NotFound:
            return []
        runs = aiplatform.ExperimentRun.list(experiment=experiment, project=project,
                                             location=vertex.region)
    return [{"name": run.name, "state": str(run.get_state()), "params": run.get_params(),
             "metrics": run.get_metrics()} for run in runs]


def kept_streak(runs: Iterable[Mapping[str, Any]]) -> Any:
    """The champion-kept streak after the newest run that made a decision (`list_runs`'s
    runs: every run's count is in its metrics, registered or not), None when it promoted,
    had no champion, or no run decided yet."""
    from components.export.champion_streak import Streak

    decided = [r for r in runs if "decided_at" in (r.get("metrics") or {})]
    if not decided:
        return None
    newest = max(decided, key=lambda r: float(r["metrics"]["decided_at"]))["metrics"]
    count = int(float(newest.get("champion_kept_runs") or 0))
    return Streak(count, str(newest.get("champion_kept_since") or "")) if count else None
