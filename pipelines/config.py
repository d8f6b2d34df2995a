"""The run configuration's sections: one declared options model per concern, frozen.

Each section is the declared options model of its concern (`trainer.common.schema`):
`dataset` (`components.dataset.dataset_options`), `training`
(`trainer.run.training_options`), `tuning`, `vertex` (`components.vertex_options`, plus
what only the client needs), `schedule`, and `local`, the processes `run --local` starts.
How a configuration is loaded (defaults, a YAML file, flags) and checked across sections
is `pipelines.config_loading`.
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from typing import Annotated, Any

import pydantic
from croniter import croniter
from pydantic import AfterValidator, Field

from components.cloud_names import DisplayName, GcsUri, ProjectId
from components.dataset.dataset_options import DatasetOptions
from components.gpu.alternatives import Alternative
from components.gpu.configuration import check_configuration
from components.gpu.pools import check_pools, layout_of
from components.gpu.reservations import completed, consuming
from components.gpu.validation import validate_worker_pool_specs
from components.tuning.tuning_options import TuningOptions
from components.vertex_options import VertexOptions
from trainer.cluster.roles import Layout
from trainer.cluster.training_plan import TrainingPlan, plan_training, requested
from trainer.common.schema import STRICT, OptionsError, short
from trainer.run.training_options import TrainingOptions


class ConfigError(OptionsError):
    """One or more configuration values are invalid; the message lists all of them."""


class LocalRunConfig(pydantic.BaseModel):
    """The processes `run --local` starts: by default, the roles of the Vertex AI worker
    pools (one process per replica, on CPUs)."""

    model_config = STRICT

    training_machines: int | None = Field(None, ge=1, le=8, description=(
        "Training machines (the chief and the workers) as processes; empty: as many as "
        "the Vertex AI pools 0 and 1 hold."))
    parameter_servers: int | None = Field(None, ge=0, le=4, description=(
        "Parameter-server processes; empty: as in Vertex AI pool 2."))
    evaluator: bool | None = Field(None, description=(
        "A sidecar evaluator process; empty: as in Vertex AI pool 3."))


#: The local-run keys the training section held before the `local` section: old -> new.
DEPRECATED_TRAINING_KEYS = {"local_workers": "training_machines",
                            "local_parameter_servers": "parameter_servers",
                            "local_evaluator": "evaluator"}


def _email(value: str) -> str:
    if not re.fullmatch(r"[^@\s\"]+@[a-z0-9.-]+\.[a-z]{2,}", value):
        raise ValueError("expected an email address")
    return value


def measurements_location(measurements: str, pipeline_root: str) -> str:
    """`training.measurements`, else `<pipeline_root>/measurements/` ("" without either):
    where runs on Vertex AI read the user's GPU benchmark results."""
    root = pipeline_root.rstrip("/")
    return measurements or (f"{root}/measurements/" if root else "")


class VertexConfig(VertexOptions):
    """The Vertex AI options, and what only the client needs to submit a run."""

    project: ProjectId = Field("", description="Google Cloud project of the runs.")
    pipeline_root: GcsUri = Field("", description=(
        "gs://BUCKET/PATH: artifacts, staging and build contexts."))
    enable_caching: bool = Field(True, description=(
        "Reuse the prepared dataset while its source is unchanged (the only cached task); "
        "false prepares it again."))
    notification_emails: list[Annotated[str, AfterValidator(_email)]] = Field(
        default_factory=list, max_length=3, description=(
            "Up to 3 addresses told of every run's outcome (Vertex AI's email notification)."))
    # Vertex AI takes up to 96 CPUs and 624 GB per pipeline step (docs: "Specify the
    # machine configuration for a pipeline step").
    component_cpu: str = Field("8", pattern=r"^([1-9]\d*|\d+m)$", description=(
        "CPUs of the dataset preparation and export steps on Vertex AI (e.g. 8 or 500m)."),
        json_schema_extra={"valid": "whole CPUs (e.g. 8) or millicpus (e.g. 500m)"})
    component_memory: str = Field("32G", pattern=r"^[1-9]\d*(\.\d+)?[KMG]?$", description=(
        "Memory of the dataset preparation and export steps on Vertex AI (e.g. 32G)."),
        json_schema_extra={"valid": "a size with K, M or G, e.g. 32G or 512M"})

    @pydantic.model_validator(mode="before")
    @classmethod
    def _reservations_in_project(cls, data: Any) -> Any:
        """A pool's or fallback's `reservation: ZONE/NAME` as the full resource name in
        `project`, which Vertex AI requires (the pipeline's stages know no project)."""
        return reservations_in_project(data)

    def problems(self) -> list[str]:
        found = super().problems()
        cpu = self.component_cpu
        cpus = int(cpu[:-1]) / 1000 if cpu.endswith("m") else int(cpu)
        if not 0 < cpus <= 96:
            found.append(f"component_cpu is {cpu!r}; Vertex AI Pipelines gives a step from "
                         "1m to 96 CPUs")
        memory = self.component_memory
        unit = {"K": 2**-20, "M": 2**-10, "G": 1}.get(memory[-1], 2**-30)
        if float(memory.rstrip("KMG")) * unit > 624:
            found.append(f"component_memory is {memory!r}; Vertex AI Pipelines gives a step "
                         "at most 624G")
        return found


