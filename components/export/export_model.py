"""Stage 5: evaluate the new model and the champion, decide, export, and (locally) register.

Vertex AI registers through the pipeline's model upload (driven by the decision); a local
run registers into its local registry here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from components.cloud_names import vertex_endpoint
from components.dataset.data_statistics import data_summary
from components.export import local_registry as local
from components.export.gate import Decision, decide, other_questions
from components.export.lineage import lineage
from components.export.model_files import DATA_STATISTICS
from components.export.model_files import LINEAGE as LINEAGE_FILE
from components.export.paired_test import pair
from components.export.saved_models import (
    model_classes,
    model_evaluation,
    publish_model,
    saved_model_dir,
)
from components.training.efficiency import FILE as EFFICIENCY_FILE
from components.training.efficiency import load as load_efficiency
from components.training.efficiency import summary
from trainer.common.cloud_calls import remote_call
from trainer.common.contract import load_manifest
from trainer.common.gcs import to_mount_path

if TYPE_CHECKING:
    from concurrent.futures import Future

    from components.vertex_options import VertexOptions


def vertex_champion(parent_model: str, region: str) -> str:
    """The SavedModel directory (on the /gcs/ mount) of `parent_model`'s default version."""
    from google.cloud import aiplatform_v1

    with remote_call(f"reading the champion {parent_model}"):
        client = aiplatform_v1.ModelServiceClient(client_options={
            "api_endpoint": vertex_endpoint(region)})
        model = client.get_model(name=parent_model)  # no @version: the default version
    return saved_model_dir(to_mount_path(model.artifact_uri))


def champion_location(vertex: VertexOptions, registry_root: str | os.PathLike | None
                      ) -> str | None:
    """The champion's SavedModel directory, or None without one: the default version in
    the local registry under `registry_root` (a local run), else `vertex.parent_model`'s
    default version."""
    if registry_root:
        found = local.champion(Path(registry_root) / vertex.model_display_name)
        return found[1] if found else None
    return vertex_champion(vertex.parent_model, vertex.region) if vertex.parent_model else None


def comparison_markdown(decision: Decision, challenger: Mapping[str, Any],
                        champion: Mapping[str, Any] | None) -> str:
    """The report's comparison table and the decision."""
    keys = [k for k in ("test_accuracy", "accuracy", "test_examples", "examples")
            if k in challenger]
    rows = [f"| {k} | {challenger[k]:.4f} | "
            + (f"{champion[k]:.4f}" if champion and k in champion else "-") + " |" for k in keys]
    test = decision.paired
    paired = [] if not test else [
        "", "| held-out images | count |", "| --- | ---: |",
        f"| both right | {test['both_right']} |",
        f"| the challenger alone right | {test['challenger_only']} |",
        f"| the champion alone right | {test['champion_only']} |",
        f"| both wrong | {test['both_wrong']} |", "",
        f"**Paired test**: {test['rule']}."]
    kept = decision.champion_kept
    streak = [] if not kept else [
        "", f"**Champion kept**: {kept['runs']} run(s) in a row, since {kept['since']}."
        + (f" {decision.warning.removeprefix('warning: ')}." if decision.warning else "")]
    return "\n".join(["# Champion / challenger", "",
                      "| metric | challenger (this run) | champion |", "| --- | ---: | ---: |",
                      *rows, *paired, "", f"**Decision**: {decision.reason}.", *streak, ""])


