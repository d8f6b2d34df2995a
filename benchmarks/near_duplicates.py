"""The near-duplicate check's calibration: how far each test image is from the closest
training image, on clean data, and how far resized and re-encoded copies are from their
originals, with the project's own thumbnails (`components.dataset.image_facts`).

Datasets: the builtin shapes (200 a class) at 32, 64 and 128 px, and the UCI handwritten
digits (1,797 images, `tests/support/data`) at 8, 16 and 32 px; a fixed fifth of each is
the test split. Copies: 80 training images each resized by 0.5, 0.75, 1.5 and 2 (bicubic),
stored as PNG and as JPEG quality 75.

Reports per dataset: the closest distinct image's difference (minimum, 1st and 5th
percentiles), the share of the test split `duplicates` flags at
`dataset.near_duplicate_difference` and how many of those pair two labels; per copy kind,
the largest difference from its original.

Usage: python benchmarks/near_duplicates.py [--limit L] [--output FILE]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import sys

import common

from components.dataset.data_statistics import duplicates
from components.dataset.dataset_options import DatasetOptions
from components.dataset.image_facts import difference, thumbnail
from components.dataset.shapes import SHAPE_CLASSES, draw_shape
from tests.support.uci_digits import digit_images

SCALES = (0.5, 0.75, 1.5, 2.0)
FORMATS = ("PNG", "JPEG")


def _datasets() -> dict[str, list]:
    shapes = {f"shapes {size} px": [(draw_shape(name, i, size), label)
                                     for label, name in enumerate(SHAPE_CLASSES)
                                     for i in range(200)] for size in (32, 64, 128)}
    digits = {f"digits {size} px": list(digit_images(size)) for size in (8, 16, 32)}
    return {**shapes, **digits}


def _copy(img, scale: float, image_format: str):
    from PIL import Image

    side = max(4, round(img.width * scale))
    buf = io.BytesIO()
    img.convert("RGB").resize((side, side), Image.BICUBIC).save(
        buf, image_format, **({"quality": 75} if image_format == "JPEG" else {}))
    return Image.open(io.BytesIO(buf.getvalue()))


def measure(images: list, limit: float) -> dict:
    """One dataset's figures (see the module's docstring)."""
    order = list(range(len(images)))
    random.Random(1).shuffle(order)
    test = set(order[:len(images) // 5])
    noted = [("test" if i in test else "train", f"{i:05d}", label, img.width, img.height,
              "PNG", f"{i:016x}", thumbnail(img)) for i, (img, label) in enumerate(images)]
    train = [n for n in noted if n[0] == "train"]
    closest = sorted(min(difference(q[7], t[7]) for t in train)
                     for q in noted if q[0] == "test")
    found = duplicates(noted, limit)["across"]["test-train"]
    copies = {}
    for img, _ in [images[i] for i in order[len(test):len(test) + 80]]:
        for scale in SCALES:
            for image_format in FORMATS:
                worst = copies.setdefault(f"{scale:g}x {image_format}", 0.0)
                copies[f"{scale:g}x {image_format}"] = max(worst, difference(
                    thumbnail(img), thumbnail(_copy(img, scale, image_format))))
    return {"test": len(closest), "closest_min": round(closest[0], 2),
            "closest_p1": round(closest[len(closest) // 100], 2),
            "closest_p5": round(closest[len(closest) // 20], 2),
            "closest_median": round(statistics.median(closest), 2),
            "flagged": found["near"], "flagged_share": round(found["near"] / len(closest), 4),
            "other_label": found["other_label"],
            "copies_max": {k: round(v, 2) for k, v in copies.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=float,
                        default=DatasetOptions.model_fields["near_duplicate_difference"].default)
    parser.add_argument("--output", type=common.Path, default=None)
    args = parser.parse_args(argv)
    info = common.machine()
    print(common.describe_machine(info))
    results = {}
    kinds = [f"{s:g}x {f}" for s in SCALES for f in FORMATS]
    print(f"| data | test | closest distinct: min / p1 / p5 / median | flagged at {args.limit:g}"
          " | of them across labels | " + " | ".join(kinds) + " |")
    for name, images in _datasets().items():
        found = results[name] = measure(images, args.limit)
        print(f"| {name} | {found['test']} | {found['closest_min']} / {found['closest_p1']} / "
              f"{found['closest_p5']} / {found['closest_median']} | {found['flagged']} "
              f"({found['flagged_share']:.1%}) | {found['other_label']} | "
              + " | ".join(f"{found['copies_max'][k]:g}" for k in kinds) + " |")
    written = common.save("near_duplicates", {"machine": info, "limit": args.limit,
                                              "datasets": results}, args.output)
    print(f"written {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
