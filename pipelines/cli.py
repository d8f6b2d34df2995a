"""`gpu-pipeline`: run the pipeline locally, compile it for Vertex AI, validate GPU configs.

User mistakes end with one clear message and exit code 2; a failed stage with exit
code 1. Neither prints a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from components import project
from components.stage import say
from trainer import schema
from trainer.errors import InputError, ProjectError
from trainer.schema import short

DEFAULT_SPEC = Path("compiled") / "gpu_training_pipeline.yaml"
DEFAULT_LOCAL_ROOT = Path("local_runs")


class UsageError(InputError):
    """A command-line mistake; the message says what to do."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
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


#: Config section -> {argparse destination: field}, filled as the flags are declared.
_DERIVED: dict[str, dict[str, str]] = {}


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    """`--config`, then a flag for every dataset and training option (each overrides the
    file), and `--region`."""
    from components.dataset.options import DatasetOptions
    from trainer.options import TrainingOptions

    parser.add_argument("--config", type=Path, help="YAML configuration file "
                        "(sections dataset, training, vertex, schedule); flags override it.")
    _DERIVED["dataset"] = schema.add_arguments(parser.add_argument_group(
        "dataset options (config section dataset)"), DatasetOptions, with_defaults=False,
        prefix="dataset")
    _DERIVED["training"] = schema.add_arguments(parser.add_argument_group(
        "training options (config section training)"), TrainingOptions, with_defaults=False)
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
        "dataset": schema.given(args, _DERIVED.get("dataset", {})),
        "training": {**schema.given(args, _DERIVED.get("training", {})),
                     "local_workers": getattr(args, "workers", None),
                     "local_parameter_servers": getattr(args, "parameter_servers", None),
                     "local_evaluator": getattr(args, "evaluator", None)},
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
    parser = _Parser(prog=project.NAME, description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="Run the whole pipeline.")
    run.add_argument("--local", action="store_true",
                     help="Run on this machine with KFP's local runner (required in this "
                          "version).")
    run.add_argument("--pipeline-root", type=Path, default=DEFAULT_LOCAL_ROOT,
                     help=f"Where run artifacts go (default: {DEFAULT_LOCAL_ROOT}/).")
    run.add_argument("--workers", type=_positive_int,
                     help="Training machines as processes: the chief and the workers "
                          "(default: as the Vertex AI pools 0 and 1).")
    run.add_argument("--parameter-servers", type=int,
                     help="Parameter-server processes: parameter-server training "
                          "(default: as Vertex AI pool 2).")
    run.add_argument("--evaluator", action=argparse.BooleanOptionalAction, default=None,
                     help="A sidecar evaluator process (default: as Vertex AI pool 3).")
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
    actions = schedule.add_subparsers(dest="action", required=True, parser_class=_Parser)
    create = actions.add_parser("create", help="Create a schedule around the run `submit` "
                                "would send.")
    _add_config_flags(create)
    _add_vertex_flags(create)
    create.add_argument("--cron", help="Cron expression, e.g. 'TZ=Etc/UTC 0 3 * * 1'.")
    create.add_argument("--max-concurrent-runs", type=_positive_int,
                        help="Runs of the schedule allowed at once.")
    for name, what in (("list", "List the schedules: cron, state, last and next run."),
                       ("pause", "Pause a schedule."), ("resume", "Resume a paused schedule."),
                       ("delete", "Delete a schedule.")):
        action = actions.add_parser(name, help=what)
        if name != "list":
            action.add_argument("schedule_id", help="Schedule ID or resource name.")
        # Only what these requests use: the project and region, and whether to send them.
        action.add_argument("--config", type=Path, help="YAML configuration file.")
        action.add_argument("--project", help="Google Cloud project.")
        action.add_argument("--region", help="Vertex AI region.")
        action.add_argument("--dry-run", action="store_true",
                            help="Print the request without sending it.")

    models = sub.add_parser("models", help="The models the pipeline registered.")
    model_actions = models.add_subparsers(dest="action", required=True, parser_class=_Parser)
    listing = model_actions.add_parser(
        "list", help="The local registry's versions (the default marked *); with --config "
        "or --project, the Vertex AI Model Registry's.")
    listing.add_argument("--pipeline-root", type=Path, default=DEFAULT_LOCAL_ROOT,
                         help=f"The local runs' root (default: {DEFAULT_LOCAL_ROOT}/).")
    listing.add_argument("--config", type=Path, help="YAML configuration file: list its "
                         "vertex.parent_model versions (or vertex.model_display_name models).")
    listing.add_argument("--project", help="Google Cloud project.")
    listing.add_argument("--region", help="Vertex AI region.")
    listing.add_argument("--dry-run", action="store_true",
                         help="Print the Vertex AI request without sending it.")

    publish = sub.add_parser(
        "publish", help="Share the pipeline with other teams: the spec of this configuration, "
        "its components pinned to the project's CPU image (built or found, as submit does).")
    publish.add_argument("destination", help="https://REGION-kfp.pkg.dev/PROJECT/REPO (Artifact "
                         "Registry Kubeflow Pipelines repository) or gs://BUCKET/PATH.")
    publish.add_argument("--tag", action="append", dest="tags",
                         help="Version tag (repeatable; default: v<version> and latest).")
    _add_config_flags(publish)
    _add_vertex_flags(publish)

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

    if args.config is not None and not _is(args.config, Path.is_file):
        raise UsageError(f"--config {str(args.config)!r} is not a readable file")
    warnings: list[str] = []
    try:
        return load_config(args.config, _overrides(args), warnings)
    finally:  # Warnings matter most when the configuration is refused.
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)


