"""`gpu-pipeline benchmark`: measures the training GPU with the configuration's model, batch
and image size (`pipelines.benchmark`), as one Vertex AI CustomJob on the primary
configuration's GPU, or here with `--local`; the results file goes where the training plan
reads it."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from pipelines.commands.common import (
    UsageError,
    add_config_flags,
    add_vertex_flags,
    positive_int,
)


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser(
        "benchmark", help="Measure the training GPU (images/s per case); the training plan "
                          "reads the results.")
    add_config_flags(parser)
    add_vertex_flags(parser)
    parser.add_argument("--local", action="store_true", help="Run the cases on this machine "
                        "(its GPU, or its CPUs: the file then says so) instead of on Vertex AI.")
    parser.add_argument("--cases", default="", help="Comma-separated cases "
                        "(PRECISION[-xla|-noxla][+OPTION]..., docs/performance.md); default: "
                        "each precision, NVIDIA's environment, NHWC, prefetching, XLA last.")
    parser.add_argument("--data", default="", help="A prepared dataset (a run's "
                        "prepare-dataset output, a folder or gs://) for the TFRecords phase; "
                        "--local prepares the configuration's dataset without it; on Vertex "
                        "AI without it, synthetic batches only.")
    parser.add_argument("--classes", type=positive_int, default=None, help="The model's "
                        "classes (default: the prepared dataset's, else 10).")
    parser.add_argument("--output", default="", help="Where the results file goes (a folder "
                        "or gs://BUCKET/PATH); default: training.measurements, else "
                        "<vertex.pipeline_root>/measurements/ (--local: ./measurements/).")
    parser.add_argument("--budget", type=positive_int, default=None,
                        help="Seconds for all the cases (default 1500; each at most 300).")
    parser.add_argument("--steps", type=positive_int, default=None,
                        help="Timed steps per case (default 50).")
    parser.add_argument("--warmup", type=positive_int, default=None,
                        help="Warm-up steps per case, timed apart (default 10).")


def _check_cases(cases: str) -> None:
    from trainer.cluster.case_names import CaseError, parse

    for name in filter(None, cases.split(",")):
        try:
            parse(name)
        except CaseError as exc:
            raise UsageError(f"--cases: {exc}") from None


def _benchmark(args: argparse.Namespace, config: Any, classes: int | None) -> Any:
    from pipelines.benchmark import benchmark_of

    return benchmark_of(config, classes=args.classes or classes or 10, cases=args.cases,
                        budget=args.budget or 0, warmup=args.warmup or 0,
                        steps=args.steps or 0)


def run(args: argparse.Namespace) -> int:
    """Runs the benchmark here or on Vertex AI and prints its table and file."""
    _check_cases(args.cases)
    return _run_here(args) if args.local else _run_on_vertex(args)


def _run_here(args: argparse.Namespace) -> int:
    from pipelines.benchmark import classes_of, lines_of, prepare_here, results_name
    from pipelines.commands.common import check_model, load
    from trainer.benchmark import runner

    config = load(args)
    check_model(config)
    mine = config.training.measurements
    folder = args.output or (mine if mine and not mine.startswith("gs://") else "measurements")
    with tempfile.TemporaryDirectory(prefix="gpu-pipeline-benchmark-") as work:
        data = args.data or (prepare_here(config, Path(work)) if _reads_data(args.cases)
                             else "")
        benchmark = _benchmark(args, config, classes_of(data) if data else None)
        output = f"{folder.rstrip('/')}/{results_name(benchmark, '')}"
        runner.main([*benchmark.arguments(config, data=data, output=output,
                                          call="gpu-pipeline benchmark --local"),
                     "--allow-cpu"])
    results = json.loads(Path(output).read_text())
    for line in lines_of(results, output, said=True):  # the runner printed "results:"
        print(line)
    return 0 if _measured(results) else 1


def _reads_data(cases: str) -> bool:
    """Whether a case runs through the TFRecords (the default cases do)."""
    from trainer.cluster.case_names import parse

    return not cases or any(parse(name).tfrecords for name in cases.split(",") if name)


def _measured(results: dict[str, Any]) -> bool:
    return any(c.get("phase") == "timed" for run in results.get("runs", [])
               for c in run.get("cases", []))


def _run_on_vertex(args: argparse.Namespace) -> int:
    from components.stage_messages import say
    from pipelines.benchmark import classes_of, lines_of
    from pipelines.commands.common import vertex_config
    from pipelines.vertex.benchmark_job import run_on_vertex
    from pipelines.vertex.clients import Clients

    config = vertex_config(args)
    benchmark = _benchmark(args, config, classes_of(args.data) if args.data else None)
    results, output, cost = run_on_vertex(
        config, benchmark, data=args.data, folder=args.output or config.measurements_location(),
        dry_run=args.dry_run, clients=Clients(), log=say, verbose=args.verbose)
    if results is None:
        return 0
    for line in lines_of(results, output, cost):
        print(line)
    return 0 if _measured(results) else 1