def reservations_in_project(vertex: Any) -> Any:
    """A `vertex` section whose pools' and fallbacks' `reservation: ZONE/NAME` are full
    resource names in its `project` (a pool's as `machine_spec.reservation_affinity`);
    as given without a project."""
    project = vertex.get("project") if isinstance(vertex, dict) else None
    if not project or not isinstance(project, str):
        return vertex
    vertex = dict(vertex)
    if isinstance(vertex.get("worker_pool_specs"), list):
        vertex["worker_pool_specs"] = _completed_pools(vertex["worker_pool_specs"], project)
    if isinstance(vertex.get("fallbacks"), list):
        vertex["fallbacks"] = [_completed_fallback(f, project) for f in vertex["fallbacks"]]
    return vertex


def _completed_pools(specs: list[Any], project: str) -> list[Any]:
    """Pools whose `reservation` is the API's `machine_spec.reservation_affinity` (what
    the compiled spec and the CustomJob carry); one the GPU rules refuse stays as given."""
    return [consuming(spec, spec["reservation"], project)
            if isinstance(spec, dict) and "reservation" in spec
            and isinstance(spec.get("machine_spec"), dict)
            and "reservation_affinity" not in spec["machine_spec"] else spec
            for spec in specs]


def _completed_fallback(fallback: Any, project: str) -> Any:
    if not isinstance(fallback, dict):
        return fallback
    found = dict(fallback)
    if "reservation" in found:
        found["reservation"] = completed(found["reservation"], project)
    if isinstance(found.get("worker_pool_specs"), list):
        found["worker_pool_specs"] = _completed_pools(found["worker_pool_specs"], project)
    return found


class ScheduleConfig(pydantic.BaseModel):
    """Recurring retraining on Vertex AI (a PipelineJobSchedule)."""

    model_config = STRICT

    display_name: DisplayName = Field("gpu-pipeline-weekly", description="Name of the schedule.")
    cron: str = Field("TZ=Etc/UTC 0 3 * * 1", description=(
        "Unix cron, optionally after TZ=ZONE; default Mondays at 03:00 UTC."))
    max_concurrent_run_count: int = Field(1, ge=1, le=1000, description=(
        "Runs of the schedule allowed at once."))
    max_run_count: int = Field(0, ge=0, le=10**9, description="Runs in all; 0: no limit.")

    def zone(self) -> str:
        """The cron's time zone (Vertex AI's `TZ=` or `CRON_TZ=` prefix; UTC without)."""
        first = self.cron.split()[0] if self.cron.split() else ""
        return first.split("=", 1)[1] if first.startswith(("TZ=", "CRON_TZ=")) else "Etc/UTC"

    def next_runs(self, count: int = 3, after: datetime.datetime | None = None
                  ) -> list[datetime.datetime]:
        """The schedule's next `count` run times after `after` (now), in its time zone."""
        fields = [f for f in self.cron.split() if not f.startswith(("TZ=", "CRON_TZ="))]
        start = (after or datetime.datetime.now(datetime.timezone.utc)).astimezone(
            zoneinfo.ZoneInfo(self.zone()))
        times = croniter(" ".join(fields), start)
        return [times.get_next(datetime.datetime) for _ in range(count)]

    def problems(self) -> list[str]:
        fields = self.cron.split()
        found = []
        if fields and fields[0].startswith(("TZ=", "CRON_TZ=")):  # Vertex's time-zone prefix
            zone = fields.pop(0).split("=", 1)[1]
            known = zoneinfo.available_timezones()  # empty without a tz database: not checked
            if known and zone not in known:
                found.append(f"cron has time zone {short(zone)}, which is not an IANA time zone "
                             "name; e.g. Etc/UTC, Europe/Berlin, America/New_York")
        if len(fields) != 5:
            found.append(f"cron is {short(self.cron)}; expected a cron expression of 5 fields, "
                         "optionally after TZ=ZONE (e.g. 'TZ=Etc/UTC 0 3 * * 1')")
        elif not croniter.is_valid(" ".join(fields)):
            found.append(f"cron is {short(self.cron)}; its fields are not a valid unix-cron "
                         "schedule (minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-6, "
                         "with * , - /)")
        return found


