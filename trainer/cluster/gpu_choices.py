"""The training plan's choices for the GPUs that run the steps: XLA, mixed precision,
NVIDIA's environment, NHWC and prefetching, each from the measurements where a results file
compares it (`trainer.cluster.measured_plan`), else by the rules below, said "not
measured". Each returns `(value, reason, files)`; a value that cannot work is added to
`problems` (`trainer.cluster.training_plan.plan_training` raises them together).

The rules where nothing was measured (the safe choices):

- XLA off: no XLA step has completed on any GPU measured so far (a warm-up ran past 200 s
  on an H100 and an H200, in XLA's Triton GEMM autotuner and ptxas), so a first run on an
  unmeasured GPU could sit in compilation.
- Mixed precision where the tensor cores compute it: bfloat16 from compute capability 8.0
  (Ampere; no loss scaling), float16 from 7.0 (Volta; loss scaling), float32 below (NVIDIA's
  mixed-precision training guide; TensorFlow's mixed-precision guide).
- NVIDIA's environment, NHWC and prefetching off: TensorFlow's defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trainer.cluster import measured_plan as measured
from trainer.cluster.accelerators import Accelerator
from trainer.cluster.measurements import Case, ResultsFile

PRECISIONS = ("float16", "bfloat16", "off")
Choice = tuple[bool | str, str, tuple[str, ...]]


def _where(compiled: bool, explicit: dict[str, str]) -> Callable[[Case], bool]:
    """Cases run as the plan will: XLA as decided, each switch asked for explicitly as
    asked (`explicit`: case setting -> `on`/`off`/`auto`)."""
    fixed = {name: value == "on" for name, value in explicit.items() if value != "auto"}
    return lambda c: c.xla == compiled and all(getattr(c, k) == v for k, v in fixed.items())


def _not_measured(gpu: Accelerator) -> str:
    return f"not measured on {gpu.name}"


def choose_xla(requested: str, gpu: Accelerator | None, files: Sequence[ResultsFile],
               refusal: str, all_reduce: str, problems: list[str],
               whole: measured.Whole | None = None) -> Choice:
    """XLA: refused where it cannot work (`refusal`), else as the fastest case measured on
    the GPU has it (`whole`) when its file tried XLA, else as compared, else off."""
    if requested == "off":
        return False, "asked for", ()
    if refusal:
        if requested == "on":
            problems.append(f"training.xla is on, but {refusal}; use xla off or auto")
        return False, refusal, ()
    if gpu is None:
        if requested == "on":
            return True, "asked for (a single CPU process: no collectives to compile)", ()
        return False, "CPUs: XLA's compile time outweighs what it saves on this work", ()
    name = gpu.name
    if requested == "auto" and whole is not None and whole.decides("xla"):
        failed = None if whole.case.xla else measured.xla_failures([whole.results], name)
        if failed is not None:
            return False, failed.reason, failed.sources
        return whole.case.xla, whole.reason("xla", name), (whole.results.source,)
    files = measured.deciding(files, name, "xla")
    compared = measured.compare(files, name, "xla", True, False)
    found = (measured.Finding(compared.winner, "measured "
                              + ("faster: " if compared.winner else "slower: ") + compared.said(),
                              (compared.results.source,))
             if compared is not None and compared.winner is not None
             else measured.xla_failures(files, name))
    if requested == "on":
        slower = f"; {found.reason}" if found is not None and not found.value else ""
        return True, "asked for" + slower, found.sources if slower else ()
    if found is not None:
        return found.value, found.reason, found.sources
    return False, (f"{_not_measured(gpu)}: off, the safe choice, until a measurement of this "
                   "GPU shows it faster (`gpu-pipeline benchmark`)"
                   + ("; with it, the step's all-reduce would be compiled with NCCL"
                      if all_reduce == "nccl" else "")), ()


def allowed_precisions(ps: bool, gpu: Accelerator) -> tuple[str, ...]:
    """The precisions the strategy and the GPU can run: no float16 under
    ParameterServerStrategy (its loss scaling), bfloat16 from compute capability 8.0."""
    return tuple(p for p in PRECISIONS if not (p == "float16" and ps)
                 and not (p == "bfloat16" and not gpu.bfloat16))


def choose_precision(requested: str, ps: bool, gpu: Accelerator | None,
                     files: Sequence[ResultsFile], compiled: bool, explicit: dict[str, str],
                     problems: list[str], whole: measured.Whole | None = None) -> Choice:
    """Mixed precision: what the strategy and GPU allow, as the fastest case measured on
    the GPU has it (`whole`) when its file compared precisions, else as compared, else by
    the rules."""
    requested = "float16" if requested == "on" else requested
    if requested == "off" and gpu is None:
        return "off", "asked for", ()
    if ps and requested == "float16":
        problems.append(
            "training.mixed_precision is float16, which cannot work under "
            "ParameterServerStrategy: its loss scaling needs one variable copy per replica, "
            "and tf-keras refuses the mixed_float16 policy there; use bfloat16 (needs no loss "
            "scaling; GPUs of compute capability 8.0+) or off")
        return "off", "", ()
    if gpu is None:
        if requested == "auto":
            return "off", "CPUs: float16 and bfloat16 are emulated there, slower than float32", ()
        return requested, "asked for; on CPUs it is emulated, slower than float32", ()
    where = f"{gpu.name} (compute capability {gpu.capability})"
    if requested == "bfloat16" and not gpu.bfloat16:
        problems.append(f"training.mixed_precision is bfloat16, but {where} has no bfloat16 "
                        "(compute capability 8.0, Ampere, or newer); use float16 or off")
        return "off", "", ()
    allowed = allowed_precisions(ps, gpu)
    cases = _where(compiled, explicit)
    if requested == "auto" and whole is not None and whole.decides("precision"):
        return whole.case.precision, whole.reason("precision", gpu.name), \
            (whole.results.source,)
    files = measured.deciding(files, gpu.name, "precision")
    best = measured.best_of(files, gpu.name, "precision", allowed, cases)
    if requested in PRECISIONS:
        slow = "" if gpu.tensor_cores or requested == "off" else (
            f"; {where} has no tensor cores, where float16 runs slower than float32")
        faster = measured.against(files, gpu.name, "precision", requested, best, cases)
        return requested, "asked for" + slow + faster, best.sources if faster and best else ()
    if best is not None:
        return best.value, best.reason, best.sources
    unmeasured = _not_measured(gpu)
    if gpu.bfloat16:
        return "bfloat16", (f"{unmeasured}: {where} computes bfloat16 on its tensor cores, "
                            "without loss scaling"), ()
    if ps:
        return "off", (f"{unmeasured}: {where} has no bfloat16, and float16 needs loss "
                       "scaling, which ParameterServerStrategy cannot do"), ()
    if gpu.tensor_cores:
        return "float16", f"{unmeasured}: {where} has tensor cores (float16 with loss scaling)", ()
    return "off", f"{unmeasured}: {where} has no tensor cores: float16 would run slower", ()


def choose_switch(setting: str, requested: str, gpu: Accelerator | None,
                  files: Sequence[ResultsFile], compiled: bool, explicit: dict[str, str],
                  decided: dict[str, object], default: str,
                  whole: measured.Whole | None = None) -> Choice:
    """NVIDIA's environment, NHWC or prefetching (`setting`, the cases' word): as the
    fastest case measured on the GPU has it (`whole`) when its file ran it both ways, else
    on where it measured faster, in the pairs at the plan's other choices (`decided`) when
    the file has any; `default` is the reason when nothing compared it."""
    if requested == "auto" and gpu is not None and whole is not None and whole.decides(setting):
        return getattr(whole.case, setting), whole.reason(setting, gpu.name), \
            (whole.results.source,)
    cases = _where(compiled, {k: v for k, v in explicit.items() if k != setting})
    if gpu is not None:
        files = measured.deciding(files, gpu.name, setting)

    def prefer(case: Case) -> int:  # how many of the plan's other choices a case shares
        return sum(getattr(case, k) == v for k, v in decided.items())

    compared = measured.compare(files, gpu.name, setting, True, False, cases, prefer) \
        if gpu is not None else None
    winner = compared.winner if compared is not None else None
    if requested != "auto":
        faster = (f"; {'on' if winner else 'off'} measured faster: {compared.said()}"
                  if compared is not None and winner is not None
                  and winner != (requested == "on") else "")
        return requested == "on", "asked for" + faster, \
            (compared.results.source,) if faster else ()
    if compared is None:
        return False, default, ()
    if winner is None:
        return False, f"off until it measures faster: {compared.said()}", \
            (compared.results.source,)
    return winner, f"measured {'faster' if winner else 'slower'}: {compared.said()}", \
        (compared.results.source,)


def choose_environment(requested: str, gpu: Accelerator | None, files: Sequence[ResultsFile],
                       compiled: bool, explicit: dict[str, str], precision: str,
                       whole: measured.Whole | None = None) -> Choice:
    if gpu is None:
        return False, "CPUs: its settings are for TensorFlow's GPU threads and cuDNN", ()
    return choose_switch("nvidia_environment", requested, gpu, files, compiled, explicit,
                         {"precision": precision},
                         f"{_not_measured(gpu)}: off until a measurement of this GPU shows "
                         "it faster", whole)


def choose_nhwc(requested: str, gpu: Accelerator | None, files: Sequence[ResultsFile],
                compiled: bool, explicit: dict[str, str], decided: dict[str, object],
                whole: measured.Whole | None = None) -> Choice:
    if gpu is None:
        return False, "CPUs: Grappler's layout optimizer moves GPU convolutions only", ()
    anyway = ("" if decided["precision"] == "off" else
              f"; TensorFlow keeps {decided['precision']} convolutions in NHWC either way "
              "(generic_layout_optimizer.cc)")
    return choose_switch("keep_nhwc", requested, gpu, files, compiled, explicit, decided,
                         f"{_not_measured(gpu)}: off (Grappler's layout) until a measurement "
                         "shows it faster" + anyway, whole)


def choose_prefetch(requested: str, single_gpu: bool, gpu: Accelerator | None,
                    files: Sequence[ResultsFile], compiled: bool, explicit: dict[str, str],
                    decided: dict[str, object], whole: measured.Whole | None = None) -> Choice:
    if gpu is None:
        return False, "CPUs: no GPU to prefetch to", ()
    if not single_gpu:
        return False, ("it applies to one machine with one GPU (a one-device strategy); "
                       "this cluster's strategy places its batches itself"), ()
    return choose_switch("prefetch", requested, gpu, files, compiled, explicit, decided,
                         f"{_not_measured(gpu)}: off until a measurement shows it faster",
                         whole)
