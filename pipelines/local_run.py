"""Runs the local pipeline with KFP's local runner (kfp.local, SubprocessRunner).

The components run as subprocesses of this Python environment, where the project is
installed; training starts its worker processes on localhost.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from components import identity
from components.identity import LOG_PREFIX
from components.ops import names
from components.stage_messages import FAILURES_ENV
from components.training.local_cluster import TENSORFLOW_CHATTER
from pipelines.config import Config
from pipelines.process_tree import stop_descendants
from trainer.common.errors import StageError, first_line

#: The local model registry's directory under the pipeline root.
REGISTRY = "registry"


class LocalRunError(StageError):
    """A stage of the local pipeline failed (its log is above the message)."""


@dataclasses.dataclass
class LocalRunResult:
    """Where a local run put everything, and what it measured."""

    pipeline_root: str
    run_dir: str
    model_uri: str
    metrics: dict[str, Any]
    artifacts: dict[str, str]
    seconds: float
    dataset_reused: bool = False
    decision: str = ""
    registered_version: str = ""
    summary: str = ""
    tuning: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        """One-line JSON summary (the last line of `gpu-pipeline run --local --json`)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


# Lines from our own stages and trainer, and KFP's task status lines, make the progress a
# person can follow; the rest (executor input JSON, artifact dumps) shows with --verbose.
_PROGRESS = re.compile(r"^\s*(" + re.escape(LOG_PREFIX) + r"|\[trainer "
                       r"|.*Task .*(started|finished with status)"
                       r"|.*Pipeline .*(started|finished with status))")
