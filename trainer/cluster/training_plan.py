"""The training plan: strategy, all-reduce, mixed precision and XLA, decided once for the
whole cluster from its layout and the training replicas' GPUs, with the reason for each.
The one place that chooses the distribution strategy (`choose_strategy`).

Where the training GPUs' architecture has figures measured on a real GPU
(`trainer.cluster.measured_steps`), mixed precision, XLA and NVIDIA's environment are what
measured fastest there, and the reason cites the figures; elsewhere the rules below decide
(and NVIDIA's environment stays off: it is kept only where a GPU measured it faster).

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

from trainer.cluster.accelerators import Accelerator
from trainer.cluster.measured_steps import (
    describe,
    environment_faster,
    fastest,
    measured_on,
    xla_unmeasured,
)
from trainer.cluster.roles import STRATEGIES, ClusterConfigError, Layout
from trainer.common.errors import InputError

ALL_REDUCES = ("nccl", "ring", "none")
PRECISIONS = ("float16", "bfloat16", "off")
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

    @property
    def policy(self) -> str:
        """Keras's global mixed-precision policy."""
        return POLICIES[self.mixed_precision]

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "reasons": dict(self.reasons)}

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
                   nvidia_environment=bool(data.get("nvidia_environment")))

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
                + ("; NVIDIA's environment" if self.nvidia_environment else ""))

    def describe(self) -> list[str]:
        """The decisions and their reasons, one line each."""
        values = {"strategy": self.strategy, "all_reduce": self.all_reduce,
                  "mixed_precision": self.mixed_precision, "xla": "on" if self.xla else "off",
                  "nvidia_environment": "on" if self.nvidia_environment else "off"}
        return [f"{name}: {value} ({self.reasons[name]})" if self.reasons.get(name)
                else f"{name}: {value}" for name, value in values.items()]


def requested(options: Any) -> dict[str, str]:
    """What training options (`TrainingOptions` or a section holding its fields) ask of
    the plan: `strategy`, `mixed_precision`, `xla` and `nvidia_environment`, as
    `plan_training` takes them."""
    return {name: getattr(options, name)
            for name in ("strategy", "mixed_precision", "xla", "nvidia_environment")}


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
                  reduction_server: bool = False,
                  nvidia_environment: str = "auto") -> TrainingPlan:
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
    compiled, reasons["xla"] = _xla(xla, chosen, gpu, all_reduce, problems)
    precision, reasons["mixed_precision"] = _precision(mixed_precision, chosen, gpu, problems,
                                                       compiled, nvidia_environment)
    environment, reasons["nvidia_environment"] = _environment(nvidia_environment, gpu,
                                                              precision, compiled)
    if problems:
        raise PlanError(problems)
    return TrainingPlan(chosen, all_reduce, precision, compiled, reasons,
                        accelerator=gpu.name if gpu else "", gpus_per_machine=gpus if gpu else 0,
                        reduction_server=reduction_server, nvidia_environment=environment)


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


