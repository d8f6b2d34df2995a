"""What the trainer's step measured on real GPUs, per precision and XLA: the table the
training plan chooses from where a GPU's architecture has figures. Pure data.

Each row is one case of `benchmarks/gpu.py` (the trainer's ResNet-50 at 224x224, 1,000
classes, batch 256 on one GPU, synthetic uint8 batches, after a timed warm-up) as its
results file in `benchmarks/measured/` records it. A row without images/s is a case that
never completed a step, with why. Only cases that ran are here: what was not measured is
decided by the plan's rules (`trainer.cluster.training_plan`), not guessed.
"""

from __future__ import annotations

import dataclasses

H100_RUN = "benchmarks/measured/gpu-h100-2026-11-26.json"
H200_RUN = "benchmarks/measured/gpu-h200-2026-11-26.json"
H200_SECOND_RUN = "benchmarks/measured/gpu-h200-2026-11-27.json"


@dataclasses.dataclass(frozen=True)
class MeasuredStep:
    """One measured case.

    Attributes:
        gpu: The GPU it ran on (NVIDIA's name).
        accelerator: Its Vertex AI accelerator type.
        architecture: Its architecture (`trainer.cluster.accelerators`), which the plan
            matches.
        precision: `off`, `float16` or `bfloat16` (the plan's words).
        xla: XLA on the training step.
        images_per_second: Training images per second, or None when no step completed.
        note: Why there is no figure, or what else matters (the warm-up).
        source: The results file.
        nvidia_environment: Run with the environment NVIDIA's TensorFlow ResNet-50 sets
            (`trainer.run.gpu_environment.NVIDIA_ENVIRONMENT`).
    """

    gpu: str
    accelerator: str
    architecture: str
    precision: str
    xla: bool
    images_per_second: float | None
    note: str
    source: str
    nvidia_environment: bool = False


MEASURED = (
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "float16", False, 2704.6,
                 "warm-up 37.0 s for 5 steps; GPU busy 78%", H200_SECOND_RUN, True),
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "off", False, 2004.7,
                 "warm-up 39.4 s for 5 steps", H200_SECOND_RUN, True),
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "off", False, 1783.9,
                 "warm-up 43.9 s for 5 steps; 1,760 images/s through TFRecords",
                 H200_SECOND_RUN),
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "float16", False, 1636.1,
                 "warm-up 47.2 s for 5 steps", H200_RUN),
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "bfloat16", False, 1553.8,
                 "warm-up 45.9 s for 5 steps", H200_RUN),
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "bfloat16", True, None,
                 "XLA's warm-up did not end within 210 s (ptxas 12.9.86, one module at a "
                 "time, also when asked to compile in parallel)", H200_SECOND_RUN),
    MeasuredStep("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB", "Hopper", "off", False, 1525.2,
                 "warm-up 42.8 s for 5 steps", H100_RUN),
    MeasuredStep("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB", "Hopper", "bfloat16", False, 1476.8,
                 "warm-up 40.3 s for 5 steps", H100_RUN),
    MeasuredStep("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB", "Hopper", "bfloat16", True, None,
                 "XLA's warm-up did not end within 200 s (ptxas 12.5.82)", H100_RUN),
)

WORDS = {"off": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def measured_on(architecture: str, accelerator: str = "") -> list[MeasuredStep]:
    """The rows of one architecture: the `accelerator`'s own first, then the others as
    listed (the newest GPU first)."""
    rows = [row for row in MEASURED if row.architecture == architecture]
    return sorted(rows, key=lambda row: row.accelerator != accelerator)


def fastest(rows: list[MeasuredStep], *, precisions: tuple[str, ...],
            xla: bool | None) -> MeasuredStep | None:
    """The row with the most images/s among `precisions` and, unless None, with `xla`, on
    one GPU: the one with the most such rows measured (the first listed of those), since
    figures of two GPUs, measured on different machines, are never compared; None when
    none of them was measured."""
    usable = [r for r in rows if r.images_per_second and r.precision in precisions
              and (xla is None or r.xla == xla)]
    if not usable:
        return None
    gpus = list(dict.fromkeys(r.gpu for r in usable))
    gpu = max(gpus, key=lambda g: sum(r.gpu == g for r in usable))
    return max((r for r in usable if r.gpu == gpu), key=lambda r: r.images_per_second or 0)


def label(row: MeasuredStep) -> str:
    """A row's precision, and NVIDIA's environment where it ran with it."""
    return WORDS[row.precision] + (" with NVIDIA's environment" if row.nvidia_environment
                                   else "")


def describe(chosen: MeasuredStep, rows: list[MeasuredStep]) -> str:
    """Why `chosen` won, with the figures it beat on the same GPU."""
    others = [r for r in rows if r.gpu == chosen.gpu and r is not chosen
              and r.images_per_second and r.xla == chosen.xla]
    against = ", ".join(f"{label(r)} {r.images_per_second:,.0f}" for r in others)
    sources = ", ".join(dict.fromkeys(r.source for r in [chosen, *others]))
    return (f"{label(chosen)} measured fastest on an {chosen.gpu}: "
            f"{chosen.images_per_second:,.0f} images/s"
            + (f" against {against}" if against else "")
            + f", the trainer's ResNet-50 at batch 256 with XLA "
            f"{'on' if chosen.xla else 'off'} [{sources}]")


def environment_pairs(rows: list[MeasuredStep]) -> list[tuple[MeasuredStep, MeasuredStep]]:
    """(with NVIDIA's environment, without) for each precision and XLA setting one GPU
    measured both ways."""
    return [(on, off) for on in rows if on.nvidia_environment and on.images_per_second
            for off in rows if not off.nvidia_environment and off.images_per_second
            and (off.gpu, off.precision, off.xla) == (on.gpu, on.precision, on.xla)]


def environment_faster(rows: list[MeasuredStep], precision: str, xla: bool) -> tuple[bool, str]:
    """Whether NVIDIA's environment measured faster on this architecture, and why: it must
    have been faster in every pair measured both ways. The pair of the plan's `precision`
    and `xla` is cited first."""
    pairs = sorted(environment_pairs(rows),
                   key=lambda p: (p[0].precision, p[0].xla) != (precision, xla))
    if not pairs:
        return False, ""
    faster = all((on.images_per_second or 0) > (off.images_per_second or 0)
                 for on, off in pairs)
    figures = "; ".join(f"{WORDS[on.precision]} {on.images_per_second:,.0f} images/s with it "
                        f"against {off.images_per_second:,.0f} without on an {on.gpu}"
                        for on, off in pairs)
    sources = ", ".join(dict.fromkeys(r.source for pair in pairs for r in pair))
    return faster, (f"NVIDIA's environment measured {'faster' if faster else 'no faster'}: "
                    f"{figures} [{sources}]")


def xla_unmeasured(rows: list[MeasuredStep]) -> str:
    """Why XLA stays off where it was tried and never completed a step ("" if it did)."""
    failed = [r for r in rows if r.xla and r.images_per_second is None]
    if not failed or any(r.xla and r.images_per_second for r in rows):
        return ""
    return (f"no XLA step has been measured on {rows[0].architecture}: "
            + "; ".join(f"on an {r.gpu}, {r.note}" for r in failed)
            + f" [{', '.join(sorted({r.source for r in failed}))}]")