def _check_model(config) -> None:
    """A user's model (`training.model: package.module:function`), built once on the CPU
    before any stage runs (`pipelines.model_check`)."""
    from pipelines.model_check import check_user_model

    check_user_model(config)


def _is(path: Path, test) -> bool:
    """`test(path)` (Path.is_file, ...), False for a path the system cannot even look at
    (a name too long, a permission denied)."""
    try:
        return test(path)
    except OSError:
        return False


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
    _check_model(config)
    from trainer.gcs import mounted_gcs_uri

    source, uri = config.dataset.source, mounted_gcs_uri(config.dataset.source)
    if uri and not _is(Path(source), Path.exists):
        raise UsageError(f"dataset.source {source!r} is Vertex AI's Cloud Storage mount, which "
                         f"this machine does not have; for a local run give {uri!r} or a "
                         "local copy")
    layout, plan = _local_layout(config)
    _make_directory(args.pipeline_root, "--pipeline-root")
    from pipelines.local_run import run_local

    pools = config.vertex.worker_pool_specs
    say(f"local run: {layout.training_machines} training machine(s), "
        f"{layout.parameter_servers} parameter server(s), {layout.evaluators} evaluator(s) "
        f"as processes; model {config.training.model}, {config.training.total_epochs} "
        f"epochs, dataset {config.dataset.source}; "
        f"Vertex worker pools to validate: {len(pools)} in {config.vertex.region}")
    say(f"training plan of this local run: {plan.summary()}")
    say(f"training plan on Vertex AI: {config.vertex_plan().summary()}")
    result = run_local(config, args.pipeline_root, verbose=args.verbose,
                       cache=not args.no_cache)
    if result.dataset_reused:
        say("dataset: source unchanged, reused the dataset prepared earlier (--no-cache "
            "prepares it again)")
    print()
    say(f"done in {result.seconds:.1f} s: validation accuracy "
        f"{result.metrics.get('accuracy', float('nan')):.4f} from the exported SavedModel")
    say(f"champion/challenger: {result.decision}" + (
        f" (registry version {result.registered_version})" if result.registered_version
        else ""))
    print(f"  pipeline root: {result.pipeline_root}")
    print(f"  run:           {result.run_dir}")
    print(f"  model:         {result.model_uri}")
    for name, path in result.artifacts.items():
        print(f"  {name:<40} {path}")
    if args.json:
        print(result.to_json())
    return 0


def _local_layout(config):
    """The local run's roles and training plan, checked before any work: what this machine
    can start, and what its CPU processes can run."""
    from trainer.training_plan import PlanError

    layout = config.local_layout()
    if layout.training_machines > 8 or layout.parameter_servers > 4:
        raise UsageError(
            f"a local run would start {layout.training_machines} training machine(s) and "
            f"{layout.parameter_servers} parameter server(s) (as the Vertex AI pools); this "
            "machine runs at most 8 and 4: give --workers and --parameter-servers")
    try:
        return layout, config.local_plan()
    except PlanError as exc:
        raise UsageError(
            f"this local run ({layout.training_machines} training machine(s) and "
            f"{layout.parameter_servers} parameter server(s) as CPU processes) cannot train "
            f"with these options: {exc} (the Vertex AI pools' plan is made separately, from "
            "their GPUs)") from None


def _vertex_config(args: argparse.Namespace):
    """Loads the configuration and runs the Vertex pre-flight checks."""
    from pipelines.vertex.clients import Clients
    from pipelines.vertex.preflight import (
        bucket_location_warnings,
        require_vertex_settings,
    )

    config = _load(args)
    require_vertex_settings(config)
    _check_model(config)
    if not args.dry_run:
        for warning in bucket_location_warnings(config, Clients().get_storage()):
            print(f"warning: {warning}", file=sys.stderr)
    return config


def _cmd_submit(args: argparse.Namespace) -> int:
    from pipelines.vertex.runs import submit

    submit(_vertex_config(args), dry_run=args.dry_run)
    return 0


