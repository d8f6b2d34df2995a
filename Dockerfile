# syntax=docker/dockerfile:1
# The project's two images, one stage each (components/images.py names them):
#   gpu: the trainer on the CustomJob's GPU machines;
#   cpu: the pipeline's components, CPU-only worker pools, the model server and the
#        Dataflow workers of the Beam dataset engine.
# Each installs its lock file (requirements/*.lock, every package pinned with its hashes,
# `make lock`) and nothing else. `make image-check` builds both environments from the same
# locks and checks what this file promises (the CUDA libraries load, the code starts).

# Debian's slim Python, by digest; Cloud Build passes components/images.py's value.
ARG PYTHON_BASE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
# Beam's SDK image at the CPU lock's Beam version, for its boot program only.
ARG BEAM_SDK=apache/beam_python3.11_sdk:2.77.0

FROM ${BEAM_SDK} AS beam_sdk

FROM ${PYTHON_BASE} AS base
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TF_USE_LEGACY_KERAS=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# The project's files, for both images: the whole build context (.dockerignore says what
# it holds: the sources, the locks and, when training.user_code is set, the user's model
# code as user_code/), so that the build stage finds them beside the packages.
FROM base AS sources
COPY . ./

FROM base AS gpu
COPY requirements/gpu.lock requirements/
RUN pip install --require-hashes --no-deps -r requirements/gpu.lock
# TensorFlow opens CUDA by soname: its own RUNPATH covers only some of the pip-installed
# NVIDIA libraries (not curand, cusolver or nvJitLink), so every one is on the library
# path. The driver (libcuda.so.1, nvidia-smi) is mounted at /usr/local/nvidia, which
# Vertex AI does not add to the paths itself (huggingface/Google-Cloud-Containers#167,
# "Set PATH and LD_LIBRARY_PATH on CUDA for Vertex AI"); the NVIDIA_* variables ask the
# NVIDIA container runtime for the GPUs and the compute libraries, as CUDA images do.
# XLA compiles its kernels with ptxas from nvidia-cuda-nvcc-cu12, found on PATH.
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:/usr/local/lib/python3.11/site-packages/nvidia/cublas/lib:/usr/local/lib/python3.11/site-packages/nvidia/cuda_cupti/lib:/usr/local/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib:/usr/local/lib/python3.11/site-packages/nvidia/cuda_runtime/lib:/usr/local/lib/python3.11/site-packages/nvidia/cudnn/lib:/usr/local/lib/python3.11/site-packages/nvidia/cufft/lib:/usr/local/lib/python3.11/site-packages/nvidia/curand/lib:/usr/local/lib/python3.11/site-packages/nvidia/cusolver/lib:/usr/local/lib/python3.11/site-packages/nvidia/cusparse/lib:/usr/local/lib/python3.11/site-packages/nvidia/nccl/lib:/usr/local/lib/python3.11/site-packages/nvidia/nvjitlink/lib \
    PATH=/usr/local/nvidia/bin:/usr/local/lib/python3.11/site-packages/nvidia/cuda_nvcc/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The sources after the dependencies, so that a source change does not reinstall them.
COPY --from=sources /app /app
RUN pip install --no-deps --no-build-isolation -e .
ENTRYPOINT ["python", "-m", "trainer.task"]

FROM base AS cpu
COPY requirements/cpu.lock requirements/
RUN pip install --require-hashes --no-deps -r requirements/cpu.lock
# Dataflow starts the workers' container with its entry point, which must run Beam's boot
# program (Dataflow docs, "Build custom container images"); the boot program starts the
# SDK worker with the Beam installed from the lock. Everything else that runs this image
# names its command: the pipeline's components (KFP), CustomJob pools and the model server.
COPY --from=beam_sdk /opt/apache/beam /opt/apache/beam
COPY --from=sources /app /app
RUN pip install --no-deps --no-build-isolation -e .
ENTRYPOINT ["/opt/apache/beam/boot"]
