"""Dataset preparation speed: images/s with 1 process and with all cores, against the floor.

Generates a folder of a few thousand images (not timed), then times:

  - the floor: reading and decoding every image once (nothing else), with 1 process and
    with all cores;
  - the dataset stage (components.dataset.prepare_dataset: decode, resize, re-encode,
    write sharded TFRecords, manifest and report), with 1 process and with all cores.

Usage: python benchmarks/dataset_prep.py [--images N] [--source-size PX] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--source-size", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    from components.dataset.prepare import prepare_dataset
    from components.dataset.shapes import generate_shapes

    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-dataset-") as work:
        source = generate_shapes(Path(work) / "source", args.images // 4, args.source_size)
        paths = sorted(str(p) for p in source.rglob("*.png"))
        n = len(paths)
        print(f"{n} PNG images {args.source_size}x{args.source_size} -> "
              f"{args.image_size}x{args.image_size}; {cores} cores", flush=True)
        import tensorflow  # noqa: F401 - imported once, outside the timings

        results = {}
        for processes in (1, cores):
            floor = floor_seconds(paths, processes)
            started = time.perf_counter()
            prepare_dataset(str(source), Path(work) / f"out-{processes}",
                            image_size=args.image_size, test_fraction=0.1, min_shards=2,
                            processes=processes)
            seconds = time.perf_counter() - started
            results[processes] = {"prepare_seconds": round(seconds, 2),
                                  "images_per_second": round(n / seconds, 1),
                                  "floor_seconds": round(floor, 2),
                                  "floor_images_per_second": round(n / floor, 1),
                                  "ratio_to_floor": round(seconds / floor, 2)}
            r = results[processes]
            print(f"{processes} process(es): {r['images_per_second']:.0f} images/s "
                  f"({seconds:.1f} s); floor (read + decode once) {r['floor_images_per_second']:.0f}"
                  f" images/s ({floor:.1f} s); ratio {r['ratio_to_floor']:.2f}", flush=True)

    speedup = results[1]["prepare_seconds"] / results[cores]["prepare_seconds"]
    print(f"all cores vs 1 process: {speedup:.2f}x")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({
            "machine": f"{cores} CPUs, {platform.machine()}, Python {platform.python_version()}",
            "images": n, "source_size": args.source_size, "image_size": args.image_size,
            "runs": {str(k): v for k, v in results.items()}, "speedup": round(speedup, 2)},
            indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
