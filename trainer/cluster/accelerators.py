"""What each GPU type Vertex AI offers is to TensorFlow: its compute capability, and what
that capability allows (tensor cores, bfloat16, XLA). Pure data, no TensorFlow.

The training plan (`trainer.cluster.training_plan`) decides mixed precision and XLA from these
facts for the training replicas' GPU type; the GPU validator (`components.gpu`) refuses the
types the trainer image cannot serve. Sources:

- compute capabilities: NVIDIA's CUDA GPUs page (developer.nvidia.com/cuda-gpus);
- tensor cores from 7.0 (Volta): Keras's mixed-precision guide and its device check
  (tf_keras/src/mixed_precision/device_compatibility_check.py warns below 7.0: float16
  "may run slowly");
- bfloat16 from 8.0 (Ampere): NVIDIA's A100 whitepaper; TensorFlow's guide to mixed
  precision ("bfloat16 ... on GPUs with compute capability 8.0 or higher");
- XLA: TensorFlow 2.21's XLA emits PTX for the CUDA it was built with (12.5, PTX ISA 8.5),
  which has no target above sm_90: "LLVM ERROR: PTX version 8.5 does not support target
  'sm_100'" (tensorflow/tensorflow#111958), whatever CUDA is installed;
- peak TFLOPS, only to say which of two cards is slower: NVIDIA's datasheets, dense
  (without sparsity) FP16 on the tensor cores, FP32 where there are none (K80 for both
  of its GPUs, P4, P100 PCIe); V100 SXM2, A100 and H100/H200 SXM; an order, not a
  prediction of training speed.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """A GPU type as TensorFlow sees it.

    Attributes:
        name: The Vertex AI accelerator type (or a description of a GPU TensorFlow sees).
        architecture: NVIDIA's architecture name.
        compute_capability: (major, minor).
    """

    name: str
    architecture: str
    compute_capability: tuple[int, int]
    peak_tflops: float = 0.0
    no_xla: bool = False  # set when standing in for several GPUs, one without XLA

    @property
    def capability(self) -> str:
        """`7.5`."""
        return "{}.{}".format(*self.compute_capability)

    @property
    def tensor_cores(self) -> bool:
        """Tensor cores (compute capability 7.0+): float16 matrix work runs fast."""
        return self.compute_capability >= (7, 0)

    @property
    def bfloat16(self) -> bool:
        """bfloat16 in hardware (compute capability 8.0+, Ampere)."""
        return self.compute_capability >= (8, 0)

    @property
    def xla(self) -> bool:
        """Whether TensorFlow 2.21's XLA can compile for it (up to sm_90, Hopper)."""
        return not self.no_xla and self.compute_capability <= XLA_MAX_CAPABILITY


#: The newest compute capability TensorFlow 2.21's XLA can target (module docstring).
XLA_MAX_CAPABILITY = (9, 0)

_ARCHITECTURES = {(3, 7): "Kepler", (6, 0): "Pascal", (6, 1): "Pascal", (7, 0): "Volta",
                  (7, 5): "Turing", (8, 0): "Ampere", (8, 9): "Ada Lovelace", (9, 0): "Hopper",
                  (10, 0): "Blackwell"}


def _accelerator(name: str, major: int, minor: int, tflops: float) -> tuple[str, Accelerator]:
    return name, Accelerator(name, _ARCHITECTURES[(major, minor)], (major, minor), tflops)


#: Every accelerator type of `components.gpu.catalog`, by its Vertex AI name (a test checks
#: that the two lists agree).
ACCELERATORS = dict([
    _accelerator("NVIDIA_TESLA_K80", 3, 7, 8.7),
    _accelerator("NVIDIA_TESLA_P4", 6, 1, 5.5),
    _accelerator("NVIDIA_TESLA_P100", 6, 0, 9.3),
    _accelerator("NVIDIA_TESLA_V100", 7, 0, 125),
    _accelerator("NVIDIA_TESLA_T4", 7, 5, 65),
    _accelerator("NVIDIA_TESLA_A100", 8, 0, 312),
    _accelerator("NVIDIA_A100_80GB", 8, 0, 312),
    _accelerator("NVIDIA_L4", 8, 9, 121),
    _accelerator("NVIDIA_H100_80GB", 9, 0, 989),
    _accelerator("NVIDIA_H100_MEGA_80GB", 9, 0, 989),
    _accelerator("NVIDIA_H200_141GB", 9, 0, 989),
    _accelerator("NVIDIA_B200", 10, 0, 2250),
    _accelerator("NVIDIA_GB200", 10, 0, 2500),
])


#: NVIDIA's device names, whole, as NVML (`nvidia-smi`) and TensorFlow report them on the
#: machines Vertex AI runs, -> the accelerator type each is. Where a chip comes in several
#: memories or forms the name says which ("A100-SXM4-40GB", "V100-SXM2-16GB"), so a name
#: identifies one card; any other name (a Tesla P40, an L40 or L40S, an H100 PCIe or NVL,
#: an A100 PCIe, a V100 with 32 GB, a MIG slice) is no Vertex AI type and stands in for
#: none. An a3-megagpu's H100s are the a3-highgpu's chip (more network, the same device):
#: their files count for both (`measurements.stands_in`).
DEVICE_NAMES = {
    "Tesla K80": "NVIDIA_TESLA_K80",
    "Tesla P4": "NVIDIA_TESLA_P4",
    "Tesla P100-PCIE-16GB": "NVIDIA_TESLA_P100",
    "Tesla V100-SXM2-16GB": "NVIDIA_TESLA_V100",
    "Tesla T4": "NVIDIA_TESLA_T4",
    "NVIDIA A100-SXM4-40GB": "NVIDIA_TESLA_A100",
    "NVIDIA A100-SXM4-80GB": "NVIDIA_A100_80GB",
    "NVIDIA L4": "NVIDIA_L4",
    "NVIDIA H100 80GB HBM3": "NVIDIA_H100_80GB",
    "NVIDIA H200": "NVIDIA_H200_141GB",
    "NVIDIA B200": "NVIDIA_B200",
    "NVIDIA GB200": "NVIDIA_GB200",
}
_BY_NAME = {" ".join(name.split()).casefold(): kind for name, kind in DEVICE_NAMES.items()}


def accelerator_of_device(device_name: str) -> str:
    """The accelerator type of a GPU as NVIDIA names it, by its whole name (case and
    spacing aside); "" when it is none of them."""
    return _BY_NAME.get(" ".join(device_name.split()).casefold(), "")


def weakest(gpus: list[Accelerator]) -> Accelerator:
    """What several GPU types can all do, as one accelerator: the slowest card's name and
    figures, the lowest compute capability (tensor cores, bfloat16), and XLA only if every
    one has it. MultiWorkerMirroredStrategy's replicas all apply one plan."""
    slowest = min(gpus, key=lambda g: (g.peak_tflops, g.compute_capability))
    return dataclasses.replace(
        slowest, compute_capability=min(g.compute_capability for g in gpus),
        no_xla=not all(g.xla for g in gpus))


def seen(compute_capability: tuple[int, int]) -> Accelerator:
    """The facts of a GPU TensorFlow reports (`tf.config.experimental.get_device_details`),
    for a trainer started without a training plan."""
    major, minor = compute_capability
    architecture = _ARCHITECTURES.get((major, minor)) or next(
        (name for (ma, _), name in sorted(_ARCHITECTURES.items()) if ma == major), "unknown")
    return Accelerator(f"a GPU of compute capability {major}.{minor}", architecture,
                       (major, minor))