_FAILURE = re.compile(r"finished with status FAILURE")
# The same epoch again, from a replica other than the chief (shown with --verbose).
_OTHER_EPOCH = re.compile(r"^\s*\[trainer (?!chief:)[^\]]+\] epoch \d+/")
# What KFP's executor says of itself when it starts a task, and the next task's start.
_EXECUTOR = re.compile(r"^\s*\[KFP Executor .*\]: (Looking for component|Loading KFP component)")
_TASK_START = re.compile(r"Executing task '")
# The first line of a stage's error (`components.stage_messages.stage_errors`).
_STAGE_FAILED = re.compile(r"^" + re.escape(LOG_PREFIX) + r" \S[^:]* failed: ")
# KFP's executor logs its whole input as indented JSON: "Got executor_input:" ... "    }".
_INPUT_START = re.compile(r"Got executor_input:$")
_INPUT_END = re.compile(r"^ {4}\}$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _ProgressFilter:
    """A text stream that passes on only progress lines.

    The hidden lines of the running task are kept, and shown when the task fails, so a
    failure always comes with its traceback or last words, but once: not a line the
    task's progress already showed, nor TensorFlow's start-up chatter, the executor's
    input JSON or its own notices, which say nothing about why. Epoch lines of replicas
    other than the chief are hidden: the chief's say the same.
    """

    def __init__(self, target: TextIO, keep: int = 60):
        self._target = target
        self._buffer = ""
        self._hidden: collections.deque[str] = collections.deque(maxlen=keep)
        self._shown: list[str] = []  # the running task's progress lines
        self._in_executor_input = False
        self.reason = ""  # the first failed stage's own error line, once one failed

    def _failed(self) -> None:
        stated = [line for line in self._shown if _STAGE_FAILED.match(line)]
        if stated and not self.reason:
            self.reason = stated[0][len(LOG_PREFIX) + 1:]
        said = "\n".join(self._shown)
        new = [line for line in self._hidden if line.strip() not in said]
        if new:
            self._target.write("\n".join(new) + "\n")
        self._hidden.clear()

    def write(self, text: str) -> int:
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            plain = _ANSI.sub("", line).rstrip()
            if _FAILURE.search(plain):
                self._failed()
            if _TASK_START.search(plain):
                self._hidden.clear()
                self._shown.clear()
            if _PROGRESS.match(plain) and not _OTHER_EPOCH.match(plain):
                self._target.write(plain.strip() + "\n")
                self._shown.append(plain.strip())
                if "finished with status" in plain:
                    self._hidden.clear()
                    self._shown.clear()
                    self._in_executor_input = False
            elif self._in_executor_input:
                self._in_executor_input = not _INPUT_END.match(plain)
            elif _INPUT_START.search(plain):
                self._in_executor_input = True
            elif plain.strip() and not (TENSORFLOW_CHATTER.match(plain)
                                        or _EXECUTOR.match(plain)):
                self._hidden.append(plain)
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def _quiet_kfp(out: TextIO, verbose: bool) -> Iterator[_ProgressFilter | None]:
    """Routes KFP's output (stdout and its logger) through the progress filter (yielded;
    None with `verbose`)."""
    if verbose:
        yield None
        return
    stream = _ProgressFilter(out)
    handler = logging.StreamHandler(stream)
    kfp_logger = logging.getLogger("kfp")
    saved = (kfp_logger.handlers[:], kfp_logger.propagate)
    kfp_logger.handlers[:] = [handler]
    kfp_logger.propagate = False
    try:
        with contextlib.redirect_stdout(stream):
            yield stream
    finally:
        kfp_logger.handlers[:], kfp_logger.propagate = saved


@contextlib.contextmanager
def _contained(root: Path) -> Iterator[None]:
    """Keeps what a run leaves to what it is for.

    Temporary files (KFP's runner writes each component's source to a temporary directory)
    go to a private directory that is removed afterwards, and so does the file where a
    failed stage writes its first line for the run's summary
    (`components.stage_messages.FAILURES_ENV`). An interruption (SIGINT, or
    SIGTERM turned into one by the CLI) stops every process the run started, stage
    processes and trainer workers alike, and removes what the run added under the
    pipeline root (its run directory, its cache entries): it leaves no partial artifact.
    """
    cache = root / ".kfp_cache"
    before = {p for p in root.iterdir()} | ({p for p in cache.iterdir()} if cache.is_dir()
                                            else set())
    private = tempfile.mkdtemp(prefix=f"{identity.NAME}-run-")
    saved = {name: os.environ.get(name) for name in ("TMPDIR", FAILURES_ENV)}
    os.environ["TMPDIR"] = private
    os.environ[FAILURES_ENV] = os.path.join(private, "stage-failures.txt")
    try:
        yield
    except KeyboardInterrupt:
        stop_descendants()
        after = set(root.iterdir()) | (set(cache.iterdir()) if cache.is_dir() else set())
        for added in after - before:
            shutil.rmtree(added, ignore_errors=True) if added.is_dir() \
                else added.unlink(missing_ok=True)
        raise
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(private, ignore_errors=True)


def _artifacts(run_dir: Path) -> dict[str, str]:
    """Maps `<task>/<output>` to its path for every output under the run directory."""
    found = {}
    for task_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        for output in sorted(task_dir.iterdir()):
            if output.name != "executor_output.json":
                found[f"{task_dir.name}/{output.name}"] = str(output)
    return found


def _run_dir(root: Path, before: set[Path]) -> Path:
    """The directory KFP's local runner made for this run (the pipeline has no outputs to
    point at it: KFP allows none from inside an exit handler)."""
    from pipelines.pipeline import LOCAL_PIPELINE_NAME

    made = [p for p in set(root.iterdir()) - before
            if p.is_dir() and p.name.startswith(LOCAL_PIPELINE_NAME)]
    if len(made) != 1:
        raise LocalRunError(f"cannot find this run's directory under {str(root)!r} "
                            f"(new directories: {sorted(p.name for p in made)})")
    return made[0]


def _executor_output(task_dir: Path) -> dict[str, Any]:
    """What a task of the run reported (KFP's executor output)."""
    try:
        return json.loads((task_dir / "executor_output.json").read_text())
    except (OSError, ValueError) as exc:
        raise LocalRunError(f"the run's {task_dir.name} task left no readable output: "
                            f"{exc}") from None


def _summary(run_dir: Path) -> str:
    """The exit handler's run summary (written, and printed, whatever the outcome)."""
    path = run_dir / names.SUMMARIZE_RUN / names.SUMMARY
    return path.read_text() if path.is_file() else ""


def run_local(config: Config, pipeline_root: str | os.PathLike, *, verbose: bool = False,
              cache: bool = True, out: TextIO | None = None) -> LocalRunResult:
    """Runs the whole pipeline on this machine.

    Args:
        config: Validated configuration (its worker pools are validated by stage 1 too).
        pipeline_root: Directory under which the run's artifacts are written.
        verbose: Show KFP's full executor output.
        cache: Reuse a dataset prepared earlier from the unchanged source (KFP's cache
            under `<pipeline_root>/.kfp_cache`); only the dataset stage is cacheable.
        out: Where progress goes (default: stdout).

    Returns:
        The run's locations and metrics.

    Raises:
        LocalRunError: A stage failed.
    """
    from kfp import local

    from pipelines.pipeline import local_pipeline_for
    from pipelines.pipeline_arguments import local_arguments

    out = out or sys.stdout
    root = Path(pipeline_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    # Stage subprocesses inherit this: TensorFlow's C++ start-up chatter is not progress.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.monotonic()
    with warnings.catch_warnings():
        # The runner warns about any image whose name lacks "python"; ours is the project
        # image, and locally the components run in this very environment anyway.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*")
        # Display names are for the Vertex AI UI; the local runner says it ignores them.
        warnings.filterwarnings("ignore", message=".*have no effect in the current local runner.*")
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root),
                   raise_on_error=True, enable_caching=cache)
        before = set(root.iterdir())
        failure = None
        progress = None
        try:
            with _contained(root), _quiet_kfp(out, verbose) as progress:
                local_pipeline_for(config)(**local_arguments(config, str(root / REGISTRY)))
        except RuntimeError as exc:
            failure = first_line(_ANSI.sub("", str(exc)), 2000)
            if progress is not None and progress.reason:  # the stage's own words first
                failure = f"{progress.reason} ({failure})"
    run_dir = _run_dir(root, before)
    summary = _summary(run_dir)
    if failure is not None:
        _remember(root, run_dir, None, time.monotonic() - started, failure)
        raise LocalRunError(failure)
    result = _result(root, run_dir, summary, time.monotonic() - started)
    _remember(root, run_dir, result, result.seconds)
    return result


