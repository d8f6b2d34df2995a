"""`gpu-pipeline predict IMAGE...`: each image's top classes from the local champion (or
a named version), through the code path the model server runs (`trainer.serving.app`'s
predictor: the same request checks, signature and answer)."""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path
from typing import Any

from pipelines.commands.common import DEFAULT_LOCAL_ROOT, UsageError, positive_int


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """Which local model: the pipeline root, the model's name and its version."""
    from components.vertex_options import VertexOptions

    parser.add_argument("--pipeline-root", type=Path, default=DEFAULT_LOCAL_ROOT,
                        help=f"The local runs' root (default: {DEFAULT_LOCAL_ROOT}/).")
    parser.add_argument("--model", default=VertexOptions().model_display_name,
                        help="The model's name in the local registry (vertex."
                             "model_display_name; default: %(default)s).")
    parser.add_argument("--version", default="",
                        help="A version of it (default: the default version, the champion).")


def local_model(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """(the registry entry, the SavedModel directory) the flags name."""
    from components.export import local_registry as local
    from pipelines.local_run import REGISTRY

    return local.served(args.pipeline_root / REGISTRY, args.model, args.version)


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("predict", help="Classify images with the local champion.")
    parser.add_argument("images", nargs="+", type=Path, metavar="IMAGE",
                        help="JPEG, PNG, GIF or BMP files.")
    parser.add_argument("--top", type=positive_int, default=3,
                        help="How many classes to print per image (default: %(default)s).")
    add_model_flags(parser)


def run(args: argparse.Namespace) -> int:
    """Prints each image's top classes with their probabilities."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    entry, saved = local_model(args)
    instances = []
    for path in args.images:
        try:
            instances.append({"b64": base64.b64encode(path.read_bytes()).decode()})
        except OSError as exc:
            raise UsageError(f"IMAGE {str(path)!r} cannot be read: {exc.strerror}") from None
    from fastapi import HTTPException

    from trainer.serving.app import SavedModelPredictor
    from trainer.serving.container import METADATA_FILE

    predictor = SavedModelPredictor()
    predictor.load(saved)
    classes = json.loads((Path(saved) / METADATA_FILE).read_text())["class_names"]
    print(f"{args.model} version {entry['version']} ({saved})")
    for path, instance in zip(args.images, instances, strict=True):
        try:
            answer = predictor.postprocess(predictor.predict(predictor.preprocess(
                {"instances": [instance]})))["predictions"][0]
        except HTTPException as exc:  # what the server would answer with 400
            raise UsageError(f"IMAGE {str(path)!r}: {exc.detail.replace('instances[0]', 'it')}"
                             ) from None
        ranked = sorted(enumerate(answer["probabilities"]), key=lambda p: -p[1])[:args.top]
        print(f"{path}: " + ", ".join(f"{classes[i]} {p:.3f}" for i, p in ranked))
    return 0