def export_and_gate(trained_model: str | os.PathLike, dataset_dir: str | os.PathLike,
                    destination: str | os.PathLike, *, vertex: VertexOptions,
                    training: Mapping[str, Any], cluster: Mapping[str, Any],
                    images: Mapping[str, Any], version: str,
                    registry_root: str = "",
                    tuning: Mapping[str, Any] | None = None,
                    efficiency: Mapping[str, Any] | None = None,
                    project: str = "",
                    log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Both models' metrics on the same splits, the decision, and the new model exported.

    Args:
        trained_model: Where the trainer committed the model.
        dataset_dir: The prepared dataset.
        destination: The exported model location.
        vertex: The run's `VertexOptions` (threshold, promotion and its test, parent model).
        training: The training options (for the lineage).
        cluster: The cluster's strategy and pools (for the lineage).
        images: The build stage's images (references by digest and tags; empty locally).
        version: The project's version.
        registry_root: The local registry (`run --local`); "" on Vertex AI, where the
            champion is `vertex.parent_model`'s default version.
        project: The run's project on Vertex AI (where its Experiments runs are).
        tuning: The study that chose the training options, if any (for the lineage).
        efficiency: The training report's efficiency figures, if any (`efficiency.json`
            beside the model, their summary in the lineage).
        log: Where the serving check's progress goes.

    Returns:
        `metrics`, `champion` (metrics or None), `decision`, `lineage`, `saved` (the
        committed SavedModel), `registered` (the local version, or None), `measured_here`
        (the models this stage had to evaluate: their metrics on this dataset were not
        beside them).
    """
    challenger, challenger_correct, measured_by_trainer = model_evaluation(trained_model,
                                                                           dataset_dir)
    model_dir = Path(registry_root) / vertex.model_display_name if registry_root else None
    champion_dir = champion_location(vertex, registry_root)
    # A champion that answers other questions (other class names) is not evaluated on
    # this data, nor compared: its accuracy here would mean nothing.
    classes = (model_classes(trained_model), model_classes(champion_dir)) if champion_dir \
        else (None, None)
    refused = other_questions(*classes, on_vertex=model_dir is None) \
        if None not in classes else ""
    champion, champion_correct, champion_known = model_evaluation(champion_dir, dataset_dir) \
        if champion_dir and not refused else (None, "", False)
    decision = decide(challenger, champion, threshold=vertex.accuracy_threshold,
                      promotion=vertex.promotion, level=vertex.promotion_level,
                      margin=vertex.non_inferiority_margin,
                      paired=pair(challenger_correct, champion_correct) if champion else None,
                      refused=refused)
    if decision.default and vertex.serving_check_images:  # it would serve: run it first
        from components.serving.serving_check import check_in_server

        decision = decision.after_serving_check(check_in_server(
            saved_model_dir(trained_model), dataset_dir,
            images=vertex.serving_check_images, p95_seconds=vertex.serving_p95_seconds,
            log=log))
    decision = kept_count(decision, vertex, model_dir, log, project)
    manifest = load_manifest(dataset_dir)
    record = lineage(manifest=manifest, training=training, cluster=cluster,
                     images=images, version=version, metrics=challenger, tuning=tuning,
                     efficiency=summary(efficiency) if efficiency else None)
    saved = publish_model(trained_model, destination, challenger, dataset_dir, extra={
        LINEAGE_FILE: record, "decision.json": decision.to_dict(),
        DATA_STATISTICS: data_summary(manifest),
        "champion_evaluation.json": champion,
        **({EFFICIENCY_FILE: dict(efficiency)} if efficiency else {})},
        correct=challenger_correct)
    measured_here = ([] if measured_by_trainer else ["challenger"]) + (
        ["champion"] if champion is not None and not champion_known else [])
    registered = None
    if model_dir is not None and decision.register:
        # With an endpoint, the deploy stage makes it the default once it is promoted.
        registered = local.register(model_dir, saved, challenger, record, decision.to_dict(),
                                    default=decision.default and not vertex.deploy.endpoint
                                    )["version"]
    if model_dir is not None and decision.champion is not None:
        local.keep_streak(model_dir, decision.champion_kept)
    return {"metrics": challenger, "champion": champion, "decision": decision,
            "lineage": record, "saved": saved, "registered": registered,
            "measured_here": measured_here}


def kept_count(decision: Decision, vertex: VertexOptions, model_dir: Path | None,
               log: Callable[[str], None], project: str = "") -> Decision:
    """The decision with the runs in a row that kept the champion (`champion_streak`), read
    from the local registry, or on Vertex AI from where every run's decision is recorded,
    its Vertex AI Experiments runs (`experiments.kept_streak`: runs that registered
    nothing count too); a reading that fails is said, and the count starts again."""
    from components.export import champion_streak as streaks
    from trainer.common.errors import ProjectError

    if decision.champion is None:
        return decision
    if model_dir is not None:
        previous = streaks.read(local.load(model_dir).get(streaks.KEY))
    else:
        from components.export.experiments import kept_streak, list_runs

        try:
            previous = kept_streak(list_runs(project, vertex)) if project else None
        except ProjectError as exc:
            log(f"champion/challenger: the runs that kept the champion before are not "
                f"counted ({exc})")
            previous = None
    streak = streaks.following(previous, decision)
    return dataclasses.replace(
        decision, champion_kept=streak.to_dict() if streak else None,
        warning=streaks.warning(streak, decision, vertex.promotion,
                                vertex.champion_kept_warning))


@dataclasses.dataclass(frozen=True)
class ExportStage:
    """What stage 5 hands to KFP.

    Attributes:
        metrics: The new model's metrics and the champion's (as `champion_*`).
        metadata: The exported Model artifact's metadata.
        outputs: The component's outputs: accuracy, model_uri, register, default,
            decision, labels, description.
    """

    metrics: dict[str, float]
    metadata: dict[str, Any]
    outputs: dict[str, Any]


def run_export_stage(trained_model: str, dataset_dir: str, destination: str, *,
                     vertex: Mapping[str, Any], training: Mapping[str, Any],
                     images: Mapping[str, Any], registry_root: str, job_name: str,
                     cluster: Mapping[str, Any], exported_uri: str,
                     comparison_path: str, tuning: Mapping[str, Any] | None = None,
                     training_job_dir: str = "", report_path: str = "",
                     pipeline_job: str = "") -> ExportStage:
    """Stage 5 from the component's raw parameters: options read back through their
    models, `export_and_gate`, the comparison report, the local run's record for the exit
    handler, the progress lines, and what KFP receives.

    Args:
        trained_model: Where the trainer committed the model.
        dataset_dir: The prepared dataset.
        destination: The exported model artifact's path.
        vertex: The pipeline's `vertex` parameter.
        training: The pipeline's `training` parameter.
        images: The build stage's images.
        registry_root: The local registry (`run --local`); "" on Vertex AI.
        job_name: The pipeline run's name (the local run's decision record).
        cluster: The cluster's strategy, pools and plan, and on Vertex AI its
            `capacity` record (for the lineage and the report).
        exported_uri: The exported model artifact's URI.
        comparison_path: Where the champion/challenger Markdown goes.
        tuning: The study record of the tuning that chose the options (empty: none).
        training_job_dir: The training job's directory (its efficiency figures).
        report_path: Where the run's report goes ("": none).
        pipeline_job: The run's resource name on Vertex AI (its Experiments run); "" locally.
    """
    from components.export.lineage import description, labels
    from components.identity import version
    from components.stage_messages import say
    from components.vertex_options import VertexOptions
    from trainer.common import files
    from trainer.common.schema import validate
    from trainer.run.training_options import TrainingOptions

    options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
    settings = validate(TrainingOptions, training, prefix="training", strict=False)
    usage = load_efficiency(training_job_dir) if training_job_dir else None
    # The report's charts are drawn while the gate runs (the serving check mostly waits
    # for its model server to start).
    drawing = _draw_report(trained_model, dataset_dir, training_job_dir, usage) \
        if report_path else None
    outcome = export_and_gate(trained_model, dataset_dir, destination, vertex=options,
                              training=settings.model_dump(), images=images,
                              version=version(), cluster=cluster, registry_root=registry_root,
                              tuning=tuning, log=say, efficiency=usage,
                              project=pipeline_job.split("/")[1]
                              if pipeline_job.startswith("projects/") else "")
    results, decision, champion = outcome["metrics"], outcome["decision"], outcome["champion"]
    Path(comparison_path).parent.mkdir(parents=True, exist_ok=True)
    report = comparison_markdown(decision, results, champion)
    capacity = cluster.get("capacity")
    if capacity:  # which configuration trained, and why not the ones before it
        from components.capacity.launcher import summary

        report += f"\nCapacity: {summary(capacity)}.\n"
        say(f"capacity: {summary(capacity)}")
    files.write_text(comparison_path, report)
    # The SavedModel is committed in a directory of its own under the artifact (no
    # directory renames on Cloud Storage FUSE); its URI is what a model upload points at.
    saved_model_uri = f"{exported_uri.rstrip('/')}/{os.path.basename(outcome['saved'])}"
    if registry_root:  # for the run's summary (the exit handler)
        _record_run(registry_root, job_name, outcome, tuning)
    elif pipeline_job:
        from components.export.experiments import record_export

        record_export(options, job_name, pipeline_job, outcome, training_job_dir, log=say)
    if drawing is not None:
        _write_report(report_path, outcome, drawing.result(), job_name=job_name,
                      model_name=options.model_display_name, training=settings.model_dump(),
                      efficiency=usage)
    for line in _progress(outcome):
        say(line)
    if decision.warning:
        say(decision.warning)
    made = decision.to_dict()
    return ExportStage(
        metrics={**results, **{f"champion_{k}": v for k, v in (champion or {}).items()}},
        metadata={"framework": "tensorflow", "accuracy": results["accuracy"],
                  "saved_model_uri": saved_model_uri, "decision": decision.reason,
                  "promoted": decision.promoted,
                  "registered_version": outcome["registered"] or ""},
        outputs={"accuracy": results["accuracy"], "model_uri": saved_model_uri,
                 "register": decision.register, "default": decision.default,
                 # Stage 6 rolls a new default out, and only it moves the default.
                 "deploy": decision.register and decision.default
                 and bool(options.deploy.endpoint),
                 "decision": decision.reason, "labels": labels(outcome["lineage"], made),
                 "description": description(outcome["lineage"], made)})


def _record_run(registry_root: str, job_name: str, outcome: Mapping[str, Any],
                tuning: Mapping[str, Any] | None) -> None:
    """The local run's decision, registered version and trials, which the exit handler's
    summary reads."""
    from components.export.local_registry import run_record
    from components.tuning.trials import trials_table
    from trainer.common import files

    record = run_record(registry_root, job_name)
    record.parent.mkdir(parents=True, exist_ok=True)
    files.write_json(record,
                     {**outcome["decision"].to_dict(), "registered_version": outcome["registered"],
                      "trials": trials_table(tuning) if tuning else ""})


def _draw_report(trained_model: str, dataset_dir: str, training_job_dir: str,
                 efficiency: Mapping[str, Any] | None) -> Future:
    """Draws the run report's charts on a thread; its result is `_write_report`'s
    `inputs`."""
    from concurrent.futures import ThreadPoolExecutor

    def draw() -> dict[str, Any]:
        from components.export.run_report import draw
        from trainer.common import files
        from trainer.run.history import REPORT_FILE, load_evaluations
        from trainer.serving import measure

        manifest = load_manifest(dataset_dir)
        trained = (files.read_json(os.path.join(training_job_dir, REPORT_FILE))
                   if training_job_dir else None) or {}
        evaluations = load_evaluations(training_job_dir) if training_job_dir else []
        confusion = measure.confusion(saved_model_dir(trained_model), manifest)
        return {"manifest": manifest, "trained": trained, "evaluations": evaluations,
                "confusion": confusion,
                "drawn": draw(trained=trained, confusion=confusion, efficiency=efficiency,
                              evaluations=evaluations)}

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="run-report")
    drawing = pool.submit(draw)
    pool.shutdown(wait=False)  # the drawing goes on; the caller waits for its result
    return drawing


def _write_report(path: str, outcome: Mapping[str, Any], inputs: Mapping[str, Any], *,
                  job_name: str, model_name: str, training: Mapping[str, Any],
                  efficiency: Mapping[str, Any] | None) -> None:
    """The run's report (`components.export.run_report`) from what this stage knows."""
    from components.export.run_report import page
    from trainer.common import files

    files.write_text(path, page(
        run=job_name, model_name=model_name, manifest=inputs["manifest"],
        trained=inputs["trained"], training=training, metrics=outcome["metrics"],
        confusion=inputs["confusion"], decision=outcome["decision"].to_dict(),
        champion=outcome["champion"], registered=outcome["registered"],
        efficiency=efficiency, evaluations=inputs["evaluations"], drawn=inputs["drawn"]))


def _check_line(check: Mapping[str, Any]) -> str:
    from components.serving.serving_check import ServingCheck

    return ServingCheck(**check).describe()


def _progress(outcome: Mapping[str, Any]) -> list[str]:
    """The stage's progress lines: the new model's figures, the serving check, then the
    decision."""
    from components.export.split_figures import model_figures

    results, decision, here = outcome["metrics"], outcome["decision"], outcome["measured_here"]
    source = "evaluated here" if "challenger" in here else "as the trainer measured it"
    return [
        f"exported model, {source}: {model_figures(results)}",
        *([f"serving check: {_check_line(decision.serving_check)}"]
          if decision.serving_check else []),
        f"champion/challenger: {decision.reason}"
        + (" (the champion evaluated here on this dataset)" if "champion" in here else "")
        + (f" (local registry version {outcome['registered']})" if outcome["registered"]
           else ""),
    ]
