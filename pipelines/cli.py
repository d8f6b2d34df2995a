"""`gpu-pipeline`: run the pipeline locally, compile it for Vertex AI, validate GPU configs.

User mistakes end with one clear message and exit code 2; a failed stage with exit
code 1. Neither prints a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

DEFAULT_SPEC = Path("compiled") / "gpu_training_pipeline.yaml"
DEFAULT_LOCAL_ROOT = Path("local_runs")


class UsageError(Exception):
    """A command-line mistake; the message says what to do."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse's own signature
        """Reports a usage error without a traceback and exits with code 2."""
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML configuration file "
                        "(sections dataset, training, vertex); flags override it.")
    parser.add_argument("--dataset-source", help="Image folder with one sub-folder per class, "
                        "or builtin://shapes (the default).")
    parser.add_argument("--epochs", type=_positive_int, help="Training epochs.")
    parser.add_argument("--batch-size", type=_positive_int, help="Per-replica batch size.")
    parser.add_argument("--region", help="Vertex AI region (checked against the GPU rules).")


def _add_vertex_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", help="Google Cloud project.")
    parser.add_argument("--pipeline-root", dest="vertex_pipeline_root",
                        help="gs://BUCKET/PATH for the run's artifacts and sources.")
    parser.add_argument("--image-repository",
                        help="Artifact Registry repository: LOCATION-docker.pkg.dev/PROJECT/REPO.")
    parser.add_argument("--service-account", help="Service account the run uses.")
    parser.add_argument("--dry-run", action="store_true",
                        help="Print the requests without uploading, building or sending anything.")


def _overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    return {
        "dataset": {"source": getattr(args, "dataset_source", None)},
        "training": {"epochs": getattr(args, "epochs", None),
                     "batch_size": getattr(args, "batch_size", None),
                     "local_workers": getattr(args, "workers", None)},
        "vertex": {"region": getattr(args, "region", None),
                   "project": getattr(args, "project", None),
                   "pipeline_root": getattr(args, "vertex_pipeline_root", None),
                   "image_repository": getattr(args, "image_repository", None),
                   "service_account": getattr(args, "service_account", None)},
        "schedule": {"cron": getattr(args, "cron", None),
                     "max_concurrent_run_count": getattr(args, "max_concurrent_runs", None)},
    }


def build_parser() -> argparse.ArgumentParser:
    """The `gpu-pipeline` argument parser."""
    parser = _Parser(prog="gpu-pipeline", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="Run the whole pipeline.")
    run.add_argument("--local", action="store_true",
                     help="Run on this machine with KFP's local runner (required in this "
                          "version).")
    run.add_argument("--pipeline-root", type=Path, default=DEFAULT_LOCAL_ROOT,
                     help=f"Where run artifacts go (default: {DEFAULT_LOCAL_ROOT}/).")
    run.add_argument("--workers", type=_positive_int,
                     help="Local training worker processes (default 2).")
    run.add_argument("--json", action="store_true",
                     help="End with one JSON line: pipeline_root, model_uri, metrics, artifacts.")
    run.add_argument("--verbose", action="store_true", help="Show KFP's full executor output.")
    run.add_argument("--no-cache", action="store_true",
                     help="Prepare the dataset again even if the source is unchanged.")
    _add_config_flags(run)

    comp = sub.add_parser("compile", help="Compile the Vertex AI pipeline spec.")
    comp.add_argument("--output", type=Path, default=DEFAULT_SPEC,
                      help=f"Spec file to write (default: {DEFAULT_SPEC}).")
    _add_config_flags(comp)

    submit = sub.add_parser("submit", help="Run the pipeline on Vertex AI Pipelines.")
    _add_config_flags(submit)
    _add_vertex_flags(submit)

    schedule = sub.add_parser("schedule", help="Scheduled retraining on Vertex AI.")
    schedule.add_argument("action", choices=("create", "list", "pause"))
    schedule.add_argument("schedule_id", nargs="?", help="pause: schedule ID or resource name.")
    _add_config_flags(schedule)
    _add_vertex_flags(schedule)
    schedule.add_argument("--cron", help="Cron expression, e.g. 'TZ=Etc/UTC 0 3 * * 1'.")
    schedule.add_argument("--max-concurrent-runs", type=_positive_int,
                          help="Runs of the schedule allowed at once.")

    publish = sub.add_parser("publish", help="Share the compiled spec with other teams.")
    publish.add_argument("destination", help="https://REGION-kfp.pkg.dev/PROJECT/REPO (Artifact "
                         "Registry Kubeflow Pipelines repository) or gs://BUCKET/PATH.")
    publish.add_argument("--spec", type=Path, default=DEFAULT_SPEC,
                         help=f"Compiled spec to publish (default: {DEFAULT_SPEC}).")
    publish.add_argument("--tag", action="append", dest="tags",
                         help="Version tag (repeatable; default: v<version> and latest).")

    val = sub.add_parser("validate-gpu", help="Check a GPU configuration against the rules.")
    val.add_argument("--config", type=Path, help="An AI Platform config.yaml (trainingInput), "
                     "Vertex worker pool specs (YAML/JSON list) or a gpu-pipeline config.")
    val.add_argument("--machine-type", help="Compute Engine machine type, e.g. n1-standard-8.")
    val.add_argument("--accelerator-type", help="GPU type, e.g. NVIDIA_TESLA_T4.")
    val.add_argument("--accelerator-count", type=int, default=None, help="GPUs per machine.")
    val.add_argument("--replica-count", type=_positive_int, default=1,
                     help="Machines of this type (1 chief + the rest as workers).")
    val.add_argument("--region", help="Vertex AI region.")
    val.add_argument("--json", action="store_true", help="Print a machine-readable report.")
    return parser