class Config(pydantic.BaseModel):
    """The whole run configuration."""

    model_config = STRICT

    dataset: DatasetOptions = Field(default_factory=DatasetOptions)
    training: TrainingOptions = Field(default_factory=TrainingOptions)
    tuning: TuningOptions = Field(default_factory=TuningOptions)
    vertex: VertexConfig = Field(default_factory=VertexConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    local: LocalRunConfig = Field(default_factory=LocalRunConfig)

    def training_options(self) -> TrainingOptions:
        """The trainer's options (the pipeline's `training` parameter)."""
        return self.training

    def measurements_location(self) -> str:
        """Where the plan reads the user's GPU benchmark results on Vertex AI:
        `training.measurements`, else `<vertex.pipeline_root>/measurements/` ("" without a
        pipeline root). Local runs read only what `training.measurements` names."""
        return measurements_location(self.training.measurements, self.vertex.pipeline_root)

    def vertex_training(self) -> TrainingOptions:
        """The training options as a run on Vertex AI uses them: the measurements location
        and XLA's cache resolved under the pipeline root when not set."""
        root = self.vertex.pipeline_root.rstrip("/")
        return self.training.model_copy(update={
            "measurements": self.measurements_location(),
            "xla_cache": self.training.xla_cache or (f"{root}/xla-cache/" if root else "")})

    def vertex_options(self) -> VertexOptions:
        """The run's Vertex AI options (the pipeline's `vertex` parameter)."""
        return VertexOptions(**self.vertex.model_dump(include=set(VertexOptions.model_fields)))

    def vertex_training_machines(self) -> int:
        """Machines that train on Vertex AI: the chief plus the worker pool's replicas."""
        return validate_worker_pool_specs(self.vertex.worker_pool_specs).training_machines

    def local_layout(self) -> Layout:
        """The roles `run --local` starts: the `local` section's values, else the Vertex
        AI pools' own."""
        pools = layout_of(self.vertex.pools)
        local = self.local
        return Layout(
            workers=pools.workers if local.training_machines is None
            else local.training_machines - 1,
            parameter_servers=pools.parameter_servers if local.parameter_servers is None
            else local.parameter_servers,
            evaluators=min(pools.evaluators, 1) if local.evaluator is None
            else int(local.evaluator))

    def vertex_plan(self) -> TrainingPlan:
        """The training plan of the Vertex AI pools (made by stage 1's rules)."""
        result = check_pools(self.vertex.worker_pool_specs, training=self.vertex_training())
        return result.raise_for_errors().plan

    def alternatives(self) -> list[Alternative]:
        """The primary Vertex AI configuration and each fallback, checked by stage 1's
        rules, each with its training plan (`components.gpu.configuration`)."""
        return check_configuration(self.vertex, self.vertex_training()).checked \
            .raise_for_errors().alternatives

    def local_plan(self) -> TrainingPlan:
        """The training plan of `run --local`'s CPU processes (`local_layout`).

        Raises:
            PlanError: The training options cannot work on these processes.
        """
        return plan_training(self.local_layout(), **requested(self.training))

    def problems(self) -> list[str]:
        """Rules between sections."""
        shards, workers = self.dataset.num_shards, self.local_layout().training_machines
        if 0 < shards < workers:
            return [f"dataset.num_shards is {shards}, fewer than local.training_machines "
                    f"({workers}); every worker needs its own files: use at least as many "
                    "shards as workers, or 0 to plan them"]
        return []


SECTIONS = tuple(Config.model_fields)
