"""What others measured ResNet-50 training at, per GPU, set beside a run's own figure.

- NVIDIA DeepLearningExamples, TensorFlow/Classification/ConvNets/resnet50v1.5/README.md,
  "Training performance results" (TensorFlow 20.06-tf1-py3 NGC container, ImageNet at
  224x224, 1 GPU, images per second averaged over an epoch, XLA on), as the README reads
  since its November 2020 performance fix: DGX A100 (A100 40GB), batch 256: TF32 909,
  mixed precision 2,375 (808 and 1,770 before); DGX-1 (V100 16G): FP32 412 (batch 128),
  mixed precision 1,270 (batch 256); DGX-2 (V100 32G): FP32 432, mixed precision 1,300.
  NVIDIA publishes no TensorFlow figure for a Hopper GPU there.
- MLPerf Training v3.0, NVIDIA's closed-division ResNet-50 on one DGX H100 (8 x H100 SXM,
  MXNet with DALI, mixed precision; mlcommons/training_results_v3.0,
  NVIDIA/results/dgxh100_ngc23.04_mxnet/resnet/result_0.txt): 56,050 images/s over the 8
  GPUs (`tracked_stats` of epochs 28-35), about 7,000 per GPU. Another framework and input
  pipeline: what the hardware can do, not what TensorFlow reaches.
"""

from __future__ import annotations

from typing import Any

NVIDIA_TENSORFLOW = ("NVIDIA DeepLearningExamples, TensorFlow/Classification/ConvNets/"
                     "resnet50v1.5 README, training performance, 1 GPU, XLA, 224x224 "
                     "(TensorFlow 20.06 NGC)")
MLPERF_H100 = ("MLPerf Training v3.0, NVIDIA DGX H100 ResNet-50 (MXNet + DALI, mixed "
               "precision; mlcommons/training_results_v3.0 dgxh100_ngc23.04_mxnet): 56,050 "
               "images/s over 8 GPUs")
#: (words the NVML name holds, what the source calls the GPU, source) -> precision ->
#: images/s per GPU. "float16" stands for the source's mixed precision.
FIGURES: dict[tuple[tuple[str, ...], str, str], dict[str, float]] = {
    (("A100", "40GB"), "A100 40GB", NVIDIA_TENSORFLOW): {"off": 909.0, "float16": 2375.0},
    (("V100", "16GB"), "V100 16GB", NVIDIA_TENSORFLOW): {"off": 412.0, "float16": 1270.0},
    (("V100", "32GB"), "V100 32GB", NVIDIA_TENSORFLOW): {"off": 432.0, "float16": 1300.0},
    (("H100",), "H100 SXM", MLPERF_H100): {"float16": 7006.0, "bfloat16": 7006.0,
                                           "off": 7006.0},
}


def reference(model: str, gpu_name: str, mixed_precision: str) -> dict[str, Any] | None:
    """The published figure for `model` on the GPU NVML named `gpu_name` at the run's
    precision (`off`, `float16`, `bfloat16`), or None where none was published."""
    if model != "resnet50" or not gpu_name:
        return None
    for (words, gpu, source), by_precision in FIGURES.items():
        if all(word in gpu_name.upper() for word in words) and mixed_precision in by_precision:
            precision = "mixed precision" if mixed_precision != "off" or source == MLPERF_H100 \
                else ("TF32" if gpu.startswith("A100") else "FP32")
            return {"gpu": gpu, "precision": precision,
                    "images_per_second_per_gpu": by_precision[mixed_precision],
                    "source": source}
    return None


def line(found: dict[str, Any], measured_per_gpu: float | None) -> str:
    """The published figure beside the run's, in one line."""
    mlperf = found["source"] == MLPERF_H100
    text = (f"{'MLPerf' if mlperf else 'NVIDIA'} measured ResNet-50 at "
            f"{found['images_per_second_per_gpu']:.0f} images/s per {found['gpu']} "
            f"({found['precision']}, {'MXNet + DALI' if mlperf else 'XLA'}, 224x224)")
    if measured_per_gpu:
        text += (f"; this run {measured_per_gpu:.0f} images/s per GPU "
                 f"({measured_per_gpu / found['images_per_second_per_gpu']:.0%} of it; "
                 "smaller images or another batch size change it)")
    return text + f" [{found['source']}]"
