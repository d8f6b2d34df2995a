"""Dataset preparation speed and shard sizes: small synthetic images and 224x224 photos.

Generates two sources (not timed): the builtin shapes (PNG, 128x128, prepared at 64x64)
and photo-like JPEGs (500x375, the typical ImageNet photo, prepared at 224x224, stored as
JPEG and as PNG). In interleaved rounds, times with 1 process and with all cores:

  - the floor: reading and decoding every source image once (nothing else);
  - the dataset stage (components.dataset.prepare.prepare_dataset: decode, resize, re-encode,
    write sharded TFRecords, manifest and report).

Reports images/s (and per core), the ratio to the floor, the stored bytes per image, and
the shards the stage plans at ImageNet's scale (1,281,167 images) against the TFRecord
guide's 100-200 MB per shard.

Usage: python benchmarks/dataset_prep.py [--shapes N] [--photos N] [--rounds N]
       [--output FILE]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import common

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

IMAGENET_TRAIN = 1_281_167
GUIDE_MB = (100, 200)


def _decode(path: str) -> int:
    from PIL import Image

    with Image.open(path) as img:
        img.load()
        return img.size[0]


def floor_seconds(paths: list[str], processes: int) -> float:
    """Time to read and decode every image once."""
    started = time.perf_counter()
    if processes == 1:
        for p in paths:
            _decode(p)
    else:
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            for _ in pool.imap_unordered(_decode, paths, chunksize=16):
                pass
    return time.perf_counter() - started


#: Sources: name -> (generated folder, image size, stored format).
SOURCES = {"shapes 64 png": ("shapes", 64, "png"), "photos 224 jpeg": ("photos", 224, "jpeg"),
           "photos 224 png": ("photos", 224, "png")}


def measure(args: argparse.Namespace, cores: int) -> tuple[dict, dict[str, float]]:
    """(images/s samples per case, stored bytes per image per source), in interleaved
    rounds, on sources generated in a temporary directory."""
    from components.dataset.prepare import prepare_source
    from components.dataset.shapes import generate_shapes

    with tempfile.TemporaryDirectory(prefix="bench-dataset-") as tmp:
        work = Path(tmp)
        folders = {"shapes": generate_shapes(work / "shapes", args.shapes // 4, 128),
                   "photos": common.photo_like_folder(work / "photos", 3, args.photos // 3,
                                                      500, 375)}
        paths = {kind: sorted(str(p) for p in folder.rglob("*.*"))
                 for kind, folder in folders.items()}
        import tensorflow  # noqa: F401 - imported once, outside the timings

        stored: dict[str, float] = {}
        runs = iter(range(10**6))

        def prepare(name: str, processes: int) -> float:
            kind, size, image_format = SOURCES[name]
            started = time.perf_counter()
            manifest = prepare_source(str(folders[kind]), work / f"out-{next(runs)}",
                                      image_size=size, test_fraction=0.1, input_pipelines=2,
                                      processes=processes, image_format=image_format)
            rate = len(paths[kind]) / (time.perf_counter() - started)
            shards = [s for split in manifest["splits"].values() for s in split["shards"]]
            stored[name] = sum(s["bytes"] for s in shards) / sum(s["count"] for s in shards)
            return rate

        cases = {}
        for processes in sorted({1, cores}):
            for kind in folders:
                cases[f"floor {kind} source, {processes} proc"] = (
                    lambda k=kind, p=processes: len(paths[k]) / floor_seconds(paths[k], p))
            for name in SOURCES:
                cases[f"{name}, {processes} proc"] = (lambda n=name, p=processes: prepare(n, p))
        return common.interleaved(cases, args.rounds, unit=" img/s"), stored


def source_row(name: str, med: dict[str, float], stored: dict[str, float],
               cores: int) -> dict:
    """One source's figures: per process count, and its shards at ImageNet's scale."""
    from components.dataset.splits import estimated_bytes, shard_count

    kind, size, image_format = SOURCES[name]
    row = {}
    for processes in sorted({1, cores}):
        key = f"{name}, {processes} proc"
        row[f"{processes}_proc"] = {
            "images_per_second": round(med[key], 1),
            "per_core": round(med[key] / processes, 1),
            "ratio_to_floor": round(med[f"floor {kind} source, {processes} proc"] / med[key],
                                    2)}
    planned = shard_count(IMAGENET_TRAIN, estimated_bytes(IMAGENET_TRAIN, size, image_format),
                          input_pipelines=8)
    shard_mb = IMAGENET_TRAIN * stored[name] / planned / 2**20
    row["imagenet_scale"] = {"shards": planned, "mb_per_shard": round(shard_mb, 1),
                             "within_guide": GUIDE_MB[0] <= shard_mb <= GUIDE_MB[1]}
    all_cores = row[f"{cores}_proc"]
    print(f"{name}: {row['1_proc']['images_per_second']:,.0f} images/s on 1 process "
          f"({row['1_proc']['ratio_to_floor']:.2f}x the floor's time), "
          f"{all_cores['images_per_second']:,.0f} on {cores} ({all_cores['per_core']:,.0f} "
          f"per core); {stored[name]:,.0f} bytes per image; at ImageNet's scale "
          f"{planned} shards of {shard_mb:.0f} MB (guide {GUIDE_MB[0]}-{GUIDE_MB[1]} MB)")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", type=int, default=3000, help="Builtin shapes images.")
    parser.add_argument("--photos", type=int, default=600, help="Photo-like images.")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    info = common.machine()
    cores = info["cores"]
    print(f"machine: {common.describe_machine(info)}", flush=True)
    samples, stored = measure(args, cores)
    med = common.medians(samples)
    results = {"machine": info, "images": {"shapes": args.shapes, "photos": args.photos},
               "images_per_second": samples, "median_images_per_second": med,
               "stored_bytes_per_image": {k: round(v) for k, v in stored.items()},
               "sources": {k: {"image_size": v[1], "format": v[2]} for k, v in SOURCES.items()},
               "per_source": {name: source_row(name, med, stored, cores) for name in SOURCES}}
    jpeg, png = (results["stored_bytes_per_image"][f"photos 224 {f}"] for f in ("jpeg", "png"))
    results["png_over_jpeg_bytes"] = round(png / jpeg, 2)
    results["jpeg_over_png_prepare_speed"] = common.ratio(
        samples, f"photos 224 jpeg, {cores} proc", f"photos 224 png, {cores} proc")
    print(f"photos at 224: PNG takes {results['png_over_jpeg_bytes']:.2f}x JPEG's bytes; JPEG "
          f"prepares {results['jpeg_over_png_prepare_speed']['median']:.2f}x as fast")
    print(f"results: {common.save('dataset_prep', results, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
