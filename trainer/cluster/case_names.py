"""The benchmark's case names: what one case of the GPU benchmark is, read from its name
(`trainer.benchmark.cases` runs it; results files record it, and
`trainer.cluster.measurements` reads their cases back by it). Pure Python.

A case is named `PRECISION[-xla|-noxla][+OPTION]...`:
- PRECISION: `plan` (what the training plan chooses for the GPU: XLA and NVIDIA's
  environment included), `float32`,
  `float16` (with dynamic loss scaling) or `bfloat16`;
- `-xla` / `-noxla`: XLA on the training step, or not (the plan's choice when left out);
- options: `bN` (batch N per step), `speN` (Keras's `steps_per_execution`), `nvenv` (the
  environment NVIDIA's TensorFlow ResNet-50 sets: `training.nvidia_environment`), `prefetch`
  (batches prefetched to the GPU: `training.prefetch_to_gpu`), `nhwc` (the convolutions
  kept in NHWC, Grappler's layout optimizer off: `training.keep_nhwc`), `tfrecords` (after the
  synthetic batches, the same model through the trainer's input pipeline), `profile` (a
  TensorFlow profiler trace, summarised by `trainer.run.profile_summary`), `parallel` (XLA
  compiles its LLVM modules in parallel, linking with nvlink or the driver), `notriton`
  (XLA's GEMMs on cuBLAS instead of Triton fusions, `--xla_gpu_enable_triton_gemm=false`:
  AlphaFold 3's "compilation time workaround", google-deepmind/alphafold3
  docs/performance.md; the H200 run of 2026-11-26 stopped in XLA's Triton GEMM autotuner,
  "could not compile any configs"), `autotuneN` (XLA's autotuning level N, 0-4; 4 is its
  default) and `cache` (XLA's persistent caches, `trainer.run.xla_compile`: the case runs
  twice, a cold start that fills them and a warm one that reads them).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from trainer.common.errors import InputError

PRECISIONS = ("plan", "float32", "float16", "bfloat16")
#: The trainer's precision word for each of the benchmark's.
TRAINER_PRECISION = {"float32": "off", "float16": "float16", "bfloat16": "bfloat16"}
#: The options without a number -> the `Case` field each turns on.
SWITCHES = {"nvenv": "nvidia_environment", "prefetch": "prefetch", "nhwc": "keep_nhwc",
            "tfrecords": "tfrecords", "profile": "profile", "parallel": "parallel",
            "notriton": "notriton", "cache": "xla_cache"}

class CaseError(InputError):
    """A case name that does not parse."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One way to run the trainer's step (see the module docstring)."""

    name: str
    precision: str = "plan"
    xla: bool | None = None
    batch: int | None = None
    steps_per_execution: int = 1
    nvidia_environment: bool = False
    prefetch: bool = False
    keep_nhwc: bool = False
    tfrecords: bool = False
    profile: bool = False
    parallel: bool = False
    notriton: bool = False
    xla_cache: bool = False
    autotune: int | None = None


def parse(name: str) -> Case:
    """The case a name describes.

    Raises:
        CaseError: naming the part that is not valid and what is.
    """
    head, *options = name.split("+")
    precision, _, compiled = head.partition("-")
    if precision not in PRECISIONS or compiled not in ("", "xla", "noxla"):
        raise CaseError(f"case {name!r}: {head!r} is not PRECISION[-xla|-noxla] with "
                        f"PRECISION one of {', '.join(PRECISIONS)}")
    fields: dict[str, Any] = {"xla": {"": None, "xla": True, "noxla": False}[compiled]}
    for option in options:
        number = re.fullmatch(r"(b|spe|autotune)(\d+)", option)
        if number and (int(number.group(2)) > 0 or number.group(1) == "autotune") \
                and (number.group(1) != "autotune" or int(number.group(2)) <= 4):
            key = {"b": "batch", "spe": "steps_per_execution"}.get(number.group(1), "autotune")
            fields[key] = int(number.group(2))
        elif option in SWITCHES:
            fields[SWITCHES[option]] = True
        else:
            raise CaseError(f"case {name!r}: option {option!r} is not one of bN, speN, "
                            f"{', '.join(SWITCHES)}, autotuneN (N 0-4)")
    return Case(name, precision, **fields)
