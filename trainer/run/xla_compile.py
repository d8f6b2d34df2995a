"""XLA's compile settings and its caches, for a replica (or a benchmark case) whose plan
turns XLA on: the warm-up paid once per image and GPU type, not at every run.

What XLA and TensorFlow do, read in their source:

- An unknown name in XLA_FLAGS aborts the process ("Unknown flag in XLA_FLAGS",
  xla/parse_flags_from_env.cc `ParseFlagsFromEnvAndDieIfUnknown`): every name here is in
  `XLA_FLAG_NAMES`, which a test runs through the installed TensorFlow.
- Parallel compilation of LLVM modules needs `--xla_gpu_enable_llvm_module_compilation_
  parallelism` *and* a thread pool: TensorFlow passes XLA none, and with
  `--xla_gpu_force_compilation_parallelism` at its default 0 XLA makes none
  (`MaybeOwningThreadPool::GetOrCreate` in xla/service/gpu/gpu_compiler.cc), so both are
  set. It also needs a compilation provider that links modules: ptxas with nvlink, or ptxas
  with the driver's linker (xla/stream_executor/cuda/assemble_compilation_provider.cc). The
  line "Parallel compilation support is desired: 0" that the benchmark's `parallel` case
  still logged comes from the autotuner's compilations, whose debug options XLA resets to
  no parallelism and one thread (`AutotunerCompileUtil`'s constructor,
  xla/service/gpu/autotuning/autotuner_compile_util.cc), not from the step's own
  compilation, which had parallelism asked for but no thread pool.
- `TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR` keeps whole compiled executables
  on disk, for every device type unless `--tf_xla_persistent_cache_device_types` says
  otherwise (tensorflow/compiler/jit/flags.cc, xla_platform_info.cc
  `GetPersistentCacheDirectory`); `--xla_gpu_per_fusion_autotune_cache_dir=DIR` keeps the
  autotuner's results per fusion (xla/debug_options_flags.cc).

The caches live in the bucket, keyed by GPU type and image digest (`cache_location`); a
replica copies them to local disk before TensorFlow starts (`restore`) and the chief copies
what is new back after training (`save`), through Cloud Storage's client (or a local
folder). A cache that cannot be read or written costs a warm-up, never a run.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

#: The XLA_FLAGS names the trainer and the benchmark set (each accepted by TensorFlow
#: 2.21's XLA: tests/trainer/run/test_xla_compile.py).
XLA_FLAG_NAMES = ("xla_gpu_enable_llvm_module_compilation_parallelism",
                  "xla_gpu_force_compilation_parallelism",
                  "xla_gpu_unsafe_fallback_to_driver_on_ptxas_not_found",
                  "xla_gpu_enable_triton_gemm", "xla_gpu_autotune_level",
                  "xla_gpu_experimental_enable_fusion_autotuner",
                  "xla_gpu_per_fusion_autotune_cache_dir")
#: The TF_XLA_FLAGS names.
TF_XLA_FLAG_NAMES = ("tf_xla_persistent_cache_directory",)
#: The caches' folders, under the local and the bucket's location.
EXECUTABLES, AUTOTUNE = "executables", "autotune"


def flag(name: str, value: object) -> str:
    """`--name=value` for a name of `XLA_FLAG_NAMES` or `TF_XLA_FLAG_NAMES` (a name outside
    them is a programming error: it would abort the process)."""
    if name not in XLA_FLAG_NAMES + TF_XLA_FLAG_NAMES:
        raise ValueError(f"{name} is not an XLA flag the trainer knows TensorFlow accepts")
    return f"--{name}={str(value).lower() if isinstance(value, bool) else value}"


def parallel_flags(cores: int, *, driver_links: bool = False) -> list[str]:
    """XLA_FLAGS for compiling modules in parallel on `cores` threads; `driver_links` lets
    the CUDA driver link them where there is no nvlink (the image's case)."""
    return [flag("xla_gpu_enable_llvm_module_compilation_parallelism", True),
            flag("xla_gpu_force_compilation_parallelism", max(1, cores)),
            *([flag("xla_gpu_unsafe_fallback_to_driver_on_ptxas_not_found", True)]
              if driver_links else [])]


def parallel_where_possible(environ: Mapping[str, str]) -> list[str]:
    """`parallel_flags` where XLA's compiler links modules itself (ptxas with nvlink:
    `trainer.run.gpu_environment.compiler`), else none: linking with the driver instead
    stays a measured switch of the benchmark (`parallel`) until a GPU measures it."""
    from trainer.run.gpu_environment import compiler

    return parallel_flags(os.cpu_count() or 1) if compiler(environ)["parallel"] != "no" \
        else []


def with_flags(environ: Mapping[str, str], xla: Sequence[str] = (),
               tf_xla: Sequence[str] = ()) -> dict[str, str]:
    """XLA_FLAGS and TF_XLA_FLAGS with `xla` and `tf_xla` added after what they hold."""
    changed = {}
    for variable, added in (("XLA_FLAGS", xla), ("TF_XLA_FLAGS", tf_xla)):
        if added:
            changed[variable] = " ".join([environ.get(variable, ""), *added]).strip()
    return changed


def cache_location(root: str, accelerator: str, image: str) -> str:
    """`ROOT/ACCELERATOR/DIGEST/`: one cache per GPU type and trainer image (a compiled
    executable is valid for that GPU and that build of XLA only); "" without a root."""
    if not root:
        return ""
    digest = image.rsplit("@sha256:", 1)[-1][:16] if "@sha256:" in image else "local"
    kind = re.sub(r"[^A-Za-z0-9._-]", "-", accelerator or "cpu")
    return f"{root.rstrip('/')}/{kind}/{digest}/"


def cache_environment(local: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that point XLA's two caches at `local` (set before TensorFlow
    starts)."""
    return with_flags(environ,
                      xla=[flag("xla_gpu_per_fusion_autotune_cache_dir", local / AUTOTUNE)],
                      tf_xla=[flag("tf_xla_persistent_cache_directory", local / EXECUTABLES)])


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} \
        if root.is_dir() else set()


def _objects(location: str) -> tuple[Any, str, dict[str, Any]]:
    """A gs:// location's bucket, prefix and objects (by name under the prefix)."""
    from trainer.common.gcs import split_gcs_uri, storage_client

    name, prefix = split_gcs_uri(location)
    prefix = prefix.rstrip("/") + "/"
    bucket = storage_client().bucket(name)
    found = {blob.name[len(prefix):]: blob for blob in bucket.list_blobs(prefix=prefix)
             if not blob.name.endswith("/")}
    return bucket, prefix, found


def restore(remote: str, local: Path) -> int:
    """Copies the cache at `remote` (a folder, or gs:// through Cloud Storage's client) to
    `local`; returns the files copied (0 when there is none yet)."""
    count = 0
    if remote.startswith("gs://"):
        for name, blob in _objects(remote)[2].items():
            (local / name).parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(local / name))
            count += 1
    else:
        source = Path(remote)
        for name in _files(source):
            (local / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, local / name)
            count += 1
    for kind in (EXECUTABLES, AUTOTUNE):
        (local / kind).mkdir(parents=True, exist_ok=True)
    return count


