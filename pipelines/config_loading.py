"""Loading the run configuration: defaults, then a YAML file (or an AI Platform
`config.yaml`), then command-line values; validated and frozen (`load_config`).

A bad value is reported with its field path, the value given and what would be valid,
every problem at once, before any work starts: each section's own rules, then the rules
between sections, the files the options name, the dataset source, and the GPU rules of
every Vertex AI configuration (`components.gpu.pools.check_pools`).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components.dataset.sources import DatasetError, kind_of
from components.gpu.ai_platform_job import carried
from components.gpu.ai_platform_pools import convert_ai_platform_config
from components.gpu.configuration import check_configuration
from components.gpu.pools import check_pools
from components.tuning.ai_platform_study import convert_hyperparameters
from components.tuning.tuning_options import conflicts
from pipelines.config import (
    DEPRECATED_TRAINING_KEYS,
    SECTIONS,
    Config,
    ConfigError,
    LocalRunConfig,
    VertexConfig,
)
from pipelines.yaml_input import YamlFileError, read_yaml
from trainer.common.gcs import GCS_MOUNT
from trainer.common.schema import OptionsError, short, validate
from trainer.common.suggest import did_you_mean
from trainer.models.backbones import IMAGENET
from trainer.models.user_model import is_reference, module_files
from trainer.run.training_options import TrainingOptions


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


def _from_ai_platform(data: Mapping[str, Any], path: str | Path,
                      warnings: list[str] | None) -> dict[str, Any]:
    """An AI Platform Training config.yaml as a configuration: its cluster becomes the
    Vertex AI worker pools (master 0, workers 1, parameter servers 2, evaluators 3), which
    `run --local` then starts as processes too; its job fields the `vertex` options that do
    the same (`ai_platform_job.CARRIED`), the others named in a warning; its
    `hyperparameters`, the `tuning` section."""
    conversion = convert_ai_platform_config(data, check_legacy=True)
    errors = list(conversion.errors)
    if warnings is not None:
        warnings += conversion.warnings
    training_input = data.get("trainingInput", data)
    converted: dict[str, Any] = {"vertex": {"worker_pool_specs": conversion.specs}}
    if isinstance(training_input, Mapping):
        converted["vertex"].update(carried(training_input))
        if "hyperparameters" in training_input:
            converted["tuning"], problems = convert_hyperparameters(
                training_input["hyperparameters"])
            errors += problems
    if errors:
        raise ConfigError(errors, f"cannot convert the AI Platform config {path}")
    return converted


#: Keys read no more, each with what replaced it. `vertex.promotion_margin` (an absolute
#: margin: above an accuracy of 1 - margin no model could be promoted, and a schedule kept
#: its champion forever): the gate compares paired predictions
#: (`components.export.paired_test`). `dataset.near_duplicate_distance` (bits of a grey
#: 64-bit dHash, which paired distinct small images and missed resized copies):
#: thumbnails (`components.dataset.image_facts`).
DROPPED_KEYS = {
    ("vertex", "promotion_margin"): (
        "the gate compares the two models' predictions image by image (McNemar's exact test "
        "at vertex.promotion_level); vertex.promotion default promotes a significantly "
        "better model, unless_shown_worse one not shown worse than "
        "vertex.non_inferiority_margin allows"),
    ("dataset", "near_duplicate_distance"): (
        "near duplicates are found by 8x8 colour thumbnails now, within "
        "dataset.near_duplicate_difference (default 6 of 255)"),
}


def without_deprecated_keys(data: Mapping[str, Any], where: str,
                             warnings: list[str] | None) -> Mapping[str, Any]:
    """The keys of earlier versions: `training.local_*` moved to the `local` section (with
    a deprecation note), unless that section already sets them (then the note says which
    one counts); `DROPPED_KEYS` dropped with a note."""
    vertex = data.get("vertex")
    if isinstance(vertex, Mapping) and vertex.get("promotion") == "non_inferior":
        if warnings is not None:
            warnings.append(f"vertex.promotion non_inferior ({where}) is deprecated: it is "
                            "read as unless_shown_worse, its name for what it does (promote "
                            "unless the test shows the new model worse than the margin); "
                            "write that instead")
        data = {**data, "vertex": {**vertex, "promotion": "unless_shown_worse"}}
    for (section, key), instead in DROPPED_KEYS.items():
        values = data.get(section)
        if isinstance(values, Mapping) and key in values:
            if warnings is not None:
                warnings.append(f"{section}.{key} ({where}) is deprecated and ignored: "
                                f"{instead}")
            data = {**data, section: {k: v for k, v in values.items() if k != key}}
    training = data.get("training")
    if not isinstance(training, Mapping) or not set(DEPRECATED_TRAINING_KEYS) & set(training):
        return data
    local = dict(data.get("local") or {}) if isinstance(data.get("local"), Mapping) else {}
    for old, new in DEPRECATED_TRAINING_KEYS.items():
        if training.get(old) is None:
            continue
        if local.get(new) is not None:
            note = (f"training.{old} ({where}) is deprecated and ignored: local.{new} "
                    f"({local[new]!r}) is set")
        else:
            local[new] = training[old]
            note = f"training.{old} ({where}) is deprecated: write local.{new} instead"
        if warnings is not None:
            warnings.append(note)
    kept = {k: v for k, v in training.items() if k not in DEPRECATED_TRAINING_KEYS}
    return {**data, "training": kept, "local": local}


def unknown_sections(data: Mapping[str, Any]) -> list[str]:
    """A line per section the configuration does not have: the closest one when it looks
    mistyped, else every valid section."""
    return [f"unknown section {name!r}" + (did_you_mean(str(name), SECTIONS) or
                                          f"; valid sections are {', '.join(SECTIONS)}")
            for name in data if name not in SECTIONS]


def _sections(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Each section validated on its own, so that every section's problems are reported."""
    errors = unknown_sections(data)
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
LOCAL_PATHS = ("user_code", "weights", "measurements", "xla_cache")


