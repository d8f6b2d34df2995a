"""Results files of the GPU benchmark, read as data: what the trainer's step measured on a
real GPU, per case (precision, XLA, NVIDIA's environment, NHWC, prefetching, batch, steps
per execution), for the training plan to choose from (`trainer.cluster.measured_plan`).

A results file is what `benchmarks/gpu.py` and `gpu-pipeline benchmark` write: one machine,
one day, one model, one or more calls (`runs`), each with its `cases`. Schema 2 names the
accelerator type, the model, the image and the time at its top; schema 1 (files written
before 2026-11-28, no `schema` key) is read too: its GPU comes from the machine's device
name, its day from the file name, and its model was ResNet-50 (the only one it ran).

The files shipped with the trainer are in `trainer/cluster/measured/`; a user's are under
their measurements location (`training.measurements`: a folder or a `gs://` prefix, every
`.json` below it, whatever its sub-folder). A file that is not a results file is named and
left out, never fatal: `Measurements.problems` says which and why.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.cluster.accelerators import ACCELERATORS, accelerator_of_device
from trainer.common.errors import InputError

SCHEMA = 2
#: The files shipped with the trainer.
SHIPPED = Path(__file__).resolve().parent / "measured"
#: How a shipped file is cited (its path in the repository).
SHIPPED_CITED = "trainer/cluster/measured/"
#: The only model schema 1 files measured (benchmarks/gpu.py ran ResNet-50 alone then).
SCHEMA_1_MODEL = "resnet50"
#: Every setting the benchmark varies, recorded in each case as data (a case's name is its
#: label): two cases compare when they differ in one and agree on all the others.
SETTINGS = ("precision", "xla", "nvidia_environment", "keep_nhwc", "prefetch", "batch",
            "steps_per_execution", "input", "notriton", "autotune", "parallel", "xla_cache",
            "xla_flags")
#: XLA_FLAGS whose value is a place, not a setting (the caches' folders differ by run).
_PLACE_FLAGS = ("xla_gpu_per_fusion_autotune_cache_dir",)
_TRAINER_PRECISION = {"float32": "off", "float16": "float16", "bfloat16": "bfloat16",
                      "off": "off"}


class ResultsError(InputError):
    """A file that is not a results file this version reads; the message says why."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One measured way of running the step (one phase of one benchmark case).

    Attributes:
        name: The benchmark's case name (`trainer.benchmark.cases`).
        precision: `off`, `float16` or `bfloat16` (the plan's words).
        xla: XLA on the training step.
        nvidia_environment: NVIDIA's environment set (`training.nvidia_environment`).
        keep_nhwc: Grappler's layout optimizer off (`training.keep_nhwc`).
        prefetch: Batches prefetched to the GPU (`training.prefetch_to_gpu`).
        batch: Images per step.
        steps_per_execution: Keras's steps per execution.
        input: `synthetic` or `tfrecords`.
        notriton: XLA's GEMMs on cuBLAS instead of Triton (`--xla_gpu_enable_triton_gemm=
            false`), a benchmark switch the plan does not set.
        autotune: XLA's autotuning level, None for its default (4).
        parallel: XLA's modules compiled in parallel and linked by the driver.
        xla_cache: XLA's persistent caches used.
        xla_flags: The XLA_FLAGS the case ran with, sorted, folders left out (a flag the
            benchmark's switches do not name still tells two cases apart).
        image_size: The images' side in pixels (0: not recorded).
        images_per_second: None when the case completed no timed step.
        warmup_seconds: The warm-up's time (compilation, autotuning), if it ended.
        error: Why it has no figure ("" if it has one).
    """

    name: str
    precision: str
    xla: bool
    nvidia_environment: bool = False
    keep_nhwc: bool = False
    prefetch: bool = False
    batch: int = 256
    steps_per_execution: int = 1
    input: str = "synthetic"
    notriton: bool = False
    autotune: int | None = None
    parallel: bool = False
    xla_cache: bool = False
    xla_flags: tuple[str, ...] = ()
    image_size: int = 0
    images_per_second: float | None = None
    warmup_seconds: float | None = None
    error: str = ""

    def settings(self, leave_out: str = "") -> tuple[Any, ...]:
        """The case's settings but `leave_out` (what a comparison must agree on)."""
        return tuple(getattr(self, s) for s in SETTINGS if s != leave_out)

    @property
    def plan_can_run(self) -> bool:
        """Whether the trainer's plan can run the case as measured: no benchmark-only XLA
        switch (Triton off, another autotuning level, the driver's linking)."""
        return not self.notriton and self.autotune in (None, 4) and not self.parallel


@dataclasses.dataclass(frozen=True)
class ResultsFile:
    """One results file: one machine, one day, one model.

    Attributes:
        source: How it is cited: its repository path if shipped, else its path or URI.
        accelerator: The Vertex AI accelerator type it ran on.
        gpu: NVIDIA's name of the device.
        model: The trainer's model (`training.model`).
        measured_at: The day (or time, ISO 8601) it was measured; "" when unknown.
        user: From the user's measurements location (comes before the shipped files).
        cases: The cases, completed or not.
        image: The trainer image's digest it ran, if recorded.
        on_cpu: Run on CPUs for `accelerator` (`--allow-cpu`: a local try, or the emulated
            Vertex AI), not on the GPU: its figures come last and are said so.
    """

    source: str
    accelerator: str
    gpu: str
    model: str
    measured_at: str
    user: bool
    cases: tuple[Case, ...]
    image: str = ""
    on_cpu: bool = False

    @property
    def architecture(self) -> str:
        known = ACCELERATORS.get(self.accelerator)
        return known.architecture if known else ""


def parse_results(data: Any, source: str, *, user: bool = False) -> ResultsFile:
    """A results file's content (parsed JSON) as data.

    Raises:
        ResultsError: It is not a results file of schema 1 or 2, or names no GPU.
    """
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ResultsError("not a results file of the GPU benchmark (no `runs` list)")
    schema = data.get("schema", 1)
    if schema not in (1, SCHEMA):
        raise ResultsError(f"schema {schema!r}; this version reads schemas 1 and {SCHEMA}")
    runs = [r for r in data["runs"] if isinstance(r, dict)]
    gpu = str(data.get("gpu") or next((_device(r) for r in runs if _device(r)), ""))
    accelerator = str(data.get("accelerator") or accelerator_of_device(gpu))
    if accelerator not in ACCELERATORS:
        raise ResultsError(f"its GPU {gpu or accelerator or 'is not named'!s} is no Vertex AI "
                           "accelerator type")
    if schema == 1:
        day = re.search(r"\d{4}-\d{2}-\d{2}", source)
        model, measured_at = SCHEMA_1_MODEL, day.group(0) if day else ""
    else:
        model, measured_at = str(data.get("model") or ""), str(data.get("measured_at") or "")
        if not model or not measured_at:
            raise ResultsError("schema 2 needs `model` and `measured_at`")
    cases = tuple(case for run in runs for row in run.get("cases") or []
                  if isinstance(row, dict) and (case := _case(row, _plan_of(run))))
    return ResultsFile(source, accelerator, gpu, model, measured_at, user, cases,
                       str(data.get("image") or ""), data.get("device") == "cpu")


def _device(run: dict[str, Any]) -> str:
    machine = run.get("machine") if isinstance(run.get("machine"), dict) else {}
    check = run.get("check") if isinstance(run.get("check"), dict) else {}
    return str(check.get("device") or str(machine.get("gpu") or "").split(",")[0])


def _plan_of(run: dict[str, Any]) -> tuple[str, bool] | None:
    """The precision and XLA of the plan a run's `plan` cases ran (its check's summary)."""
    summary = str((run.get("check") or {}).get("plan") or "")
    found = re.search(r"mixed precision (\w+); XLA (on|off)", summary)
    return (found.group(1), found.group(2) == "on") if found else None


def _case(row: dict[str, Any], plan: tuple[str, bool] | None) -> Case | None:
    """A row as a case: a timed phase with its figure, or a case that stopped; None for
    the other phases (warm-up, profile) and rows this version cannot place."""
    from trainer.cluster.case_names import Case as Named
    from trainer.cluster.case_names import CaseError, parse

    error = row.get("error")
    if error is None and (row.get("phase", "timed") != "timed"
                          or not isinstance(row.get("images_per_second"), (int, float))):
        return None
    name = str(row.get("case", ""))
    try:
        # Schema 1's first file spelt two of its cases' names otherwise.
        named = parse(name.replace("-no-xla", "-noxla").replace("-tfrecords", "+tfrecords"))
    except CaseError:  # a name of another version: its row's settings alone
        named = Named(name, precision="", xla=None)
    precision = row.get("mixed_precision") or (
        _TRAINER_PRECISION.get(named.precision) if named.precision != "plan"
        else plan and plan[0])
    xla = row.get("xla") if isinstance(row.get("xla"), bool) else (
        named.xla if named.xla is not None else plan and plan[1])
    if precision not in ("off", "float16", "bfloat16") or not isinstance(xla, bool):
        return None
    return Case(
        name=name, precision=precision, xla=xla,
        nvidia_environment=bool(row.get("nvidia_environment", named.nvidia_environment)),
        keep_nhwc=bool(row.get("keep_nhwc", named.keep_nhwc)),
        prefetch=bool(row.get("prefetch", named.prefetch)),
        batch=int(row.get("batch") or named.batch or 256),
        steps_per_execution=int(row.get("steps_per_execution")
                                or named.steps_per_execution),
        input=str(row.get("input") or "synthetic"),
        notriton=bool(row.get("notriton", named.notriton)),
        autotune=row.get("autotune", named.autotune),
        parallel=bool(row.get("parallel", named.parallel)),
        xla_cache=bool(row.get("xla_cache", named.xla_cache)),
        xla_flags=_flags(str(row.get("xla_flags") or "")),
        image_size=int(row.get("image_size") or 0),
        images_per_second=None if error else float(row["images_per_second"]),
        warmup_seconds=row.get("warmup_seconds"),
        error=str(error or ""))


def _flags(text: str) -> tuple[str, ...]:
    """XLA_FLAGS as a sorted tuple, the flags that name a folder left out."""
    return tuple(sorted(f for f in text.split()
                        if f.lstrip("-").split("=", 1)[0] not in _PLACE_FLAGS))


@dataclasses.dataclass(frozen=True)
class Measurements:
    """Every results file the plan may use, and the files left out with why.

    Attributes:
        files: The readable files, the user's and the shipped ones.
        problems: One line per file or location left out.
        location: The user's measurements location ("" for none).
    """

    files: tuple[ResultsFile, ...] = ()
    problems: tuple[str, ...] = ()
    location: str = ""

    def lines(self) -> list[str]:
        """What the plan read: the user's files and the shipped ones, and each left out."""
        mine = [f for f in self.files if f.user]
        where = (f"{len(mine)} results file(s) under {self.location}" if self.location
                 else "none of yours (training.measurements and vertex.pipeline_root unset)")
        on_cpus = [f.source for f in mine if f.on_cpu]
        return [f"measurements: the training plan read {where}, then "
                f"{len(self.files) - len(mine)} shipped with the trainer ({SHIPPED_CITED})",
                *([f"measurements: {len(on_cpus)} of yours ran on CPUs and decide nothing "
                   f"for a GPU: {', '.join(on_cpus)}"] if on_cpus else []),
                *(f"measurements: warning: {problem}" for problem in self.problems)]

    def for_gpu(self, accelerator: str, model: str = "") -> list[ResultsFile]:
        """The files that speak for `accelerator`, in the order they count: the GPU's own
        before another GPU's of its architecture (standing in for it); the model's own
        before another model's, the user's before the shipped ones, the newest first. Files
        measured on CPUs are never among them: float16, bfloat16 and XLA on CPUs say
        nothing of a GPU (`on_cpu`). The plan, the budget and `validate-gpu` all read these."""
        known = ACCELERATORS.get(accelerator)
        if known is None:
            return []
        same = [f for f in self.files if not f.on_cpu and (
            f.accelerator == accelerator or f.architecture == known.architecture)]
        return sorted(same, key=lambda f: (
            stands_in(f, accelerator), bool(model) and f.model != model,
            not f.user, _negated(f.measured_at), f.source))

    def on_cpus(self, accelerator: str) -> list[ResultsFile]:
        """The files run on CPUs for `accelerator` (shown as CPU figures, deciding nothing)."""
        return [f for f in self.files if f.on_cpu and f.accelerator == accelerator]


def _same_chip(measured: str, planned: str) -> bool:
    # An H100 Mega is an H100 80GB with more network: its figures are the H100's own.
    return {measured, planned} == {"NVIDIA_H100_80GB", "NVIDIA_H100_MEGA_80GB"}


def _negated(day: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in day)


def stands_in(results: ResultsFile, accelerator: str) -> bool:
    """Whether a file's figures stand in for a GPU they did not run on."""
    return results.on_cpu or (results.accelerator != accelerator
                              and not _same_chip(results.accelerator, accelerator))


def read_folder(root: Path, *, user: bool, cited: str = "") -> tuple[list[ResultsFile],
                                                                     list[str]]:
    """Every `.json` file under a local folder, read; the ones left out, with why."""
    files, problems = [], []
    for path in sorted(root.rglob("*.json")):
        source = cited + path.name if cited else str(path)
        try:
            files.append(parse_results(json.loads(path.read_text()), source, user=user))
        except (OSError, ValueError) as exc:  # JSONDecodeError and ResultsError are ValueErrors
            problems.append(f"{source}: left out: {exc}")
    return files, problems


def shipped() -> Measurements:
    """The results files shipped with the trainer."""
    files, problems = read_folder(SHIPPED, user=False, cited=SHIPPED_CITED)
    return Measurements(tuple(files), tuple(problems))


def load(location: str = "") -> Measurements:
    """The user's results files under `location` (a local folder or a `gs://` prefix; ""
    for none) and the shipped ones. A location that cannot be read is named in `problems`
    and the shipped files are used alone: a plan never fails for its evidence."""
    base = shipped()
    if not location:
        return base
    if location.startswith("gs://"):
        files, problems = _read_gcs(location)
    elif Path(location).is_dir():
        files, problems = read_folder(Path(location), user=True)
    else:
        files, problems = [], [f"training.measurements {location!r}: no such folder; the "
                                "plan uses the shipped measurements alone"]
    return Measurements(tuple(files) + base.files, tuple(problems) + base.problems, location)


def _read_gcs(location: str) -> tuple[list[ResultsFile], list[str]]:
    """The results files under a `gs://` location, read within `bounded_read`'s limits: a
    location that gave no answer is left out for the rest of the process (a plan is made
    several times per command; a dry run on a network that drops connections still ends)."""
    from trainer.common.cloud_calls import NoAnswer, bounded_read

    if location not in _UNANSWERED:
        try:
            return bounded_read(f"training.measurements {location!r}",
                                lambda progress: _read_gcs_now(location, progress))
        except NoAnswer as exc:
            _UNANSWERED[location] = f"{exc}; the plan uses the shipped measurements alone"
    return [], [_UNANSWERED[location]]


def _read_gcs_now(location: str, progress: Callable[[], None]
                  ) -> tuple[list[ResultsFile], list[str]]:
    from trainer.common.cloud_calls import STALL_SECONDS
    from trainer.common.gcs import split_gcs_uri, storage_client

    files, problems = [], []
    try:
        bucket, prefix = split_gcs_uri(location)
        blobs = [b for b in storage_client().list_blobs(bucket, prefix=prefix.rstrip("/") + "/"
                                                        if prefix else None,
                                                        timeout=STALL_SECONDS)
                 if b.name.endswith(".json")]
    except Exception as exc:  # noqa: BLE001 -- any client failure leaves the location out
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [], [f"training.measurements {location!r} could not be listed ({first}); the "
                    "plan uses the shipped measurements alone"]
    progress()
    for blob in sorted(blobs, key=lambda b: b.name):
        uri = f"gs://{blob.bucket.name}/{blob.name}"
        key = (uri, str(blob.generation))  # an object rewritten is read again
        if key not in _READ:
            try:
                _READ[key] = parse_results(
                    json.loads(blob.download_as_bytes(timeout=STALL_SECONDS)), uri, user=True)
            except ValueError as exc:
                _READ[key] = f"{uri}: left out: {exc}"
            except Exception as exc:  # noqa: BLE001 -- one unreadable object is left out alone
                problems.append(f"{uri}: left out: could not be read ({type(exc).__name__})")
                continue
            progress()
        found = _READ[key]
        (problems if isinstance(found, str) else files).append(found)
    return files, problems


#: The objects read in this process, by URI and generation (a plan is made several times
#: per command: the location is listed each time, each object downloaded once).
_READ: dict[tuple[str, str], ResultsFile | str] = {}
#: The locations that gave no answer in this process, with the problem said of them.
_UNANSWERED: dict[str, str] = {}
