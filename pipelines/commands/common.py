"""What the commands share: their configuration flags, loading the configuration with
them (the pre-flight), and the checks of paths the user names."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.common import schema
from trainer.common.errors import InputError

DEFAULT_SPEC = Path("compiled") / "gpu_training_pipeline.yaml"
DEFAULT_LOCAL_ROOT = Path("local_runs")
#: Where `add_config_flags` leaves, in the parsed arguments, which flag sets which option:
#: config section -> {argparse destination: field}.
CONFIG_FLAGS = "config_flags"


class UsageError(InputError):
    """A command-line mistake; the message says what to do."""


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """`--config`, then a flag for every dataset and training option (each overrides the
    file), and `--region`."""
    from components.dataset.dataset_options import DatasetOptions
    from trainer.run.training_options import TrainingOptions

    parser.add_argument("--config", type=Path, help="YAML configuration file "
                        "(sections dataset, training, tuning, vertex, schedule, local); "
                        "flags override it.")
    derived = {
        "dataset": schema.add_arguments(parser.add_argument_group(
            "dataset options (config section dataset)"), DatasetOptions, with_defaults=False,
            prefix="dataset"),
        "training": schema.add_arguments(parser.add_argument_group(
            "training options (config section training)"), TrainingOptions,
            with_defaults=False)}
    parser.set_defaults(**{CONFIG_FLAGS: derived})
    parser.add_argument("--region", help="Vertex AI region (checked against the GPU rules).")


def add_listing_flags(parser: argparse.ArgumentParser, config_help: str) -> None:
    """The flags of a listing of the local runs' root, or with --config or --project of
    Vertex AI's."""
    parser.add_argument("--pipeline-root", type=Path, default=DEFAULT_LOCAL_ROOT,
                        help=f"The local runs' root (default: {DEFAULT_LOCAL_ROOT}/).")
    parser.add_argument("--config", type=Path, help=config_help)
    parser.add_argument("--project", help="Google Cloud project.")
    parser.add_argument("--region", help="Vertex AI region.")


def add_vertex_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the commands that reach Vertex AI."""
    parser.add_argument("--project", help="Google Cloud project.")
    parser.add_argument("--pipeline-root", dest="vertex_pipeline_root",
                        help="gs://BUCKET/PATH for the run's artifacts and sources.")
    parser.add_argument("--image-repository",
                        help="Artifact Registry repository: LOCATION-docker.pkg.dev/PROJECT/REPO.")
    parser.add_argument("--service-account", help="Service account the run uses.")
    parser.add_argument("--dry-run", action="store_true",
                        help="Show the requests without uploading, building or sending anything.")
    parser.add_argument("--verbose", action="store_true",
                        help="With --dry-run, print each request's whole body.")


def overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The configuration values the flags give, by section (None: not given)."""
    derived = getattr(args, CONFIG_FLAGS, {})
    return {
        "dataset": schema.given(args, derived.get("dataset", {})),
        "training": schema.given(args, derived.get("training", {})),
        "local": {"training_machines": training_machines(args),
                  "parameter_servers": getattr(args, "parameter_servers", None),
                  "evaluator": getattr(args, "evaluator", None)},
        "vertex": {"region": getattr(args, "region", None),
                   "project": getattr(args, "project", None),
                   "pipeline_root": getattr(args, "vertex_pipeline_root", None),
                   "image_repository": getattr(args, "image_repository", None),
                   "service_account": getattr(args, "service_account", None)},
        "schedule": {"cron": getattr(args, "cron", None),
                     "max_concurrent_run_count": getattr(args, "max_concurrent_runs", None)},
    }


def training_machines(args: argparse.Namespace) -> int | None:
    """`--training-machines`, or its deprecated name `--workers` (with a warning)."""
    given = getattr(args, "training_machines", None)
    old = getattr(args, "workers", None)
    if old is not None:
        print("warning: --workers is deprecated: it counts the training machines (the chief "
              "and the workers), so it is now --training-machines"
              + (f"; --training-machines {given} wins" if given is not None else
                 f"; read as --training-machines {old}"), file=sys.stderr)
    return given if given is not None else old


def load(args: argparse.Namespace):
    """Loads and validates the configuration (the pre-flight); prints its warnings."""
    from pipelines.config_loading import load_config

    if args.config is not None and not is_path(args.config, Path.is_file):
        raise UsageError(f"--config {str(args.config)!r} is not a readable file")
    warnings: list[str] = []
    try:
        return load_config(args.config, overrides(args), warnings)
    finally:  # Warnings matter most when the configuration is refused.
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)


def check_model(config) -> None:
    """A user's model (`training.model: package.module:function`), built once on the CPU
    before any stage runs (`pipelines.model_check`)."""
    from pipelines.model_check import check_user_model

    check_user_model(config)


def is_path(path: Path, test) -> bool:
    """`test(path)` (Path.is_file, ...), False for a path the system cannot even look at
    (a name too long, a permission denied)."""
    try:
        return test(path)
    except OSError:
        return False


def make_directory(path: Path, flag: str) -> None:
    """Creates a directory the user named, or says plainly why it cannot be used."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {str(path)!r} cannot be created ({exc.strerror}); "
                         "give a writable directory") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {str(path)!r} is not writable; give a writable directory")


def vertex_config(args: argparse.Namespace):
    """Loads the configuration and runs the Vertex pre-flight checks."""
    from pipelines.vertex.clients import Clients
    from pipelines.vertex.preflight import check_bucket_locations, require_vertex_settings

    config = load(args)
    require_vertex_settings(config)
    check_model(config)
    if not args.dry_run:
        for warning in check_bucket_locations(config, Clients().get_storage()):
            print(f"warning: {warning}", file=sys.stderr)
    return config


@contextlib.contextmanager
def tensorflow_start_quietly() -> Iterator[None]:
    """Keeps TensorFlow's C++ start-up lines out of a command's output: what absl writes
    to fd 2 before TF_CPP_MIN_LOG_LEVEL applies (oneDNN, "Could not find cuda drivers",
    "failed call to cuInit" on a machine without a GPU). Anything else written meanwhile is
    passed on, and everything when the block fails."""
    import tempfile

    from components.training.local_cluster import TENSORFLOW_CHATTER

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines
                           if failed or not TENSORFLOW_CHATTER.match(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
