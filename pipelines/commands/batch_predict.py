"""`gpu-pipeline batch-predict SOURCE --output DIR`: every image of a folder or a manifest
scored by the local champion (or a named version), through the serving container's own
predictor, written as Vertex AI's batch prediction writes its output
(`components.serving.batch`). On Vertex AI the same scoring is the pipeline's batch step
(`vertex.batch_predict`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pipelines.commands.common import (
    UsageError,
    make_directory,
    positive_int,
    tensorflow_start_quietly,
)
from pipelines.commands.predict import add_model_flags, local_model


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser(
        "batch-predict", help="Score a folder or a manifest of images with the local champion.")
    parser.add_argument("source", metavar="SOURCE",
                        help="A folder of images (searched recursively), or a .txt manifest "
                             "with one image path per line.")
    parser.add_argument("--output", type=Path, required=True,
                        help="The folder the predictions are written to.")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="Images per predict call (default: %(default)s).")
    add_model_flags(parser)


def run(args: argparse.Namespace) -> int:
    """Scores the images and says where the predictions are."""
    import os
    import time

    from components.serving import batch

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    paths = batch.image_paths(args.source)
    entry, saved = local_model(args)
    make_directory(args.output, "--output")
    if (args.output / batch.RESULTS).exists():
        raise UsageError(f"--output {str(args.output)!r} already holds predictions "
                         f"({batch.RESULTS}); give another folder or remove them")
    print(f"batch-predict: {len(paths)} images with {args.model} version {entry['version']} "
          f"({saved})", flush=True)
    # TensorFlow is imported only once the source, the model and the output are known good:
    # a mistake is said in a second, not after TensorFlow's start-up.
    from trainer.serving.app import SavedModelPredictor

    predictor = SavedModelPredictor()
    with tensorflow_start_quietly():
        predictor.load(saved)
    started = time.monotonic()
    results, errors = batch.score(
        predictor, paths, batch_size=args.batch_size,
        progress=lambda done: print(f"batch-predict: {done}/{len(paths)}", file=sys.stderr,
                                    flush=True))
    written = batch.write_output(args.output, results, errors)
    seconds = time.monotonic() - started
    for error in errors:  # each also in the errors file, as Vertex AI writes it
        print(f"batch-predict: refused {error[batch.KEY]}: {error['error']['message']}",
              file=sys.stderr)
    print(f"batch-predict: {len(results)} predicted, {len(errors)} refused, in {seconds:.1f} s "
          f"({len(paths) / seconds:.1f} images/s)")
    for path in written:
        print(f"  {path}")
    return 1 if errors else 0
