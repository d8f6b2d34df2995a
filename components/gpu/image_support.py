"""Which GPU types the trainer image can serve: the GPU lock's CUDA libraries held against
what each GPU architecture needs (`catalog.ARCHITECTURE_NEEDS`)."""

from __future__ import annotations

from components import images
from components.gpu import catalog as cat
from trainer.cluster.accelerators import ACCELERATORS


def image_cannot_serve(accelerator_type: str) -> str:
    """Why the trainer image's CUDA libraries cannot serve a GPU type, or "".

    The GPU lock's cuBLAS and cuDNN (`components.images.GPU_CUDA_LIBRARIES`) are held
    against the needs of the GPU's architecture (`catalog.ARCHITECTURE_NEEDS`), and its
    CUDA major against the last one that supports the architecture.
    """
    gpu = ACCELERATORS.get(accelerator_type)
    if gpu is None:
        return ""
    needs = cat.ARCHITECTURE_NEEDS[gpu.architecture]
    what = f"{gpu.architecture}, compute capability {gpu.capability}"
    if needs.last_cuda_major is not None and needs.last_cuda_major < images.GPU_CUDA_MAJOR:
        ended = cat.END_OF_SUPPORT.get(accelerator_type, "")
        return (f"its GPUs ({what}) are supported up to CUDA {needs.last_cuda_major}, and the "
                f"image's TensorFlow is built with CUDA {images.GPU_CUDA_MAJOR} "
                f"({needs.source})" + (f"; it also {ended}" if ended else "")
                + "; choose NVIDIA_TESLA_T4 or newer")
    have = images.GPU_CUDA_LIBRARIES
    short = [f"{label} {have[key]} (needs {need}+)"
             for key, label, need in (("cublas", "cuBLAS", needs.cublas),
                                      ("cudnn", "cuDNN", needs.cudnn))
             if release(have[key]) < release(need)]
    if not short:
        return ""
    return (f"its GPUs ({what}) need newer CUDA libraries than the image's "
            f"{' and '.join(short)} ({needs.source})"
            + ("" if gpu.xla else ", and TensorFlow 2.21's XLA cannot target them "
               "(tensorflow/tensorflow#111958)")
            + "; choose NVIDIA_H200_141GB (a3-ultragpu-8g) or NVIDIA_H100_80GB (a3-highgpu-8g)")


def release(version: str) -> tuple[int, ...]:
    """`12.5.3.2` -> (12, 5): a library release as NVIDIA's needs name it."""
    return tuple(int(part) for part in version.split(".")[:2])