def with_absolute_paths(data: Mapping[str, Any], base: Path) -> Mapping[str, Any]:
    """The configuration with its training options' local paths (`LOCAL_PATHS`) made
    absolute against `base` (the config file's folder, or the working directory)."""
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


def _training_files(training: TrainingOptions) -> list[str]:
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


#: Vertex AI's default CustomJob timeout, 7 days (`Scheduling.timeout`: "The maximum job
#: running time. The default is 7 days."): a longer one is most likely a typo, and the
#: estimate and the budget's hold are taken from it.
DEFAULT_JOB_TIMEOUT_SECONDS = 7 * 24 * 3600


def long_timeout(timeout: str) -> list[str]:
    """A warning when `vertex.timeout` passes Vertex AI's 7-day default."""
    from components.durations import duration_seconds

    seconds = duration_seconds(timeout)
    if seconds is None or seconds <= DEFAULT_JOB_TIMEOUT_SECONDS:
        return []
    return [f"vertex.timeout is {timeout} ({seconds / 86400:,.1f} days), past Vertex AI's "
            f"default of 7 days ({DEFAULT_JOB_TIMEOUT_SECONDS}s): a job that hangs is billed "
            "that long; is it meant?"]


def _preflight(sections: Mapping[str, Any], raw: Mapping[str, Any],
               warnings: list[str] | None) -> list[str]:
    """Checks between sections, of the machine and of the GPU rules."""
    errors = []
    dataset, training, vertex = (sections.get(n) for n in ("dataset", "training", "vertex"))
    if dataset is not None and training is not None:
        errors += Config(dataset=dataset, training=training,
                         local=sections.get("local") or LocalRunConfig()).problems()
    if training is not None:
        errors += _training_files(training)
        tuning = sections.get("tuning")
        if tuning is not None:
            errors += conflicts(tuning, training)
    tuning = sections.get("tuning")
    if vertex is not None and tuning is not None and tuning.enabled \
            and vertex.psc_network_attachment:
        # gcpc's HyperparameterTuningJobRunOp takes `network` but no PSC interface: its
        # trials would run outside the attachment.
        errors.append("tuning.parameters is set and vertex.psc_network_attachment is "
                      f"{short(vertex.psc_network_attachment)}; the tuning job's trials "
                      "cannot use a Private Service Connect interface (gcpc's tuning op "
                      "takes only vertex.network): tune without it, or use vertex.network")
    if dataset is not None:  # a cheap look at the source, before the pipeline starts
        try:
            kind_of(dataset.source).preflight(dataset.source)
        except DatasetError as exc:
            errors.append(f"dataset.source is {short(dataset.source)}: {exc}")
    if vertex is not None and warnings is not None:
        warnings += long_timeout(vertex.timeout)
    # The GPU rules apply to the pools given even when another vertex field is wrong.
    given = raw.get("vertex") if isinstance(raw.get("vertex"), Mapping) else {}
    region = given.get("region", VertexConfig().region)
    if vertex is not None:  # the primary configuration and every fallback
        gpu: Any = check_configuration(vertex, training).checked
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
        path: Optional YAML file with the sections `dataset`, `training`, `tuning`,
            `vertex`, `schedule`, `local` (`training.local_*` of earlier versions are read
            as the `local` section's, with a deprecation warning).
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
        if data == {} and warnings is not None:
            warnings.append(f"config file {str(path)!r} is empty: every setting is the "
                            "default (config.example.yaml shows them)")
        if not isinstance(data, Mapping):
            raise ConfigError([f"config file {str(path)!r} holds a {type(data).__name__}; "
                               f"expected a mapping with the sections {', '.join(SECTIONS)}"])
        if AI_PLATFORM_KEYS & set(data):
            data = _from_ai_platform(data, path, warnings)
        data = with_absolute_paths(data, Path(path).resolve().parent)
        data = without_deprecated_keys(data, str(path), warnings)
    overrides = without_deprecated_keys(overrides or {}, "overrides", warnings)
    data = _merge(data, with_absolute_paths(overrides, Path.cwd()))
    sections, errors = _sections(data)
    errors += _preflight(sections, data, warnings)
    if errors:
        raise ConfigError(errors, "invalid configuration")
    return Config(**sections)