def save(local: Path, remote: str) -> int:
    """Copies the files of `local` that `remote` lacks; returns how many. An object is
    written whole; a file is written under a temporary name and renamed, so a reader never
    sees half of one."""
    if remote.startswith("gs://"):
        bucket, prefix, found = _objects(remote)
        new = sorted(_files(local) - set(found))
        for name in new:
            bucket.blob(prefix + name).upload_from_filename(str(local / name))
        return len(new)
    target = Path(remote)
    new = sorted(_files(local) - _files(target))
    for name in new:
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial = destination.with_name(f".{destination.name}.{os.getpid()}.partial")
        shutil.copyfile(local / name, partial)
        os.replace(partial, destination)
    return len(new)


#: The trainer image's reference, as the CustomJob names it to each replica
#: (`components.training.vertex_job.custom_job_spec`): the cache's key with the GPU type.
IMAGE_VARIABLE = "GPU_PIPELINE_IMAGE"


def open_cache(root: str, accelerator: str, environ: MutableMapping[str, str]
               ) -> tuple[Path | None, str]:
    """Before TensorFlow starts: the cache of this GPU type and image under `root`
    (`training.xla_cache`) copied to a local folder, and XLA pointed at it; returns the
    folder (None when there is no cache to use) and what happened, for the log."""
    location = cache_location(root, accelerator, environ.get(IMAGE_VARIABLE, ""))
    if not location:
        return None, ""
    import tempfile

    local = Path(tempfile.mkdtemp(prefix="xla-cache-"))
    try:
        restored = restore(location, local)
    except Exception as exc:  # noqa: BLE001 -- a cache costs a warm-up at most, never a run
        return local, f"{location} could not be read ({_first(exc)}); compiling from scratch"
    finally:
        environ.update(cache_environment(local, environ))
    return local, (f"{restored} file(s) restored from {location}" if restored
                   else f"none yet at {location}: this run compiles and fills it")


def close_cache(local: Path, root: str, accelerator: str, environ: Mapping[str, str]) -> str:
    """After training (the chief): what XLA compiled and tuned, copied to the cache."""
    location = cache_location(root, accelerator, environ.get(IMAGE_VARIABLE, ""))
    try:
        return f"{save(local, location)} new file(s) saved to {location}"
    except Exception as exc:  # noqa: BLE001 -- a cache costs a warm-up at most, never a run
        return f"{location} could not be written ({_first(exc)}); the next run compiles again"


def _first(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:200]