def _cmd_schedule(args: argparse.Namespace) -> int:
    from pipelines.vertex import schedules
    from pipelines.vertex.runs import to_json

    if args.action == "create":
        schedules.create_schedule(_vertex_config(args), dry_run=args.dry_run)
        return 0
    config = _load(args)
    if args.action == "list":
        if args.dry_run:
            say("dry run: Vertex AI would receive this ListSchedulesRequest:")
            print(to_json(schedules.list_request(config)))
            return 0
        for found in schedules.list_schedules(config):
            print(schedules.describe(found))
        return 0
    if args.dry_run:
        request = schedules.change_request(config, args.action, args.schedule_id)
        say(f"dry run: Vertex AI would receive this {type(request).__name__}:")
        print(to_json(request))
        return 0
    say(f"{args.action}: {schedules.change_schedule(config, args.action, args.schedule_id)}")
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    if args.config is None and args.project is None:
        from components.export import local_registry as local
        from pipelines.local_run import REGISTRY

        root = args.pipeline_root / REGISTRY
        found = local.models(root)
        if not found:
            say(f"no model registered under {str(root)!r} yet (`gpu-pipeline run --local` "
                "registers the models the gate accepts)")
        for name, index in found.items():
            print("\n".join(local.describe(name, index)))
        return 0
    from pipelines.vertex import models
    from pipelines.vertex.runs import to_json

    config = _load(args)
    if args.dry_run:
        request = models.list_request(config)
        say(f"dry run: Vertex AI would receive this {type(request).__name__}:")
        print(to_json(request))
        return 0
    for model in models.list_models(config):
        print(models.describe(model))
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    from components.project import version
    from pipelines.vertex.publish import check_target, publish_run

    tags = args.tags or [f"v{version()}", "latest"]
    check_target(args.destination, tags)  # the user's own input, before the configuration
    config = _vertex_config(args)
    for where in publish_run(config, args.destination, tags, dry_run=args.dry_run):
        say(f"published {where}")
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    config = _load(args)  # Refuse an invalid configuration before compiling anything.
    _check_model(config)
    from components.tuning.options import vertex_problems

    problems = vertex_problems(config.tuning)  # the spec is for Vertex AI
    if problems:
        raise UsageError("; ".join(problems))
    if args.output.suffix not in (".yaml", ".yml", ".json"):
        raise UsageError(f"--output {str(args.output)!r} must end in .yaml, .yml or .json "
                         "(the spec's format follows the suffix)")
    if _is(args.output, Path.is_dir):
        raise UsageError(f"--output {str(args.output)!r} is a directory; give a file path "
                         f"such as {str(args.output / DEFAULT_SPEC.name)!r}")
    _make_directory(args.output.parent, "--output's directory")
    from pipelines.compile import compile_config

    try:  # the configuration's values become the spec's parameter defaults
        path = compile_config(config, args.output)
    except OSError as exc:
        raise UsageError(f"--output {short(str(args.output))} cannot be written "
                         f"({exc.strerror or exc}); give a writable file path") from None
    say(f"wrote {path}")
    return 0


_signals_received: list[int] = []
_left_running: list[int] = []


def _interrupt(signum: int, frame: Any) -> None:
    """SIGINT or SIGTERM: stop every process this command started, then unwind."""
    from pipelines.process_tree import stop_descendants

    _signals_received.append(signum)
    # First the processes: KFP's runner waits for a task in another thread, which an
    # exception in this one would not stop.
    _left_running[:] = stop_descendants()
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gpu-pipeline` console script; returns the exit code.

    A project error ends with its message: exit code 2 for a user's input (`InputError`),
    1 for a failed stage (`StageError`). Anything else is a bug and keeps its traceback.
    """
    from pipelines.local_run import LocalRunError

    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C and SIGTERM (a scheduler, `kill`) stop the whole run.
        signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)
    from pipelines import validate_gpu

    commands = {"run": _cmd_run, "compile": _cmd_compile, "validate-gpu": validate_gpu.command,
                "submit": _cmd_submit, "schedule": _cmd_schedule, "publish": _cmd_publish,
                "models": _cmd_models}
    from pipelines.process_tree import marked_run

    try:
        with marked_run():  # every process the command starts is found when it stops
            return commands[args.command](args)
    except LocalRunError as exc:
        print(f"error: the pipeline failed: {exc} (its log is above)", file=sys.stderr)
        return exc.exit_code
    except ProjectError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # `gpu-pipeline ... | head`: the reader left; so do we
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("interrupted: " + (f"processes {_left_running} of the run could not be stopped"
                                 if _left_running else "every process of the run was stopped")
              + ", and what it had written was removed", file=sys.stderr)
        return 128 + _signals_received[-1] if _signals_received else 130


if __name__ == "__main__":
    sys.exit(main())
