"""`gpu-pipeline run --local`: the whole pipeline on this machine (KFP's local runner,
the trainer as processes on localhost)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from components.export.split_figures import headline
from components.stage_messages import say
from pipelines.commands.common import (
    DEFAULT_LOCAL_ROOT,
    UsageError,
    add_config_flags,
    check_model,
    is_path,
    load,
    make_directory,
    positive_int,
)


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("run", help="Run the whole pipeline.")
    parser.add_argument("--local", action="store_true",
                        help="Run on this machine with KFP's local runner (required in this "
                             "version).")
    parser.add_argument("--pipeline-root", type=Path, default=DEFAULT_LOCAL_ROOT,
                        help=f"Where run artifacts go (default: {DEFAULT_LOCAL_ROOT}/ in the "
                             "current directory).")
    parser.add_argument("--training-machines", type=positive_int,
                        help="Training machines as processes: the chief and the workers "
                             "(config local.training_machines; default: as the Vertex AI "
                             "pools 0 and 1).")
    # Its former name, which counted the chief among the workers: still read, with a warning.
    parser.add_argument("--workers", type=positive_int, help=argparse.SUPPRESS)
    parser.add_argument("--parameter-servers", type=int,
                        help="Parameter-server processes: parameter-server training (config "
                             "local.parameter_servers; default: as Vertex AI pool 2).")
    parser.add_argument("--evaluator", action=argparse.BooleanOptionalAction, default=None,
                        help="A sidecar evaluator process (config local.evaluator; default: "
                             "as Vertex AI pool 3).")
    parser.add_argument("--json", action="store_true",
                        help="End with one JSON line: pipeline_root, model_uri, metrics, "
                             "artifacts.")
    parser.add_argument("--verbose", action="store_true", help="Show KFP's full executor output.")
    parser.add_argument("--no-cache", action="store_true",
                        help="Prepare the dataset again even if the source is unchanged.")
    add_config_flags(parser)


def run(args: argparse.Namespace) -> int:
    """Runs the pipeline on this machine; prints where everything went."""
    if not args.local:
        from trainer.common.shell_name import command

        raise UsageError(f"`run` runs on this machine: use `{command()} run --local`; on "
                         f"Vertex AI, `{command()} submit --config CONFIG` builds and submits "
                         "the run")
    config = load(args)  # Pre-flight: every configuration error before any work.
    check_model(config)
    from trainer.common.gcs import mounted_gcs_uri

    source, uri = config.dataset.source, mounted_gcs_uri(config.dataset.source)
    if uri and not is_path(Path(source), Path.exists):
        raise UsageError(f"dataset.source {source!r} is Vertex AI's Cloud Storage mount, which "
                         f"this machine does not have; for a local run give {uri!r} or a "
                         "local copy")
    layout, _ = _local_layout(config)
    make_directory(args.pipeline_root, "--pipeline-root")
    from pipelines.local_run import run_local

    pools = config.vertex.worker_pool_specs
    say(f"local run: {layout.training_machines} training machine(s), "
        f"{layout.parameter_servers} parameter server(s), {layout.evaluators} evaluator(s) "
        f"as processes; model {config.training.model}, {config.training.total_epochs} "
        f"epochs, dataset {config.dataset.source}; "
        f"Vertex worker pools to validate: {len(pools)} in {config.vertex.region}")
    # Stage 1 prints both training plans (this run's and Vertex AI's) once it has made them.
    result = run_local(config, args.pipeline_root, verbose=args.verbose,
                       cache=not args.no_cache)
    if result.dataset_reused:
        say("dataset: source unchanged, reused the dataset prepared earlier (--no-cache "
            "prepares it again)")
    print()
    say(f"done in {result.seconds:.1f} s: {headline(result.metrics)}, of the exported "
        "SavedModel" if "accuracy" in result.metrics else
        f"done in {result.seconds:.1f} s: no model was exported")
    say(f"champion/challenger: {result.decision}" + (
        f" (registry version {result.registered_version})" if result.registered_version
        else ""))
    _how_to_call(config, args.pipeline_root, result.registered_version)
    for line in _open_next(result):
        print(line)
    # Each artifact is RUN_DIR/<task>/<output>, named so; a reused dataset lies elsewhere.
    inside = [n for n, p in result.artifacts.items() if Path(p) == Path(result.run_dir, n)]
    print(f"every artifact of the run is under {result.run_dir}: {', '.join(inside)}")
    for name, path in result.artifacts.items():
        if name not in inside:
            print(f"  {name}: {path}")
    if args.json:
        print(result.to_json())
    return 0


def _open_next(result) -> list[str]:
    """What a user opens after a run: the run's report as a page, the model, the
    TensorBoard logs and the efficiency figures."""
    import shutil

    from components.ops import names

    lines = ["open next:"]
    report = result.artifacts.get(names.artifact(names.EXPORT_MODEL, names.RUN_REPORT))
    if report and Path(report).is_file():
        page = Path(result.run_dir) / "training-report.html"  # KFP's HTML has no extension
        shutil.copyfile(report, page)
        lines.append(f"  the run's report:         {page} (open it in a browser: metrics "
                     "per class, the decision, cost, efficiency)")
    lines.append(f"  the model (a SavedModel):  {result.model_uri}")
    job = result.artifacts.get(names.artifact(names.TRAIN_LOCALLY, names.TRAINING_JOB))
    if job:
        tensorboard = Path(sys.executable).parent / "tensorboard"  # installed with TensorFlow
        if tensorboard.is_relative_to(Path.cwd()):  # `make demo`: the checkout's .venv
            tensorboard = tensorboard.relative_to(Path.cwd())
        lines += [f"  the efficiency figures:   {Path(job) / 'efficiency.json'}",
                  f"  TensorBoard:              {tensorboard} --logdir {Path(job) / 'tensorboard'}"]
    return lines


def _how_to_call(config, pipeline_root, registered: str) -> None:
    """How to call the model that serves now (the local registry's default of the run's
    model, `vertex.model_display_name`), or that there is none; `registered` is the
    version this run registered ("" for none)."""
    from components.export import local_registry as local
    from components.vertex_options import VertexOptions
    from pipelines.commands.serve import request_example
    from pipelines.local_run import REGISTRY
    from trainer.common.shell_name import command

    name = config.vertex.model_display_name
    default = local.load(pipeline_root / REGISTRY / name)["default"]
    if default is None:
        say(f"no model to call: this run registered none and the local registry has no "
            f"{name!r}")
        return
    flags = (f" --model {name}" if name != VertexOptions().model_display_name else "") + \
        (f" --pipeline-root {pipeline_root}" if Path(pipeline_root) != DEFAULT_LOCAL_ROOT
         else "")
    if not registered:
        say(f"this run registered no model: the champion is still {name} version {default}")
    cli = command()  # as the user's shell runs it (nothing may have put it on the PATH)
    say(f"call the champion ({name} version {default}): {cli} predict IMAGE...{flags}, "
        f"or {cli} serve{flags} (the model server on http://127.0.0.1:8080) and then:")
    print(request_example("http://127.0.0.1:8080"))


def _local_layout(config):
    """The local run's roles and training plan, checked before any work: what this machine
    can start, and what its CPU processes can run."""
    from trainer.cluster.training_plan import PlanError

    layout = config.local_layout()
    if layout.training_machines > 8 or layout.parameter_servers > 4:
        raise UsageError(
            f"a local run would start {layout.training_machines} training machine(s) and "
            f"{layout.parameter_servers} parameter server(s) (as the Vertex AI pools); this "
            "machine runs at most 8 and 4: give --training-machines and --parameter-servers")
    try:
        return layout, config.local_plan()
    except PlanError as exc:
        raise UsageError(
            f"this local run ({layout.training_machines} training machine(s) and "
            f"{layout.parameter_servers} parameter server(s) as CPU processes) cannot train "
            f"with these options: {exc} (the Vertex AI pools' plan is made separately, from "
            "their GPUs)") from None