def _load(args: argparse.Namespace):
    """Loads and validates the configuration (the pre-flight); prints its warnings."""
    from pipelines.config import load_config

    if args.config is not None and not args.config.is_file():
        raise UsageError(f"--config {str(args.config)!r} is not a readable file")
    warnings: list[str] = []
    try:
        return load_config(args.config, _overrides(args), warnings)
    finally:  # Warnings matter most when the configuration is refused.
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)


def _make_directory(path: Path, flag: str) -> None:
    """Creates a directory the user named, or says plainly why it cannot be used."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {str(path)!r} cannot be created ({exc.strerror}); "
                         "give a writable directory") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {str(path)!r} is not writable; give a writable directory")


def _cmd_run(args: argparse.Namespace) -> int:
    if not args.local:
        raise UsageError("only local runs are available: use `gpu-pipeline run --local`; "
                         "`gpu-pipeline compile` writes the Vertex AI spec")
    config = _load(args)  # Pre-flight: every configuration error before any work.
    from components.dataset import mounted_gcs_uri

    source, uri = config.dataset.source, mounted_gcs_uri(config.dataset.source)
    if uri and not Path(source).exists():
        raise UsageError(f"dataset.source {source!r} is Vertex AI's Cloud Storage mount, which "
                         f"this machine does not have; for a local run give {uri!r} or a "
                         "local copy")
    _make_directory(args.pipeline_root, "--pipeline-root")
    from pipelines.local_run import run_local

    pools = config.vertex.worker_pool_specs
    print(f"[gpu-pipeline] local run: {config.training.local_workers} worker processes, "
          f"{config.training.epochs} epochs, dataset {config.dataset.source}; Vertex worker "
          f"pools to validate: {len(pools)} in {config.vertex.region}", flush=True)
    result = run_local(config, args.pipeline_root, verbose=args.verbose,
                       cache=not args.no_cache)
    if result.dataset_reused:
        print("[gpu-pipeline] dataset: source unchanged, reused the dataset prepared earlier "
              "(--no-cache prepares it again)")
    print(f"\n[gpu-pipeline] done in {result.seconds:.1f} s: validation accuracy "
          f"{result.metrics.get('accuracy', float('nan')):.4f} from the exported SavedModel")
    print(f"  pipeline root: {result.pipeline_root}")
    print(f"  run:           {result.run_dir}")
    print(f"  model:         {result.model_uri}")
    for name, path in result.artifacts.items():
        print(f"  {name:<40} {path}")
    if args.json:
        print(result.to_json())
    return 0


def _vertex_config(args: argparse.Namespace):
    """Loads the configuration and runs the Vertex pre-flight checks."""
    from pipelines import vertex

    config = _load(args)
    vertex.require_vertex_settings(config)
    if not args.dry_run:
        for warning in vertex.bucket_location_warnings(config, vertex.Clients().get_storage()):
            print(f"warning: {warning}", file=sys.stderr)
    return config


def _cmd_submit(args: argparse.Namespace) -> int:
    from pipelines import vertex

    vertex.submit(_vertex_config(args), dry_run=args.dry_run)
    return 0


def _cmd_schedule(args: argparse.Namespace) -> int:
    from pipelines import vertex

    if args.action == "list":
        for s in vertex.list_schedules(_load(args)):
            print(f"{s.name}  {s.display_name}  {s.state.name}  {s.cron}  next: "
                  f"{s.next_run_time.isoformat() if s.next_run_time else '-'}")
        return 0
    if args.action == "pause":
        if not args.schedule_id:
            raise UsageError("schedule pause needs the schedule ID or resource name")
        print(f"paused {vertex.pause_schedule(_load(args), args.schedule_id)}")
        return 0
    vertex.create_schedule(_vertex_config(args), dry_run=args.dry_run)
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    from components import images
    from pipelines import vertex

    tags = args.tags or [f"v{images.PIPELINE_IMAGE_TAG}", "latest"]
    for where in vertex.publish(args.spec, args.destination, tags):
        print(f"[gpu-pipeline] published {where}")
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    _load(args)  # Refuse an invalid configuration before compiling anything.
    if args.output.suffix not in (".yaml", ".yml", ".json"):
        raise UsageError(f"--output {str(args.output)!r} must end in .yaml, .yml or .json "
                         "(the spec's format follows the suffix)")
    if args.output.is_dir():
        raise UsageError(f"--output {str(args.output)!r} is a directory; give a file path "
                         f"such as {str(args.output / DEFAULT_SPEC.name)!r}")
    _make_directory(args.output.parent, "--output's directory")
    from pipelines.compile import compile_pipeline

    path = compile_pipeline(args.output)
    print(f"[gpu-pipeline] wrote {path}")
    return 0


def _validate_file(path: Path, region: str | None):
    """Validates a file in any of the accepted formats; returns (result, region, format)."""
    import yaml

    from components.gpu_validation import validate_ai_platform_config, validate_worker_pool_specs

    if not path.is_file():
        raise UsageError(f"--config {str(path)!r} is not a readable file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UsageError(f"--config {str(path)!r} is not valid YAML or JSON: {exc}") from None
    if isinstance(data, list):
        return validate_worker_pool_specs(data, region), region, "vertex worker pool specs"
    if isinstance(data, dict) and ({"trainingInput", "scaleTier", "masterType"} & set(data)):
        region = region or (data.get("trainingInput") or {}).get("region")
        return validate_ai_platform_config(data, region), region, "AI Platform config.yaml"
    if isinstance(data, dict) and "worker_pool_specs" in data:
        region = region or data.get("region")
        return (validate_worker_pool_specs(data["worker_pool_specs"], region), region,
                "vertex worker pool specs")
    from pipelines.config import SECTIONS

    if isinstance(data, dict) and set(data) <= set(SECTIONS):
        from pipelines.config import Config

        defaults, vertex = Config().vertex, data.get("vertex") or {}
        region = region or vertex.get("region") or defaults.region
        specs = vertex.get("worker_pool_specs", list(defaults.worker_pool_specs))
        return validate_worker_pool_specs(specs, region), region, "gpu-pipeline config"
    raise UsageError(f"--config {str(path)!r} is in no format validate-gpu reads: expected an AI "
                     "Platform config.yaml (trainingInput: ...), Vertex worker pool specs (a "
                     "list, or worker_pool_specs: [...]), or a gpu-pipeline config (vertex: ...)")


def _cmd_validate_gpu(args: argparse.Namespace) -> int:
    from components.gpu_validation import validate_worker_pool_specs

    if args.config is not None:
        if args.machine_type:
            raise UsageError("give either --config FILE or --machine-type, not both")
        result, region, source = _validate_file(args.config, args.region)
    elif args.machine_type:
        machine_spec: dict[str, Any] = {"machine_type": args.machine_type}
        if args.accelerator_type is not None:
            machine_spec["accelerator_type"] = args.accelerator_type
        if args.accelerator_count is not None:
            machine_spec["accelerator_count"] = args.accelerator_count
        specs = [{"machine_spec": machine_spec, "replica_count": 1}]
        if args.replica_count > 1:
            specs.append({"machine_spec": dict(machine_spec),
                          "replica_count": args.replica_count - 1})
        region, source = args.region, "command line"
        result = validate_worker_pool_specs(specs, region=region)
    else:
        raise UsageError("give --machine-type (with --accelerator-type/--accelerator-count) "
                         "or --config FILE")
    if args.json:
        print(json.dumps({"ok": result.ok, "errors": result.errors, "warnings": result.warnings,
                          "worker_pool_specs": result.specs, "region": region,
                          "input": source}, indent=2))
    else:
        for warning in result.warnings:
            print(f"warning: {warning}")
        if result.ok:
            used = [p for p in result.specs if p]
            print(f"valid ({source}): {len(used)} worker pool(s)"
                  + (f" in {region}" if region else ""))
            print(json.dumps(result.specs, indent=2))
        else:
            print(f"invalid GPU configuration ({source}):")
            for error in result.errors:
                print(f"  - {error}")
    return 0 if result.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gpu-pipeline` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    from components.dataset import DatasetError
    from pipelines.config import ConfigError
    from pipelines.local_run import LocalRunError

    from google.auth.exceptions import DefaultCredentialsError

    from components.cloud_build import CloudBuildError
    from pipelines.vertex import VertexError

    commands = {"run": _cmd_run, "compile": _cmd_compile, "validate-gpu": _cmd_validate_gpu,
                "submit": _cmd_submit, "schedule": _cmd_schedule, "publish": _cmd_publish}
    try:
        return commands[args.command](args)
    except (UsageError, ConfigError, DatasetError, VertexError, CloudBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DefaultCredentialsError:
        print("error: no Google Cloud credentials: run `gcloud auth application-default login` "
              "or set GOOGLE_APPLICATION_CREDENTIALS (`--dry-run` needs none)", file=sys.stderr)
        return 2
    except LocalRunError as exc:
        print(f"error: the pipeline failed: {exc} (its log is above)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

if __name__ == "__main__":
    sys.exit(main())
