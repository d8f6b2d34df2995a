"""`gpu-pipeline predict IMAGE...`: each image's top classes from the local champion (or
a named version), through the code path the model server runs (`trainer.serving.app`'s
predictor: the same request checks, signature and answer); with `--config` or
`--endpoint`, from the Vertex AI endpoint that serves the champion
(`components.serving.online`), the request printed instead with `--dry-run`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pipelines.commands.common import (
    DEFAULT_LOCAL_ROOT,
    UsageError,
    positive_int,
    tensorflow_start_quietly,
)
from trainer.serving.container import FORMATS


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """Which local model: the pipeline root, the model's name and its version."""
    from components.vertex_options import VertexOptions

    parser.add_argument("--pipeline-root", type=Path, default=DEFAULT_LOCAL_ROOT,
                        help=f"The local runs' root (default: {DEFAULT_LOCAL_ROOT}/).")
    parser.add_argument("--model", default=None,
                        help="The model's name in the local registry (vertex."
                             "model_display_name; default: the model the last local run "
                             f"registered, {VertexOptions().model_display_name} in the demo).")
    parser.add_argument("--version", default="",
                        help="A version of it (default: the default version, the champion).")


def local_model(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """(the registry entry, the SavedModel directory) the flags name."""
    from components.export import local_registry as local
    from components.vertex_options import VertexOptions
    from pipelines.local_run import REGISTRY

    registry = args.pipeline_root / REGISTRY
    if args.model is None:  # the model the user's last run trained, whatever its name
        args.model = local.latest(registry) or VertexOptions().model_display_name
    return local.served(registry, args.model, args.version)


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser(
        "predict", help="Classify images with the champion, local or on its Vertex AI endpoint.")
    parser.add_argument("images", nargs="+", type=Path, metavar="IMAGE",
                        help=f"{FORMATS} files.")
    parser.add_argument("--top", type=positive_int, default=3,
                        help="How many classes to print per image (default: %(default)s).")
    add_model_flags(parser)
    vertex = parser.add_argument_group(
        "on Vertex AI (either flag sends the images to the endpoint instead)")
    vertex.add_argument("--config", type=Path,
                        help="YAML configuration: vertex.project, vertex.region and "
                             "vertex.deploy.endpoint say which endpoint.")
    vertex.add_argument("--endpoint", help="The endpoint: its resource name, or its display "
                                           "name in vertex.region (default: vertex.deploy."
                                           "endpoint).")
    vertex.add_argument("--dry-run", action="store_true",
                        help="Print the request instead of sending it.")


def read_images(paths: list[Path]) -> list[bytes | str]:
    """Each image's bytes, or why it cannot be read."""
    images: list[bytes | str] = []
    for path in paths:
        try:
            images.append(path.read_bytes())
        except OSError as exc:
            images.append(f"cannot be read: {exc.strerror}")
    return images


def top_classes(probabilities: list[float], classes: list[str] | None, top: int) -> str:
    """`cat 0.912, dog 0.051`: the `top` most probable classes."""
    ranked = sorted(enumerate(probabilities), key=lambda p: -p[1])[:top]
    return ", ".join(f"{classes[i] if classes else f'class {i}'} {p:.3f}" for i, p in ranked)


def run(args: argparse.Namespace) -> int:
    """Prints each image's top classes with their probabilities."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.config is not None or args.endpoint:
        return _on_vertex(args)
    if args.dry_run:
        raise UsageError("--dry-run prints the request to a Vertex AI endpoint; give --config "
                         "or --endpoint with it (a local prediction sends nothing)")
    from trainer.serving.container import METADATA_FILE, encoded_instance

    # The user's mistakes (a version, every file unreadable) are said before the
    # predictor's imports.
    entry, saved = local_model(args)
    images = read_images(args.images)
    if all(isinstance(image, str) for image in images):
        raise UsageError("; ".join(f"IMAGE {str(path)!r} {why}"
                                   for path, why in zip(args.images, images, strict=True)))
    from fastapi import HTTPException

    from trainer.serving.app import SavedModelPredictor

    predictor = SavedModelPredictor()
    with tensorflow_start_quietly():
        predictor.load(saved)
    classes = json.loads((Path(saved) / METADATA_FILE).read_text())["class_names"]
    print(f"{args.model} version {entry['version']} ({saved})")
    failed = 0
    for path, image in zip(args.images, images, strict=True):
        # One bad image costs its own line; the others are still predicted.
        why = f" {image}" if isinstance(image, str) else ""
        if not why:
            try:
                answer = predictor.answer(
                    {"instances": [encoded_instance(image)]})["predictions"][0]
            except HTTPException as exc:  # what the server would answer with 400
                why = ": " + exc.detail.replace("instances[0]", "it")
        if why:
            failed += 1
            print(f"error: IMAGE {str(path)!r}{why}", file=sys.stderr)
            continue
        print(f"{path}: {top_classes(answer['probabilities'], classes, args.top)}")
    if failed:
        print(f"error: {failed} of {len(images)} image(s) not predicted", file=sys.stderr)
    return 1 if failed else 0


def _endpoint(args: argparse.Namespace) -> tuple[str, str, str, str, str]:
    """(the endpoint as the user named it, its resource name or "" when only its display
    name is known, its region, the project, its Private Service Connect address or ""),
    from the flags and the configuration."""
    from components.serving.deploy_options import endpoint_region
    from pipelines.commands.common import load

    vertex = load(args).vertex
    endpoint = args.endpoint or vertex.deploy.endpoint
    if not endpoint:
        raise UsageError("predict on Vertex AI needs an endpoint: give --endpoint, or set "
                         "vertex.deploy.endpoint in the --config file")
    psc = vertex.deploy.private_service_connect
    if psc.enabled and not psc.address:
        raise UsageError("vertex.deploy.private_service_connect makes the endpoint reachable "
                         "only through a PSC endpoint in your network: set its address (the "
                         "IP address or DNS name of the forwarding rule that targets the "
                         "endpoint's service attachment)")
    region = endpoint_region(endpoint)
    if region is not None:
        return endpoint, endpoint, region, endpoint.split("/")[1], psc.address
    if not vertex.project:
        raise UsageError(f"--endpoint {endpoint!r} is a display name; finding it needs "
                         "vertex.project (in the --config file), or give the endpoint's "
                         "resource name projects/PROJECT/locations/REGION/endpoints/ID")
    return endpoint, "", vertex.region, vertex.project, psc.address


def _on_vertex(args: argparse.Namespace) -> int:
    """Sends the images to the endpoint (or prints the request) and prints the answers."""
    from components.serving import online

    images = read_images(args.images)
    named, resource, region, project, address = _endpoint(args)
    if args.dry_run:
        shown = resource or (f"projects/{project}/locations/{region}/endpoints/"
                             f"<the ID of the endpoint named {named!r}>")
        print("\n".join(online.dry_run_lines(region, shown, images, address)))
        print("(dry run: nothing was sent)")
        return 0
    if not resource:
        resource = online.find_endpoint(named, project, region)
    answer = online.predict(resource, region, images, address=address)
    print(f"{resource}: deployed model {answer.deployed_model_id} ({answer.model})")
    for path, prediction in zip(args.images, answer.predictions, strict=True):
        print(f"{path}: {top_classes(prediction['probabilities'], answer.class_names, args.top)}")
    return 0

