"""The run configuration: defaults, then a YAML file, then command-line values; validated,
frozen.

Each section is the declared options model of its concern (`trainer.schema`): `dataset`
(`components.dataset.options`), `training` (`trainer.options`, plus how many local
workers), `vertex` (`components.vertex_options`, plus what only the client needs) and
`schedule`. A bad value is reported with its field path, the value given and what would
be valid, every problem at once, before any work starts.
"""

from __future__ import annotations

import importlib.util
import os
import re
import zoneinfo
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import pydantic
from croniter import croniter
from pydantic import AfterValidator, Field

from components.capacity.alternatives import Alternative, check_alternatives
from components.cloud_names import DisplayName, GcsUri, ProjectId
from components.dataset.options import DatasetOptions
from components.dataset.sources import DatasetError, kind_of
from components.gpu.ai_platform import convert_ai_platform_config
from components.gpu.validation import validate_worker_pool_specs
from components.training.layout import check_pools, layout_of
from components.tuning.ai_platform import convert_hyperparameters
from components.tuning.options import TuningOptions, conflicts
from components.vertex_options import VertexOptions
from pipelines.yaml_input import YamlFileError, read_yaml
from trainer.backbones import IMAGENET
from trainer.cluster import Layout
from trainer.gcs import GCS_MOUNT
from trainer.options import TrainingOptions
from trainer.schema import STRICT, OptionsError, short, validate
from trainer.training_plan import TrainingPlan, plan_training, requested
from trainer.user_model import is_reference, module_files


class ConfigError(OptionsError):
    """One or more configuration values are invalid; the message lists all of them."""


class TrainingConfig(TrainingOptions):
    """The training options, and the processes `run --local` starts (by default, the roles
    of the Vertex AI worker pools)."""

    local_workers: int | None = Field(None, ge=1, le=8, description=(
        "Training machines (the chief and the workers) as processes for `run --local`; "
        "empty: as many as the Vertex AI pools 0 and 1 hold."))
    local_parameter_servers: int | None = Field(None, ge=0, le=4, description=(
        "Parameter-server processes for `run --local`; empty: as in Vertex AI pool 2."))
    local_evaluator: bool | None = Field(None, description=(
        "A sidecar evaluator process for `run --local`; empty: as in Vertex AI pool 3."))


def _email(value: str) -> str:
    if not re.fullmatch(r"[^@\s\"]+@[a-z0-9.-]+\.[a-z]{2,}", value):
        raise ValueError("expected an email address")
    return value


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


class ScheduleConfig(pydantic.BaseModel):
    """Recurring retraining on Vertex AI (a PipelineJobSchedule)."""

    model_config = STRICT

    display_name: DisplayName = Field("gpu-pipeline-weekly", description="Name of the schedule.")
    cron: str = Field("TZ=Etc/UTC 0 3 * * 1", description=(
        "Unix cron, optionally after TZ=ZONE; default Mondays at 03:00 UTC."))
    max_concurrent_run_count: int = Field(1, ge=1, le=1000, description=(
        "Runs of the schedule allowed at once."))
    max_run_count: int = Field(0, ge=0, le=10**9, description="Runs in all; 0: no limit.")

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
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    tuning: TuningOptions = Field(default_factory=TuningOptions)
    vertex: VertexConfig = Field(default_factory=VertexConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)

    def training_options(self) -> TrainingOptions:
        """The trainer's options (the pipeline's `training` parameter)."""
        return TrainingOptions(**self.training.model_dump(include=set(
            TrainingOptions.model_fields)))

    def vertex_options(self) -> VertexOptions:
        """The run's Vertex AI options (the pipeline's `vertex` parameter)."""
        return VertexOptions(**self.vertex.model_dump(include=set(VertexOptions.model_fields)))

    def vertex_training_workers(self) -> int:
        """Machines that train on Vertex AI: the chief plus the worker pool's replicas."""
        return validate_worker_pool_specs(self.vertex.worker_pool_specs).training_workers

    def local_layout(self) -> Layout:
        """The roles `run --local` starts: the `training.local_*` values, else the Vertex
        AI pools' own."""
        pools = layout_of(self.vertex.worker_pool_specs)
        t = self.training
        return Layout(
            workers=pools.workers if t.local_workers is None else t.local_workers - 1,
            parameter_servers=pools.parameter_servers if t.local_parameter_servers is None
            else t.local_parameter_servers,
            evaluators=min(pools.evaluators, 1) if t.local_evaluator is None
            else int(t.local_evaluator))

    def vertex_plan(self) -> TrainingPlan:
        """The training plan of the Vertex AI pools (made by stage 1's rules)."""
        result = check_pools(self.vertex.worker_pool_specs, training=self.training)
        return result.raise_for_errors().plan

    def alternatives(self) -> list[Alternative]:
        """The primary Vertex AI configuration and each fallback, checked by stage 1's
        rules, each with its training plan (`components.capacity.alternatives`)."""
        return check_alternatives(self.vertex, self.training).raise_for_errors().alternatives

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
            return [f"dataset.num_shards is {shards}, fewer than training.local_workers "
                    f"({workers}); every worker needs its own files: use at least as many "
                    "shards as workers, or 0 to plan them"]
        return []


