"""The run's end, whatever its outcome (the exit handler): how it ended, the
champion/challenger decision, the rollout and the batch predictions when there were, and,
on Vertex AI, no canary left serving by a run that did not succeed (the champion gets all
the traffic back) and what the run cost, resource by resource
(`components.capacity.run_cost`)."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from components.vertex_options import VertexOptions


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What the exit handler says and writes."""

    facts: list[tuple[str, str]]
    trials: str  # a local study's table in Markdown, or ""
    cost: dict | None = None  # on Vertex AI, the run's itemised cost (`run_cost.itemise`)

    def markdown(self, run: str) -> str:
        return ("\n".join([f"# Run {run}", ""]
                          + [f"- {name}: {value}" for name, value in self.facts]) + "\n"
                + (f"\n{self.trials}" if self.trials else ""))

    def lines(self) -> list[str]:
        return [f"run {name}: {value}" for name, value in self.facts] + \
            self.trials.splitlines()[2:]  # the table and the best parameters


def run_title(pipeline_job: str, job_name: str) -> str:
    """The run's name for its summary: its PipelineJob's resource name on Vertex AI; the
    run's job name locally, where KFP's runner gives the exit handler a task's name
    ("local-pipeline-exit-handler-1") instead."""
    return pipeline_job if pipeline_job.startswith("projects/") else job_name or pipeline_job


def summarize(state: str, error: str, *, registry_root: str, job_name: str, project: str,
              vertex: VertexOptions, pipeline_job: str = "") -> RunSummary:
    """The run's summary; `registry_root` is the local run's registry ("" on Vertex AI,
    where a run that did not succeed has its canary rolled back here, and `pipeline_job`,
    the run's resource name, has its steps priced)."""
    from components.export.local_registry import run_record
    from components.stage_messages import first_failure

    # The stage's own words first: the runner's error names only the group that failed.
    cause = first_failure() if state != "SUCCEEDED" else ""
    if cause and cause not in error:
        error = f"{cause} ({error})" if error else cause
    facts = [("state", state)] + ([("error", error)] if error else [])
    if not registry_root and state != "SUCCEEDED":
        from components.serving.deploy_stage import restore_on_vertex

        restored = restore_on_vertex(project, vertex, job_name)
        if restored:
            facts.append(("deploy", f"left mid-canary: {restored}"))
    cost = None
    if not registry_root and project:
        from components.capacity.run_cost import of_run

        cost, said = of_run(project, vertex, pipeline_job)
        facts.append(("cost", said))
        if pipeline_job:
            from components.export.experiments import end_run

            facts.append(("experiments", end_run(
                project, vertex, job_name, state, error=error, pipeline_job=pipeline_job,
                cost_usd=cost["usd"] if cost is not None else None)))
    record = run_record(registry_root, job_name) if registry_root else None
    if record is None or not record.is_file():
        return RunSummary(facts, "", cost)
    made = json.loads(record.read_text())
    facts.append(("champion/challenger", made["reason"]))
    if made.get("warning"):
        facts.append(("warning", made["warning"].removeprefix("warning: ")))
    if made.get("registered_version"):
        facts.append(("local registry version", made["registered_version"]))
    if made.get("rollout"):
        facts.append(("deploy", f"{made['rollout']['outcome']}: {made['rollout']['reason']}"))
    if made.get("batch_predictions"):
        scored = made["batch_predictions"]
        facts.append(("batch predictions", f"{scored['predicted']} predicted, "
                      f"{scored['refused']} refused: {scored['directory']}"))
    return RunSummary(facts, made.get("trials", ""))
