"""The local model registry of `run --local`: `<pipeline_root>/registry/<model name>/`.

It mirrors what Vertex AI's Model Registry keeps: numbered versions, one of them the
default (the champion), each with its metrics, its lineage and the gate's decision:

    registry.json                 {"default": "2", "versions": [{"version": "1", ...}, ...]}
    versions/<n>/COMMITTED.json   each version's SavedModel, committed
                                  (`trainer.common.committed_dirs`)
    versions/<n>/v-.../
    .runs/<pipeline job>.json     each run's decision, read by the run's summary

`registry.json` is replaced in one step, so a reader never sees it half-written.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
from pathlib import Path
from typing import Any

from components.export.model_files import LINEAGE as LINEAGE_FILE
from trainer.common import files
from trainer.common.committed_dirs import commit_directory, committed
from trainer.common.errors import InputError
from trainer.common.shell_name import command

INDEX = "registry.json"
#: Each local run's decision, by pipeline job name, for the run's summary (exit handler).
RUNS = ".runs"


class RegistryError(InputError):
    """A registry that cannot be read."""


def load(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The registry of one model (empty when it has no version yet)."""
    path = Path(model_dir) / INDEX
    if not path.is_file():
        return {"default": None, "versions": []}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RegistryError(f"{str(path)!r} is not a readable model registry: {exc}") from None


def champion(model_dir: str | os.PathLike) -> tuple[dict[str, Any], str] | None:
    """(the default version's entry, its SavedModel directory), or None without one."""
    index = load(model_dir)
    for version in index["versions"]:
        if version["version"] == index["default"]:
            saved = committed(Path(model_dir) / "versions" / version["version"])
            return (version, saved) if saved else None
    return None


def served(registry_root: str | os.PathLike, name: str, version: str = ""
           ) -> tuple[dict[str, Any], str]:
    """(a version's entry, its SavedModel directory): the default version (the champion),
    or the version named.

    Raises:
        RegistryError: No such model or version, or it holds no committed SavedModel.
    """
    model_dir = Path(registry_root) / name
    index = load(model_dir)
    if not index["versions"]:
        known = ", ".join(models(registry_root)) or "none"
        raise RegistryError(f"no model {name!r} in the local registry {str(registry_root)!r} "
                            f"(models there: {known}); `{command()} run --local` registers "
                            "the models the gate accepts")
    wanted = version or index["default"]
    for entry in index["versions"]:
        if entry["version"] == wanted:
            saved = committed(model_dir / "versions" / wanted)
            if saved is None:
                raise RegistryError(f"version {wanted} of {name!r} holds no committed "
                                    "SavedModel")
            return entry, saved
    raise RegistryError(f"{name!r} has no version {wanted!r}; its versions: "
                        + ", ".join(e["version"] for e in index["versions"]))


def register(model_dir: str | os.PathLike, saved_model: str | os.PathLike,
             metrics: dict[str, Any], lineage: dict[str, Any], decision: dict[str, Any],
             default: bool) -> dict[str, Any]:
    """Adds a version (a copy of the SavedModel); makes it the default when asked."""
    model_dir = Path(model_dir)
    index = load(model_dir)
    number = str(1 + max((int(v["version"]) for v in index["versions"]), default=0))
    with commit_directory(model_dir / "versions" / number, written_by="registry") as copy:
        shutil.copytree(saved_model, copy, dirs_exist_ok=True)
        (Path(copy) / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2) + "\n")
    entry = {"version": number,
             "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
             "metrics": metrics, "lineage": lineage, "decision": decision}
    index["versions"].append(entry)
    if default or index["default"] is None:  # a model's first version is its default
        index["default"] = number
    files.write_json(model_dir / INDEX, index)
    return entry


def run_record(registry_root: str | os.PathLike, job_name: str) -> Path:
    """Where a local run's decision (and rollout) is kept for the run's summary."""
    return Path(registry_root) / RUNS / f"{job_name}.json"


def add_to_decision(model_dir: str | os.PathLike, version: str, **facts: Any) -> None:
    """Adds `facts` (e.g. the deploy stage's rollout) to a version's decision."""
    index = load(model_dir)
    for entry in index["versions"]:
        if entry["version"] == version:
            entry["decision"] = {**entry.get("decision", {}), **facts}
    files.write_json(Path(model_dir) / INDEX, index)


def keep_streak(model_dir: str | os.PathLike, streak: dict[str, Any] | None) -> None:
    """Records the runs in a row that kept the champion (`champion_streak`; None: counted
    from zero again)."""
    from components.export.champion_streak import KEY

    index = load(model_dir)
    index[KEY] = streak
    files.write_json(Path(model_dir) / INDEX, index)


def set_default(model_dir: str | os.PathLike, version: str) -> None:
    """Makes `version` the default (the champion), as moving Vertex AI's `default` alias."""
    index = load(model_dir)
    if not any(v["version"] == version for v in index["versions"]):
        raise RegistryError(f"{str(model_dir)!r} has no version {version!r}")
    index["default"] = version
    files.write_json(Path(model_dir) / INDEX, index)


def models(registry_root: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Every model of a registry root with its index."""
    root = Path(registry_root)
    if not root.is_dir():
        return {}
    return {d.name: load(d) for d in sorted(root.iterdir()) if (d / INDEX).is_file()}


def latest(registry_root: str | os.PathLike) -> str | None:
    """The model the most recent registration went to (what a user who names no model
    means: the one their last run trained), or None with no model at all."""
    root = Path(registry_root)
    # A run writes its model's index last (the registration, the rollout's facts).
    written = {name: (root / name / INDEX).stat().st_mtime_ns
               for name, index in models(root).items() if index["versions"]}
    return max(written, key=written.__getitem__) if written else None


def describe(name: str, index: dict[str, Any]) -> list[str]:
    """The lines `models list` prints for one model: every version, the default marked."""
    lines = [f"{name}: {len(index['versions'])} version(s), default {index['default']}"]
    kept = index.get("champion_kept")
    if kept:
        lines.append(f"  the champion (version {index['default']}) kept {kept['runs']} run(s) "
                     f"in a row, since {kept['since']}")
    for entry in index["versions"]:
        decision = entry.get("decision", {})
        value = decision.get("challenger")
        mark = "*" if entry["version"] == index["default"] else " "
        lines.append(
            f" {mark} version {entry['version']}  {entry['created']}  "
            f"{decision.get('metric', '-')} {'-' if value is None else f'{value:.4f}'}  "
            f"dataset {entry['lineage']['dataset'].get('source_fingerprint')}  "
            f"{decision.get('reason', '')}")
    return lines