SECTIONS = tuple(Config.model_fields)


def _read_yaml(path: str | Path) -> Any:
    try:
        return read_yaml(path, "config file") or {}
    except YamlFileError as exc:
        raise ConfigError([str(exc)]) from None


def _merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Later layers over earlier ones, section by section (fields merge; None is absent)."""
    merged: dict[str, Any] = {}
    for section, values in (item for layer in layers for item in layer.items()):
        current = merged.get(section)
        if values is None or (current is not None and not isinstance(current, Mapping)):
            continue  # nothing given, or an invalid section that validation will report
        if isinstance(values, Mapping):
            merged[section] = {**(current or {}),
                               **{k: v for k, v in values.items() if v is not None}}
        else:
            merged[section] = values
    return merged


#: Top-level keys of an AI Platform Training config.yaml (the format of its GPU guide's
#: examples).
AI_PLATFORM_KEYS = {"trainingInput", "scaleTier", "masterType"}


def _from_ai_platform(data: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """An AI Platform Training config.yaml as a configuration: its cluster becomes the
    Vertex AI worker pools (master 0, workers 1, parameter servers 2, evaluators 3), which
    `run --local` then starts as processes too; its `hyperparameters`, the `tuning`
    section."""
    conversion = convert_ai_platform_config(data)
    errors = list(conversion.errors)
    training_input = data.get("trainingInput", data)
    converted: dict[str, Any] = {"vertex": {"worker_pool_specs": conversion.specs}}
    if isinstance(training_input, Mapping):
        if isinstance(training_input.get("region"), str):
            converted["vertex"]["region"] = training_input["region"]
        if "hyperparameters" in training_input:
            converted["tuning"], problems = convert_hyperparameters(
                training_input["hyperparameters"])
            errors += problems
    if errors:
        raise ConfigError(errors, f"cannot convert the AI Platform config {path}")
    return converted


def _sections(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Each section validated on its own, so that every section's problems are reported."""
    errors = [f"unknown section {name!r}; valid sections are {', '.join(SECTIONS)}"
              for name in data if name not in SECTIONS]
    sections = {}
    for name, field in Config.model_fields.items():
        raw = data.get(name, {})
        try:
            sections[name] = validate(field.annotation, raw, prefix=name)
        except OptionsError as exc:
            errors.extend(exc.problems)
            if not isinstance(raw, Mapping) or not exc.fields:
                continue  # not a mapping, or only rules between valid fields failed
            # The section's valid values still take part in the rules between fields and
            # between sections, so that every problem is reported at once.
            try:
                sections[name] = validate(field.annotation, {
                    k: v for k, v in raw.items() if k not in exc.fields}, prefix=name)
            except OptionsError as rest:
                errors.extend(rest.problems)
    return sections, errors


#: Training options that name local files: relative to the config file that sets them (or
#: to the working directory, on the command line), made absolute at load, because the
#: trainer's processes run elsewhere.
LOCAL_PATHS = ("user_code", "weights")


def _with_absolute_paths(data: Mapping[str, Any], base: Path) -> Mapping[str, Any]:
    training = data.get("training")
    if not isinstance(training, Mapping):
        return data
    fixed = {name: os.path.normpath(base / value) for name in LOCAL_PATHS
             if isinstance(value := training.get(name), str) and value
             and is_local_file(value) and not Path(value).is_absolute()}
    return {**data, "training": {**training, **fixed}} if fixed else data


