"""Typed run configuration: defaults, then a YAML file, then overrides; validated, frozen.

Every value a run uses comes from here, and a bad value is reported with its field
path, the value given and what would be valid, before any work starts.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import zoneinfo
from pathlib import Path
from typing import Any, Mapping

import yaml

from components import images
from components.dataset import BUILTIN_SHAPES, mounted_gcs_uri
from components.gpu_validation import (JOB_NAME_SUFFIX, validate_job_name,
                                      validate_worker_pool_specs)


class ConfigError(ValueError):
    """One or more configuration values are invalid; the message lists all of them."""


def _default_pools() -> list[dict[str, Any]]:
    # A chief and one worker, each an n1-standard-8 with one T4: the smallest real
    # multi-worker GPU cluster, valid in every GPU region.
    pool = {"machine_spec": {"machine_type": "n1-standard-8",
                             "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 1},
            "replica_count": 1}
    return [copy.deepcopy(pool) for _ in range(2)]


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """Dataset stage settings."""

    source: str = BUILTIN_SHAPES
    image_size: int = 32
    validation_fraction: float = 0.2
    test_fraction: float = 0.1
    num_shards: int = 0  # per split; 0 plans them from the worker count and data size
    max_bad_fraction: float = 0.01


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Trainer settings (the same on Vertex and locally)."""

    epochs: int = 10
    batch_size: int = 32
    learning_rate: float = 0.003
    local_workers: int = 2
    model: str = "cnn"
    mixed_precision: str = "auto"
    xla: str = "auto"