def _remember(root: Path, run_dir: Path, result: LocalRunResult | None, seconds: float,
              failure: str = "") -> None:
    """The run's line in the local runs' history (`pipelines.run_history`)."""
    from components.export.gate import compared_metric
    from pipelines import run_history
    from trainer.common import files

    dataset = (result.artifacts.get(names.artifact(names.PREPARE_DATASET, names.DATASET))
               if result else "") or ""
    manifest = files.read_json(Path(dataset) / "manifest.json", missing=None) \
        if dataset else None
    metrics = result.metrics if result else {}
    metric = compared_metric(metrics)
    run_history.record(root, {
        "run": run_dir.name, "state": "FAILED" if failure else "SUCCEEDED",
        "error": failure, "seconds": round(seconds, 1),
        "data": run_history.dataset_words(manifest), "metric": metric,
        "accuracy": metrics.get(metric), "local": True,
        "decision": run_history.decision_words(
            bool(result and _executor_output(run_dir / names.EXPORT_MODEL)
                 .get("parameterValues", {}).get("default")),
            result.registered_version if result else "", bool(result and result.decision)),
        "reason": result.decision if result else "",
        # What a Vertex AI run's Experiments run holds (`components.export.experiments`).
        "params": _params(result.model_uri) if result else {},
        "metrics": dict(metrics)})


def _params(model_uri: str) -> dict[str, Any]:
    """The run's parameters (model, data, plan, cluster) from its model's lineage."""
    from components.export.experiments import params
    from components.export.model_files import LINEAGE
    from trainer.common import files

    record = files.read_json(Path(model_uri) / LINEAGE, missing=None) if model_uri else None
    return params(record) if record else {}


def _result(root: Path, run_dir: Path, summary: str, seconds: float) -> LocalRunResult:
    """What a finished local run made: read from the export stage's executor output."""
    export = _executor_output(run_dir / names.EXPORT_MODEL)
    model = export["artifacts"]["exported_model"]["artifacts"][0]["metadata"]
    artifacts = _artifacts(run_dir)
    dataset = names.artifact(names.PREPARE_DATASET, names.DATASET)
    reused = dataset not in artifacts  # taken from KFP's cache
    if reused:
        artifacts[dataset] = model.get("dataset", "")
    return LocalRunResult(
        pipeline_root=str(root),
        run_dir=str(run_dir),
        model_uri=model["saved_model_uri"],
        metrics=dict(export["artifacts"]["metrics"]["artifacts"][0]["metadata"]),
        artifacts=artifacts,
        seconds=round(seconds, 1),
        dataset_reused=reused,
        decision=model.get("decision", ""),
        registered_version=model.get("registered_version", ""),
        summary=summary,
        tuning=_executor_output(run_dir / names.TUNE_LOCALLY)
        .get("parameterValues", {}).get("record", {})
        if (run_dir / names.TUNE_LOCALLY).is_dir() else {},
    )