def is_local_file(weights_or_path: str) -> bool:
    """Whether a path option names a file on this machine (not Cloud Storage, not the
    ImageNet weights Keras fetches)."""
    return weights_or_path != IMAGENET and not weights_or_path.startswith(("gs://", GCS_MOUNT))


def _training_files(training: TrainingConfig) -> list[str]:
    """The local files the training options name exist (before the pipeline starts)."""
    errors = []
    weights = training.weights
    if weights and is_local_file(weights) and not Path(weights).is_file():
        errors.append(f"training.weights is {weights!r}, which is not a file; give a weights "
                      f"file (local, gs:// or /gcs/), '{IMAGENET}', or nothing")
    code = training.user_code
    if code and not Path(code).is_dir():
        errors.append(f"training.user_code is {code!r}, which is not a directory; give the "
                      "directory that holds your model's package")
    elif is_reference(training.model):
        found = module_files(training.model, code) if code else []
        top = training.model.split(".")[0].split(":")[0]
        if not any(f.is_file() for f in found) and (
                code or importlib.util.find_spec(top) is None):
            where = (f"in training.user_code {code!r} (looked for "
                     f"{' and '.join(str(f) for f in found)})" if code
                     else "installed, and training.user_code is not set")
            errors.append(f"training.model is {training.model!r}, but its module is not "
                          f"{where}")
    return errors


def _preflight(sections: Mapping[str, Any], raw: Mapping[str, Any],
               warnings: list[str] | None) -> list[str]:
    """Checks between sections, of the machine and of the GPU rules."""
    errors = []
    dataset, training, vertex = (sections.get(n) for n in ("dataset", "training", "vertex"))
    if dataset is not None and training is not None:
        errors += Config(dataset=dataset, training=training).problems()
    if training is not None:
        errors += _training_files(training)
        tuning = sections.get("tuning")
        if tuning is not None:
            errors += conflicts(tuning, training)
    if dataset is not None:  # a cheap look at the source, before the pipeline starts
        try:
            kind_of(dataset.source).preflight(dataset.source)
        except DatasetError as exc:
            errors.append(f"dataset.source is {short(dataset.source)}: {exc}")
    # The GPU rules apply to the pools given even when another vertex field is wrong.
    given = raw.get("vertex") if isinstance(raw.get("vertex"), Mapping) else {}
    region = given.get("region", VertexConfig().region)
    if vertex is not None:  # the primary configuration and every fallback
        gpu: Any = check_alternatives(vertex, training)
    elif given.get("worker_pool_specs") is not None:
        gpu = check_pools(given["worker_pool_specs"], training=training,
                          region=region if isinstance(region, str) else None)
    else:
        return errors
    errors.extend(f"vertex.{e}" for e in gpu.errors)
    if warnings is not None:
        warnings.extend(f"vertex.{w}" for w in gpu.warnings)
    return errors


def load_config(path: str | Path | None = None,
                overrides: Mapping[str, Mapping[str, Any]] | None = None,
                warnings: list[str] | None = None) -> Config:
    """Loads the configuration: defaults, then the YAML file, then overrides.

    Args:
        path: Optional YAML file with the sections `dataset`, `training`, `vertex`,
            `schedule`.
        overrides: Values from the command line, in the same nested form; None values are
            ignored.
        warnings: If given, advice that does not block the run is appended to it.

    Returns:
        The validated, frozen configuration.

    Raises:
        ConfigError: The file is unreadable or any value is invalid (all problems listed).
    """
    data: Any = {}
    if path is not None:
        data = _read_yaml(path)
        if not isinstance(data, Mapping):
            raise ConfigError([f"config file {str(path)!r} holds a {type(data).__name__}; "
                               f"expected a mapping with the sections {', '.join(SECTIONS)}"])
        if AI_PLATFORM_KEYS & set(data):
            data = _from_ai_platform(data, path)
        data = _with_absolute_paths(data, Path(path).resolve().parent)
    data = _merge(data, _with_absolute_paths(overrides or {}, Path.cwd()))
    sections, errors = _sections(data)
    errors += _preflight(sections, data, warnings)
    if errors:
        raise ConfigError(errors, "invalid configuration")
    return Config(**sections)