@dataclasses.dataclass(frozen=True)
class VertexConfig:
    """Where and on what the pipeline runs on Vertex AI."""

    project: str = ""
    region: str = "us-central1"
    pipeline_root: str = ""  # gs://BUCKET/PATH: artifacts, staging and build contexts
    service_account: str = ""
    network: str = ""  # projects/NUMBER/global/networks/NAME for VPC peering
    image_repository: str = images.DEFAULT_IMAGE_REPOSITORY
    worker_pool_specs: tuple = dataclasses.field(default_factory=lambda: tuple(_default_pools()))
    job_name: str = "gpu_training"
    restart_job_on_worker_restart: bool = True  # a lost worker restarts the job (resumes)
    scheduling_strategy: str = "STANDARD"  # or SPOT
    timeout: str = "604800s"
    tensorboard: str = ""  # projects/.../locations/.../tensorboards/ID
    accuracy_threshold: float = 0.9  # register the model only at or above this accuracy
    model_display_name: str = "gpu-pipeline-model"
    parent_model: str = ""  # projects/.../models/ID: register as a new version of it
    serving_image: str = images.SERVING_IMAGE
    enable_caching: bool = True
    labels: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    """Recurring retraining on Vertex AI (a PipelineJobSchedule)."""

    display_name: str = "gpu-pipeline-weekly"
    cron: str = "TZ=Etc/UTC 0 3 * * 1"  # Mondays at 03:00 UTC
    max_concurrent_run_count: int = 1
    max_run_count: int = 0  # 0: no limit


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole run configuration."""

    dataset: DatasetConfig = dataclasses.field(default_factory=DatasetConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    vertex: VertexConfig = dataclasses.field(default_factory=VertexConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)

    def vertex_training_workers(self) -> int:
        """Machines that train on Vertex AI: the chief plus the worker pool's replicas."""
        pools = list(self.vertex.worker_pool_specs)[:2]
        return sum(int(p.get("replica_count", 1)) for p in pools if p) or 1

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (the effective configuration saved with a run)."""
        data = dataclasses.asdict(self)
        data["vertex"]["worker_pool_specs"] = list(self.vertex.worker_pool_specs)
        return data


_TRISTATE = ("auto", "on", "off")
SECTIONS = {"dataset": DatasetConfig, "training": TrainingConfig, "vertex": VertexConfig,
             "schedule": ScheduleConfig}

# (minimum, maximum) for numeric fields; None means unbounded.
_RANGES = {
    "dataset.image_size": (8, 1024),
    "dataset.num_shards": (0, 4096),
    "training.epochs": (1, 10000),
    "training.batch_size": (1, 65536),
    "training.local_workers": (1, 8),
    "schedule.max_concurrent_run_count": (1, 1000),
    "schedule.max_run_count": (0, 10**9),
}


def _check_type(path: str, value: Any, default: Any, errors: list[str]) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            errors.append(f"{path} is {value!r}; expected true or false")
            return default
        return value
    if isinstance(default, dict):
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            errors.append(f"{path} is {value!r}; expected a mapping of strings to strings")
            return default
        return dict(value)
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{path} is {value!r}; expected an integer")
            return default
        low, high = _RANGES.get(path, (None, None))
        if (low is not None and value < low) or (high is not None and value > high):
            errors.append(f"{path} is {value}; expected an integer from {low} to {high}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(f"{path} is {value!r}; expected a number")
            return default
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            errors.append(f"{path} is {value!r}; expected a string")
            return default
        return value
    if isinstance(default, tuple):
        if not isinstance(value, (list, tuple)):
            errors.append(f"{path} is {value!r}; expected a list")
            return default
        return tuple(value)
    return value


def _merge(base: dict[str, dict[str, Any]], layer: Mapping[str, Any], origin: str,
           errors: list[str]) -> None:
    if not isinstance(layer, Mapping):
        errors.append(f"{origin}: expected a mapping with sections "
                      f"{', '.join(SECTIONS)}, got {type(layer).__name__}")
        return
    for section, values in layer.items():
        if section not in SECTIONS:
            errors.append(f"{origin}: unknown section {section!r}; valid sections are "
                          f"{', '.join(SECTIONS)}")
            continue
        if values is None:
            continue
        if not isinstance(values, Mapping):
            errors.append(f"{origin}: section {section!r} must be a mapping")
            continue
        fields = {f.name for f in dataclasses.fields(SECTIONS[section])}
        for key, value in values.items():
            if key not in fields:
                errors.append(f"{origin}: unknown field {section}.{key}; valid fields of "
                              f"{section} are {', '.join(sorted(fields))}")
            else:
                base[section][key] = value


def load_config(path: str | Path | None = None,
                overrides: Mapping[str, Mapping[str, Any]] | None = None,
                warnings: list[str] | None = None) -> Config:
    """Loads the configuration: defaults, then the YAML file, then overrides.

    Args:
        path: Optional YAML file with sections `dataset`, `training`, `vertex`.
        overrides: Values from the command line, in the same nested form; None values are
            ignored.
        warnings: If given, advice that does not block the run is appended to it.

    Returns:
        The validated, frozen configuration.

    Raises:
        ConfigError: The file is unreadable or any value is invalid (all problems listed).
    """
    defaults = Config()
    merged = {name: {f.name: getattr(getattr(defaults, name), f.name)
                     for f in dataclasses.fields(cls)} for name, cls in SECTIONS.items()}
    errors: list[str] = []
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"config file {str(path)!r} cannot be read: {exc.strerror}") from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
        _merge(merged, data, f"config file {path}", errors)
    if overrides:
        cleaned = {s: {k: v for k, v in vals.items() if v is not None}
                   for s, vals in overrides.items()}
        _merge(merged, cleaned, "command line", errors)

    sections = {}
    for name, cls in SECTIONS.items():
        values = {}
        for f in dataclasses.fields(cls):
            default = getattr(getattr(defaults, name), f.name)
            values[f.name] = _check_type(f"{name}.{f.name}", merged[name][f.name], default, errors)
        sections[name] = cls(**values)
    config = Config(**sections)

    fractions = config.dataset.validation_fraction, config.dataset.test_fraction
    if not 0.0 < fractions[0] < 1.0:
        errors.append(f"dataset.validation_fraction is {fractions[0]}; expected a number "
                      "strictly between 0 and 1")
    if not 0.0 <= fractions[1] < 1.0 or sum(fractions) >= 1.0:
        errors.append(f"dataset.test_fraction is {fractions[1]}; expected a number >= 0 with "
                      "validation_fraction + test_fraction < 1")
    if not 0.0 <= config.dataset.max_bad_fraction < 1.0:
        errors.append(f"dataset.max_bad_fraction is {config.dataset.max_bad_fraction}; "
                      "expected a number in [0, 1)")
    for field, valid in (("model", ("cnn", "resnet50")), ("mixed_precision", _TRISTATE),
                         ("xla", _TRISTATE)):
        value = getattr(config.training, field)
        if value not in valid:
            errors.append(f"training.{field} is {value!r}; valid values are {', '.join(valid)}")
    if config.training.learning_rate <= 0:
        errors.append(f"training.learning_rate is {config.training.learning_rate}; expected > 0")
    if 0 < config.dataset.num_shards < config.training.local_workers:
        errors.append(f"dataset.num_shards is {config.dataset.num_shards}, fewer than "
                      f"training.local_workers ({config.training.local_workers}); every worker "
                      "needs its own files: use at least as many shards as workers, or 0 to "
                      "plan them")
    source = config.dataset.source
    # /gcs/... is Vertex's Cloud Storage mount: read where the stage runs, not here.
    if "://" not in source and not mounted_gcs_uri(source) and not Path(source).is_dir() \
            and not (source.lower().endswith((".csv", ".jsonl")) and Path(source).is_file()):
        errors.append(f"dataset.source is {source!r}, which is neither a directory nor a "
                      "CSV/JSONL manifest; expected a folder with one sub-folder per class, a "
                      f"manifest, a gs:// prefix or /gcs/ path, tfds://NAME or {BUILTIN_SHAPES!r}")
    vertex = config.vertex
    if vertex.scheduling_strategy not in ("STANDARD", "SPOT"):
        errors.append(f"vertex.scheduling_strategy is {vertex.scheduling_strategy!r}; valid "
                      "values are STANDARD, SPOT")
    if not re.fullmatch(r"\d+(\.\d+)?s", vertex.timeout):
        errors.append(f"vertex.timeout is {vertex.timeout!r}; expected seconds like '86400s'")
    if not 0.0 <= vertex.accuracy_threshold <= 1.0:
        errors.append(f"vertex.accuracy_threshold is {vertex.accuracy_threshold}; expected a "
                      "number from 0 to 1")
    if vertex.pipeline_root and not vertex.pipeline_root.startswith("gs://"):
        errors.append(f"vertex.pipeline_root is {vertex.pipeline_root!r}; expected "
                      "gs://BUCKET/PATH")
    if vertex.parent_model and not re.fullmatch(r"projects/[^/]+/locations/[^/]+/models/[^/]+",
                                                vertex.parent_model):
        errors.append(f"vertex.parent_model is {vertex.parent_model!r}; expected "
                      "projects/PROJECT/locations/REGION/models/ID")
    for key, value in vertex.labels.items():
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key) or \
                not re.fullmatch(r"[a-z0-9_-]{0,63}", value):
            errors.append(f"vertex.labels has {key}: {value!r}; label keys start with a "
                          "lowercase letter and keys and values hold only lowercase letters, "
                          "digits, '_' and '-' (at most 63 characters)")
    fields = config.schedule.cron.split()
    if fields and fields[0].startswith(("TZ=", "CRON_TZ=")):  # Vertex's time-zone prefix
        zone = fields.pop(0).split("=", 1)[1]
        known = zoneinfo.available_timezones()  # empty without a tz database: not checked
        if known and zone not in known:
            errors.append(f"schedule.cron has time zone {zone!r}, which is not an IANA time "
                          "zone name; e.g. Etc/UTC, Europe/Berlin, America/New_York")
    if len(fields) != 5:
        errors.append(f"schedule.cron is {config.schedule.cron!r}; expected a cron expression "
                      "of 5 fields, optionally after TZ=ZONE (e.g. 'TZ=Etc/UTC 0 3 * * 1')")
    gpu = validate_worker_pool_specs(list(config.vertex.worker_pool_specs),
                                     region=config.vertex.region)
    errors.extend(f"vertex.{e}" for e in gpu.errors)
    errors.extend(validate_job_name(config.vertex.job_name, "vertex.job_name",
                                    reserve=JOB_NAME_SUFFIX))
    if warnings is not None:
        warnings.extend(f"vertex.{w}" for w in gpu.warnings)
    if errors:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  - {e}" for e in errors))
    return config
