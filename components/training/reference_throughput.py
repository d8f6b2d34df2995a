"""What NVIDIA measured ResNet-50 training at, per GPU, set beside a run's own figure.

NVIDIA DeepLearningExamples, TensorFlow/Classification/ConvNets/resnet50v1.5/README.md,
"Training performance results" (TensorFlow 20.06-tf1-py3 NGC container, ImageNet at
224x224, 1 GPU, images per second averaged over an epoch, XLA on):
- DGX A100 (A100 40GB), batch 256 per GPU: TF32 808, mixed precision 1770;
- DGX-1 (V100 16G): FP32 412 (batch 128), mixed precision 1270 (batch 256);
- DGX-2 (V100 32G): FP32 432 (batch 128), mixed precision 1300 (batch 256).
No other GPU, no bfloat16, and no other model has a figure there.
"""

from __future__ import annotations

from typing import Any

SOURCE = ("NVIDIA DeepLearningExamples, TensorFlow/Classification/ConvNets/resnet50v1.5 "
          "README, training performance, 1 GPU, XLA, 224x224 (TensorFlow 20.06 NGC)")
#: (words the NVML name holds, what NVIDIA calls the GPU) -> precision -> images/s
FIGURES: dict[tuple[tuple[str, ...], str], dict[str, float]] = {
    (("A100", "40GB"), "A100 40GB"): {"off": 808.0, "float16": 1770.0},
    (("V100", "16GB"), "V100 16GB"): {"off": 412.0, "float16": 1270.0},
    (("V100", "32GB"), "V100 32GB"): {"off": 432.0, "float16": 1300.0},
}


def reference(model: str, gpu_name: str, mixed_precision: str) -> dict[str, Any] | None:
    """NVIDIA's figure for `model` on the GPU NVML named `gpu_name` at the run's precision
    (`off`, `float16`, `bfloat16`), or None where NVIDIA published none."""
    if model != "resnet50" or not gpu_name:
        return None
    for (words, gpu), by_precision in FIGURES.items():
        if all(word in gpu_name.upper() for word in words) and mixed_precision in by_precision:
            precision = "mixed precision" if mixed_precision == "float16" else \
                ("TF32" if gpu.startswith("A100") else "FP32")
            return {"gpu": gpu, "precision": precision,
                    "images_per_second_per_gpu": by_precision[mixed_precision],
                    "source": SOURCE}
    return None


def line(found: dict[str, Any], measured_per_gpu: float | None) -> str:
    """NVIDIA's figure beside the run's, in one line."""
    text = (f"NVIDIA measured ResNet-50 at {found['images_per_second_per_gpu']:.0f} images/s "
            f"per {found['gpu']} ({found['precision']}, XLA, 224x224)")
    if measured_per_gpu:
        text += (f"; this run {measured_per_gpu:.0f} images/s per GPU "
                 f"({measured_per_gpu / found['images_per_second_per_gpu']:.0%} of it; "
                 "smaller images or another batch size change it)")
    return text + f" [{found['source']}]"
