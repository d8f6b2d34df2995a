"""The training plan: strategy, all-reduce, mixed precision and XLA, decided once for the
whole cluster from its layout and the training replicas' GPUs, with the reason for each.
The one place that chooses the distribution strategy (`choose_strategy`).

Where results files of the GPU benchmark speak for the training GPUs
(`trainer.cluster.measurements`: the GPU's own, or another of its architecture standing in,
said so), mixed precision, XLA, NVIDIA's environment, NHWC and prefetching are what measured
faster there, each comparison between two cases of one file
(`trainer.cluster.measured_plan`), and the reason names the figures and the file. What no
file compares is "not measured", and the safe choice stands: XLA off, NVIDIA's environment,
NHWC and prefetching off, mixed precision where the GPU's tensor cores compute it (bfloat16
from Ampere, float16 from Volta). An option set explicitly wins; its reason says what
measured faster.

Stage 1 (GPU-config validation) makes it from the validated worker pools; it travels to
every replica as `--training-plan` and the trainer applies it (`trainer.run.distribution`)
instead of deciding from what one replica sees. A trainer started without one (by hand, on a
workstation) makes it here too, from TF_CONFIG and the GPUs it sees. Pure Python.

What TensorFlow does, read in its source (2.21):

- `MultiWorkerMirroredStrategy()` with the default `CommunicationImplementation.AUTO`
  all-reduces with its ring over gRPC through host memory, also on GPUs: NCCL is chosen
  only when `ConfigProto.experimental.collective_nccl` is set, which the strategy does only
  for `implementation=NCCL` (core/common_runtime/collective_param_resolver_local.cc,
  `AssignCollectiveType`; python/distribute/collective_all_reduce_strategy.py,
  `_update_config_proto`). So GPU clusters ask for NCCL.
- With XLA (tf-keras compiles `train_step` with `jit_compile`, inside `strategy.run`), the
  strategies skip `merge_call` on GPUs and the gradient all-reduce is compiled into the
  step: tf2xla lowers `CollectiveReduceV2` to an XLA `AllReduce`, which XLA:GPU runs with
  NCCL, and refuses any communication hint but `nccl` or `auto`
  (compiler/tf2xla/kernels/all_reduce_op.cc: "Only compiling NCCL/auto collective is
  supported"). XLA and NCCL therefore go together; XLA and the ring do not, and on CPUs
  XLA has no collectives at all ("Collectives are not yet implemented for CPU devices when
  compiling with XLA").
- Under `ParameterServerStrategy` an XLA cluster on a worker cannot read variables placed
  on `/job:ps` (TensorFlow "XLA known issues"), and tf-keras refuses `mixed_float16`,
  whose loss scaling needs one variable copy per replica
  (tf_keras/src/mixed_precision/policy.py, `strategy_supports_loss_scaling`);
  `mixed_bfloat16` needs no loss scaling.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from trainer.cluster import gpu_choices as choices
from trainer.cluster.accelerators import Accelerator
from trainer.cluster.measurements import Measurements, ResultsFile
from trainer.cluster.roles import STRATEGIES, ClusterConfigError, Layout
from trainer.common.errors import InputError

ALL_REDUCES = ("nccl", "ring", "none")
PRECISIONS = choices.PRECISIONS
STRATEGY_NAMES = ("single", "multi_worker_mirrored", "parameter_server")
#: Keras's mixed-precision policy of each precision.
POLICIES = {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16", "off": "float32"}


class PlanError(InputError):
    """Options that cannot work on the cluster; the message names each and why."""

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class StrategyError(PlanError):
    """The cluster's layout cannot run the strategy asked for."""


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """How the cluster trains, and why.

    Attributes:
        strategy: `single`, `multi_worker_mirrored` or `parameter_server`.
        all_reduce: `nccl`, `ring` (TensorFlow's over gRPC) or `none` (one replica, or
            parameter servers).
        mixed_precision: `float16`, `bfloat16` or `off`.
        xla: XLA-compile the training step.
        reasons: Why, per decision (`strategy`, `all_reduce`, `mixed_precision`, `xla`,
            `nvidia_environment`).
        accelerator: The training replicas' GPU type; "" on CPUs.
        gpus_per_machine: GPUs of each training machine.
        reduction_server: Pool 2 runs Vertex AI's Reduction Server.
        nvidia_environment: GPU replicas start TensorFlow with the environment NVIDIA's
            TensorFlow ResNet-50 sets (`trainer.run.gpu_environment`).
        keep_nhwc: GPU replicas keep the convolutions in NHWC (Grappler's layout
            optimizer off: `trainer.run.distribution.keep_nhwc`).
        prefetch_to_gpu: A machine with one GPU prefetches batches to it (a one-device
            strategy: `trainer.run.distribution.create_strategy`).
        measured: The results files behind each decision made by measurements.
    """

    strategy: str
    all_reduce: str
    mixed_precision: str
    xla: bool
    reasons: Mapping[str, str]
    accelerator: str = ""
    gpus_per_machine: int = 0
    reduction_server: bool = False
    nvidia_environment: bool = False
    keep_nhwc: bool = False
    prefetch_to_gpu: bool = False
    measured: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def policy(self) -> str:
        """Keras's global mixed-precision policy."""
        return POLICIES[self.mixed_precision]

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "reasons": dict(self.reasons),
                "measured": {k: list(v) for k, v in self.measured.items()}}

    def to_json(self) -> str:
        """The plan as the trainer's `--training-plan` value."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingPlan:
        """Reads a plan back (`to_dict`, or KFP's copy of it).

        Raises:
            PlanError: A field is missing or not one of its values.
        """
        problems = []
        for name, valid in (("strategy", STRATEGY_NAMES), ("all_reduce", ALL_REDUCES),
                            ("mixed_precision", PRECISIONS)):
            if data.get(name) not in valid:
                problems.append(f"{name} is {data.get(name)!r}; expected one of "
                                f"{', '.join(valid)}")
        if not isinstance(data.get("xla"), bool):
            problems.append(f"xla is {data.get('xla')!r}; expected true or false")
        if problems:
            raise PlanError("the training plan is not valid: " + "; ".join(problems))
        return cls(strategy=data["strategy"], all_reduce=data["all_reduce"],
                   mixed_precision=data["mixed_precision"], xla=data["xla"],
                   reasons=dict(data.get("reasons") or {}),
                   accelerator=str(data.get("accelerator") or ""),
                   gpus_per_machine=int(data.get("gpus_per_machine") or 0),
                   reduction_server=bool(data.get("reduction_server")),
                   nvidia_environment=bool(data.get("nvidia_environment")),
                   keep_nhwc=bool(data.get("keep_nhwc")),
                   prefetch_to_gpu=bool(data.get("prefetch_to_gpu")),
                   measured={str(k): tuple(v) for k, v in
                             dict(data.get("measured") or {}).items()})

    @classmethod
    def from_json(cls, text: str) -> TrainingPlan:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PlanError(f"--training-plan is not JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise PlanError("--training-plan is not a JSON object")
        return cls.from_dict(data)

    def summary(self) -> str:
        """The decisions in one line."""
        machine = (f"{self.gpus_per_machine} x {self.accelerator} per training machine"
                   if self.accelerator else "CPUs")
        return (f"{self.strategy} on {machine}; all-reduce {self.all_reduce}"
                + (" through the Reduction Server" if self.reduction_server else "")
                + f"; mixed precision {self.mixed_precision}; XLA "
                + ("on" if self.xla else "off")
                + ("; NVIDIA's environment" if self.nvidia_environment else "")
                + ("; NHWC kept" if self.keep_nhwc else "")
                + ("; prefetched to the GPU" if self.prefetch_to_gpu else ""))

    def describe(self) -> list[str]:
        """The decisions and their reasons, one line each."""
        values = {"strategy": self.strategy, "all_reduce": self.all_reduce,
                  "mixed_precision": self.mixed_precision, "xla": "on" if self.xla else "off",
                  "nvidia_environment": "on" if self.nvidia_environment else "off",
                  "keep_nhwc": "on" if self.keep_nhwc else "off",
                  "prefetch_to_gpu": "on" if self.prefetch_to_gpu else "off"}
        return [f"{name}: {value} ({self.reasons[name]})" if self.reasons.get(name)
                else f"{name}: {value}" for name, value in values.items()]


#: The training options the plan takes as they are (`requested`).
REQUESTED = ("strategy", "mixed_precision", "xla", "nvidia_environment", "keep_nhwc",
             "prefetch_to_gpu", "model")


def requested(options: Any) -> dict[str, Any]:
    """What training options (`TrainingOptions` or a section holding its fields) ask of
    the plan, as `plan_training` takes them: the options of `REQUESTED`, and the
    measurements under `measurements` (read once per location: `measurements.load`)."""
    from trainer.cluster.measurements import load

    found: dict[str, Any] = {name: getattr(options, name) for name in REQUESTED
                             if hasattr(options, name)}
    found["measurements"] = load(getattr(options, "measurements", "") or "")
    return found


def choose_strategy(layout: Layout, requested: str = "auto") -> str:
    """The distribution strategy for a layout: `parameter_server`, `multi_worker_mirrored`
    or `single` (one machine: the default or MirroredStrategy over its GPUs).

    With `auto`, parameter servers mean ParameterServerStrategy (the chief coordinates,
    workers run the steps, parameter servers hold the variables); otherwise several
    training machines mean MultiWorkerMirroredStrategy (synchronous all-reduce). An
    evaluator runs beside either. `multi_worker_mirrored` asked for explicitly leaves any
    pool-2 replicas out of training (a Reduction Server runs there).

    Raises:
        ClusterConfigError: The layout cannot run the requested strategy.
    """
    if requested not in STRATEGIES:
        raise ClusterConfigError(f"training.strategy is {requested!r}; valid values are "
                                 f"{', '.join(STRATEGIES)}")
    if layout.evaluators > 1:
        raise ClusterConfigError(f"the cluster has {layout.evaluators} evaluators; a sidecar "
                                 "evaluator is one replica (TensorFlow expects no more)")
    wants_ps = requested == "parameter_server" or (requested == "auto"
                                                   and layout.parameter_servers > 0)
    if wants_ps:
        if layout.parameter_servers < 1 or layout.workers < 1:
            raise ClusterConfigError(
                f"parameter-server training needs at least one worker and one parameter "
                f"server; the cluster has {layout.workers} worker(s) and "
                f"{layout.parameter_servers} parameter server(s)")
        return "parameter_server"
    return "multi_worker_mirrored" if layout.training_machines > 1 else "single"



def plan_training(layout: Layout, *, strategy: str = "auto", mixed_precision: str = "auto",
                  xla: str = "auto", gpu: Accelerator | None = None, gpus: int = 0,
                  devices: Callable[[str], tuple[Accelerator | None, int]] | None = None,
                  reduction_server: bool = False, nvidia_environment: str = "auto",
                  keep_nhwc: str = "auto", prefetch_to_gpu: str = "auto", model: str = "",
                  measurements: Measurements | None = None) -> TrainingPlan:
    """Decides how a cluster trains.

    Args:
        layout: The cluster's roles (training machines, parameter servers, evaluator).
        strategy: The `training.strategy` option.
        mixed_precision: `auto`, `off`, `float16` or `bfloat16` (`training.mixed_precision`).
        xla: `auto`, `on` or `off` (`training.xla`).
        gpu: The GPU type of the machines that run training steps (None: CPUs).
        gpus: GPUs per such machine.
        devices: Instead of `gpu` and `gpus`: given the strategy chosen, the GPU type and
            count of the machines that run its steps (which machines those are depends on
            the strategy: the workers alone under ParameterServerStrategy).
        reduction_server: Pool 2 runs Vertex AI's Reduction Server.
        nvidia_environment: `auto`, `on` or `off` (`training.nvidia_environment`).
        keep_nhwc: `auto`, `on` or `off` (`training.keep_nhwc`).
        prefetch_to_gpu: `auto`, `on` or `off` (`training.prefetch_to_gpu`).
        model: The model trained (`training.model`): its own measurements count first.
        measurements: The results files to decide by (None: those shipped with the
            trainer).

    Returns:
        The plan, with a reason for each decision.

    Raises:
        PlanError: The options cannot work on this cluster (every problem named);
            `StrategyError` when the layout cannot run the strategy asked for.
    """
    try:
        chosen = choose_strategy(layout, strategy)
    except ClusterConfigError as exc:
        raise StrategyError(str(exc)) from None
    if devices is not None:
        gpu, gpus = devices(chosen)
    gpu = gpu if gpus else None
    problems: list[str] = []
    reasons = {"strategy": _strategy_reason(chosen, layout, gpus)}
    all_reduce, reasons["all_reduce"] = _all_reduce(chosen, gpus, reduction_server, problems)
    files = _evidence(gpu, model, measurements)
    explicit = {"nvidia_environment": nvidia_environment, "keep_nhwc": keep_nhwc,
                "prefetch": prefetch_to_gpu}
    sources: dict[str, tuple[str, ...]] = {}

    def decide(name: str, choice: tuple[Any, str, tuple[str, ...]]) -> Any:
        value, reasons[name], found = choice
        if found:
            sources[name] = found
        return value

    refusal = _xla_refusal(chosen, gpu, all_reduce)
    single_gpu = chosen == "single" and gpus == 1
    whole = _whole(gpu, files, chosen == "parameter_server", refusal, single_gpu,
                   {"xla": xla, "mixed_precision": mixed_precision, **explicit})
    compiled = decide("xla", choices.choose_xla(xla, gpu, files, refusal, all_reduce, problems,
                                                whole))
    precision = decide("mixed_precision", choices.choose_precision(
        mixed_precision, chosen == "parameter_server", gpu, files, compiled, explicit,
        problems, whole))
    environment = decide("nvidia_environment", choices.choose_environment(
        nvidia_environment, gpu, files, compiled, explicit, precision, whole))
    decided = {"precision": precision, "nvidia_environment": environment}
    nhwc = decide("keep_nhwc", choices.choose_nhwc(keep_nhwc, gpu, files, compiled, explicit,
                                                   decided, whole))
    prefetch = decide("prefetch_to_gpu", choices.choose_prefetch(
        prefetch_to_gpu, single_gpu, gpu, files, compiled, explicit,
        {**decided, "keep_nhwc": nhwc}, whole))
    if problems:
        raise PlanError(problems)
    return TrainingPlan(chosen, all_reduce, precision, compiled, reasons,
                        accelerator=gpu.name if gpu else "", gpus_per_machine=gpus if gpu else 0,
                        reduction_server=reduction_server, nvidia_environment=environment,
                        keep_nhwc=nhwc, prefetch_to_gpu=prefetch, measured=sources)


def _whole(gpu: Accelerator | None, files: list[ResultsFile], ps: bool, refusal: str,
           single_gpu: bool, asked: dict[str, str]) -> Any:
    """The fastest case measured on the GPU that this plan may take as a whole
    (`measured_plan.fastest`): XLA only where it can work, the precisions the strategy and
    the GPU allow, what the options fix, prefetching only on one GPU."""
    from trainer.cluster import measured_plan

    if gpu is None:
        return None
    precisions = choices.allowed_precisions(ps, gpu)
    wanted = {"on": "float16"}.get(asked["mixed_precision"], asked["mixed_precision"])
    fixed = {k: v == "on" for k, v in asked.items()
             if k in ("xla", "nvidia_environment", "keep_nhwc", "prefetch") and v != "auto"}
    if refusal:
        fixed["xla"] = False
    if not single_gpu:
        fixed["prefetch"] = False

    def fits(case: Any) -> bool:
        return case.precision in precisions and wanted in ("auto", case.precision) \
            and all(getattr(case, k) == v for k, v in fixed.items())

    return measured_plan.fastest(files, gpu.name, fits)


def _evidence(gpu: Accelerator | None, model: str,
              measurements: Measurements | None) -> list[ResultsFile]:
    """The results files that speak for the training GPUs, in the order they count."""
    if gpu is None:
        return []
    from trainer.cluster.measurements import shipped

    return (measurements if measurements is not None else shipped()).for_gpu(gpu.name, model)


def _xla_refusal(chosen: str, gpu: Accelerator | None, all_reduce: str) -> str:
    """Why XLA cannot work on this cluster ("" when it can)."""
    if chosen == "parameter_server":
        return ("under ParameterServerStrategy the compiled step runs on the workers, "
                "where an XLA cluster cannot read the variables on the parameter servers "
                "(TensorFlow: XLA known issues)")
    if gpu is None and all_reduce == "ring":
        return ("XLA has no collectives on CPUs (\"Collectives are not yet implemented for "
                "CPU devices when compiling with XLA\"), and the step all-reduces")
    if gpu is not None and not gpu.xla:
        return (f"TensorFlow 2.21's XLA emits PTX of CUDA 12.5, which cannot target "
                f"{gpu.name} ({gpu.architecture}, compute capability {gpu.capability}; "
                "tensorflow/tensorflow#111958)")
    return ""


def _strategy_reason(chosen: str, layout: Layout, gpus: int) -> str:
    if chosen == "parameter_server":
        return (f"{layout.parameter_servers} parameter server(s) hold the variables, "
                f"{layout.workers} worker(s) run the steps, the chief coordinates")
    if chosen == "multi_worker_mirrored":
        return (f"{layout.training_machines} training machines keep a copy of the variables "
                "each and all-reduce the gradients in every step")
    return ("one training machine" + (f" with {gpus} GPUs: MirroredStrategy over them"
                                      if gpus > 1 else ""))


def _all_reduce(chosen: str, gpus: int, reduction_server: bool,
                problems: list[str]) -> tuple[str, str]:
    if reduction_server and (chosen != "multi_worker_mirrored" or not gpus):
        problems.append(
            "worker_pool_specs[2] runs Vertex AI's Reduction Server, which reduces NCCL "
            "all-reduces between GPU training machines (Vertex AI docs: Reduction Server "
            "prerequisites); this cluster has "
            + ("no GPUs on its training machines" if not gpus else "one training machine")
            + ": remove pool 2, or train on several GPU machines")
        return "none", ""
    if chosen == "parameter_server":
        return "none", "workers send gradients to the parameter servers; nothing is all-reduced"
    if chosen == "single":
        if gpus > 1:
            return "nccl", "MirroredStrategy all-reduces between the machine's GPUs with NCCL"
        return "none", "one replica: nothing to all-reduce"
    if gpus:
        return "nccl", ("GPUs: CommunicationOptions(implementation=NCCL); with AUTO TensorFlow "
                        "would all-reduce through host memory over gRPC"
                        + ("; the Reduction Server's NCCL plugin takes the cross-machine part"
                           if reduction_server else ""))
    return "ring", "CPUs: TensorFlow's ring all-reduce over gRPC"
