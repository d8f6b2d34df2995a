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
    """

    gpu: str
    accelerator: str
    architecture: str
    precision: str
    xla: bool
    images_per_second: float | None
    note: str
    source: str


MEASURED = (
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "off", False, 1785.5,
                 "warm-up 45.9 s for 5 steps", H200_RUN),
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "float16", False, 1636.1,
                 "warm-up 47.2 s for 5 steps", H200_RUN),
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "bfloat16", False, 1553.8,
                 "warm-up 45.9 s for 5 steps", H200_RUN),
    MeasuredStep("NVIDIA H200", "NVIDIA_H200_141GB", "Hopper", "bfloat16", True, None,
                 "XLA's warm-up did not end within 88 s (ptxas 12.9.86, one module at a "
                 "time)", H200_RUN),
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
    """The row with the most images/s of one GPU (the first listed that has figures) among
    `precisions` and, unless None, with `xla`; None when none of them was measured."""
    usable = [r for r in rows if r.images_per_second and r.precision in precisions
              and (xla is None or r.xla == xla)]
    if not usable:
        return None
    gpu = usable[0].gpu
    return max((r for r in usable if r.gpu == gpu), key=lambda r: r.images_per_second or 0)


def describe(chosen: MeasuredStep, rows: list[MeasuredStep]) -> str:
    """Why `chosen` won, with the figures it beat on the same GPU."""
    others = [r for r in rows if r.gpu == chosen.gpu and r is not chosen
              and r.images_per_second and r.xla == chosen.xla]
    against = ", ".join(f"{WORDS[r.precision]} {r.images_per_second:,.0f}" for r in others)
    return (f"{WORDS[chosen.precision]} measured fastest on an {chosen.gpu}: "
            f"{chosen.images_per_second:,.0f} images/s"
            + (f" against {against}" if against else "")
            + f", the trainer's ResNet-50 at batch 256 with XLA "
            f"{'on' if chosen.xla else 'off'} [{chosen.source}]")


def xla_unmeasured(rows: list[MeasuredStep]) -> str:
    """Why XLA stays off where it was tried and never completed a step ("" if it did)."""
    failed = [r for r in rows if r.xla and r.images_per_second is None]
    if not failed or any(r.xla and r.images_per_second for r in rows):
        return ""
    return (f"no XLA step has been measured on {rows[0].architecture}: "
            + "; ".join(f"on an {r.gpu}, {r.note}" for r in failed)
            + f" [{', '.join(sorted({r.source for r in failed}))}]")