def _precision(requested: str, chosen: str, gpu: Accelerator | None,
               problems: list[str], compiled: bool,
               environment: str = "auto") -> tuple[str, str]:
    requested = "float16" if requested == "on" else requested
    ps = chosen == "parameter_server"
    if requested == "off":
        return "off", "asked for"
    if ps and requested == "float16":
        problems.append(
            "training.mixed_precision is float16, which cannot work under "
            "ParameterServerStrategy: its loss scaling needs one variable copy per replica, "
            "and tf-keras refuses the mixed_float16 policy there; use bfloat16 (needs no loss "
            "scaling; GPUs of compute capability 8.0+) or off")
        return "off", ""
    if gpu is None:
        if requested == "auto":
            return "off", "CPUs: float16 and bfloat16 are emulated there, slower than float32"
        return requested, "asked for; on CPUs it is emulated, slower than float32"
    where = f"{gpu.name} (compute capability {gpu.capability})"
    if requested == "bfloat16" and not gpu.bfloat16:
        problems.append(f"training.mixed_precision is bfloat16, but {where} has no bfloat16 "
                        "(compute capability 8.0, Ampere, or newer); use float16 or off")
        return "off", ""
    if requested in ("float16", "bfloat16"):
        slow = "" if gpu.tensor_cores else (f"; {where} has no tensor cores, where float16 "
                                            "runs slower than float32")
        return requested, "asked for" + slow
    # Figures with NVIDIA's environment count only where the replicas may run with it.
    rows = [r for r in measured_on(gpu.architecture, gpu.name)
            if environment != "off" or not r.nvidia_environment]
    allowed = tuple(p for p in PRECISIONS if not (p == "float16" and ps)
                    and not (p == "bfloat16" and not gpu.bfloat16))
    best = fastest(rows, precisions=allowed, xla=compiled)
    if best is not None:
        return best.precision, describe(best, rows)
    if gpu.bfloat16:
        return "bfloat16", f"{where} computes bfloat16 on its tensor cores, without loss scaling"
    if ps:
        return "off", (f"{where} has no bfloat16, and float16 needs loss scaling, which "
                       "ParameterServerStrategy cannot do")
    if gpu.tensor_cores:
        return "float16", f"{where} has tensor cores (float16 with loss scaling)"
    return "off", f"{where} has no tensor cores: float16 would run slower than float32"


def _environment(requested: str, gpu: Accelerator | None, precision: str,
                 compiled: bool) -> tuple[bool, str]:
    if gpu is None:
        return False, "CPUs: its settings are for TensorFlow's GPU threads and cuDNN"
    if requested != "auto":
        return requested == "on", "asked for"
    faster, why = environment_faster(measured_on(gpu.architecture, gpu.name), precision,
                                     compiled)
    return faster, why or (f"not measured on {gpu.architecture}: off until a GPU of it "
                           "measures it faster")


def _xla(requested: str, chosen: str, gpu: Accelerator | None, all_reduce: str,
         problems: list[str]) -> tuple[bool, str]:
    if requested == "off":
        return False, "asked for"
    refusal = ""
    if chosen == "parameter_server":
        refusal = ("under ParameterServerStrategy the compiled step runs on the workers, "
                   "where an XLA cluster cannot read the variables on the parameter servers "
                   "(TensorFlow: XLA known issues)")
    elif gpu is None and all_reduce == "ring":
        refusal = ("XLA has no collectives on CPUs (\"Collectives are not yet implemented for "
                   "CPU devices when compiling with XLA\"), and the step all-reduces")
    elif gpu is not None and not gpu.xla:
        refusal = (f"TensorFlow 2.21's XLA emits PTX of CUDA 12.5, which cannot target "
                   f"{gpu.name} ({gpu.architecture}, compute capability {gpu.capability}; "
                   "tensorflow/tensorflow#111958)")
    if refusal:
        if requested == "on":
            problems.append(f"training.xla is on, but {refusal}; use xla off or auto")
        return False, refusal
    if requested == "on":
        return True, "asked for" + (" (a single CPU process: no collectives to compile)"
                                    if gpu is None else "")
    if gpu is None:
        return False, "CPUs: XLA's compile time outweighs what it saves on this work"
    rows = measured_on(gpu.architecture, gpu.name)
    with_xla = fastest(rows, precisions=PRECISIONS, xla=True)
    without = fastest(rows, precisions=PRECISIONS, xla=False)
    if without is not None and (with_xla is None or (without.images_per_second or 0)
                                > (with_xla.images_per_second or 0)):
        return False, (xla_unmeasured(rows) or "XLA off measured faster: "
                       + describe(without, rows))
    if with_xla is not None:
        return True, "XLA on measured fastest: " + describe(with_xla, rows)
    return True, ("GPUs: the step and its all-reduce are compiled together; XLA runs the "
                  "all-reduce with NCCL" if all_reduce == "nccl" else
                  "GPUs: XLA fuses the step's kernels")
