# syntax=docker/dockerfile:1
# The GPU image: the trainer on the CustomJob's GPU machines (components/images.py names it).
# One Dockerfile per image, each a single line of stages that its image needs: the legacy
# builder of gcr.io/cloud-builders/docker builds every stage of a file before `--target`
# (only BuildKit skips unused ones), so one file per image keeps each build to its own work
# whichever builder runs it. It installs its lock files and nothing else: the Python lock
# (requirements/gpu.lock, every package pinned with its hashes, `make lock`) and the apt
# lock of the Reduction Server's NCCL plugin (requirements/gpu-apt.lock). `make image-check`
# builds the same Python environment from the same lock and checks what this file promises.

# Debian's slim Python, by digest; Cloud Build passes components/images.py's value, or
# vertex.python_base_image (a mirror in Artifact Registry) inside a perimeter.
ARG PYTHON_BASE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${PYTHON_BASE}
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TF_USE_LEGACY_KERAS=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# Vertex AI's Reduction Server needs its NCCL transport plugin (`google-reduction-server`,
# from Google's apt repository) on every training machine (Vertex AI docs: "Distributed
# training", Reduction Server). Installed at the version the apt lock pins, from a keyring
# holding only the signing key whose fingerprint the lock names, and checked against the
# package's SHA-256 (components/build/apt_lock.py, apt_repository.py). An apt lock that pins nothing is
# resolved here: the newest version in the index whose InRelease signature gpgv checks
# against a key of APT_KEY_FINGERPRINTS alone (components/images.py's, passed by Cloud
# Build). What was installed is printed and recorded at /etc/gpu-pipeline/gpu-apt.lock.
# Inside a perimeter the repository is read from APT_MIRROR (vertex.apt_mirror_url), a copy
# with its paths; the same key, signature and SHA-256 are checked.
ARG APT_KEY_FINGERPRINTS=""
ARG APT_MIRROR=""
COPY components/build/apt_lock.py components/build/apt_repository.py requirements/gpu-apt.lock /tmp/apt-lock/
RUN python /tmp/apt-lock/apt_repository.py install /tmp/apt-lock/gpu-apt.lock \
        --resolve google-reduction-server --accept "$APT_KEY_FINGERPRINTS" \
        --mirror "$APT_MIRROR" --record /etc/gpu-pipeline/gpu-apt.lock && rm -rf /tmp/apt-lock

# The lock from PyPI, or from PIP_INDEX (vertex.pip_index_url) inside a perimeter
# (components/build/pip_index.py: an Artifact Registry index is read as the build's account).
ARG PIP_INDEX=""
COPY requirements/gpu.lock requirements/
COPY components/build/pip_index.py /tmp/pip_index.py
RUN python /tmp/pip_index.py install requirements/gpu.lock --index "$PIP_INDEX" \
    && rm /tmp/pip_index.py
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
# The project's files after the dependencies, so that a source change does not reinstall
# them: the whole build context (.dockerignore says what it holds: the sources, the locks
# and, when training.user_code is set, the user's model code as user_code/).
COPY . ./
RUN pip install --no-deps --no-build-isolation -e .
ENTRYPOINT ["python", "-m", "trainer.task"]
