"""Dataset preparation: image sources -> sharded TFRecords per split, with a manifest.

Plain functions; the KFP components in `components.ops` only call them. Sources:

- a folder with one sub-folder of images per class: a local path, Vertex's `/gcs/` mount,
  or a `gs://bucket/prefix` read with google-cloud-storage;
- a CSV or JSONL manifest of (image URI, label), the URIs local, relative to the manifest
  or `gs://`;
- `tfds://NAME[/SPLIT]`, a TensorFlow Datasets dataset already on disk (optional extra;
  never downloaded);
- `builtin://shapes`, a small image-classification dataset this module draws itself, the
  pipeline's embedded default.

Images are decoded, resized and re-encoded by a pool of processes (all cores) and written
as they come, so memory does not grow with the dataset. Undecodable images are skipped and
listed; above a threshold the stage fails. Shards are written to a temporary directory and
moved into place only when complete.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
import multiprocessing
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from components.errors import InputError

BUILTIN_SHAPES = "builtin://shapes"
TFDS_PREFIX = "tfds://"
#: Where Vertex AI mounts Cloud Storage (gs://BUCKET/PATH is /gcs/BUCKET/PATH there).
GCS_MOUNT = "/gcs/"
SHAPE_CLASSES = ("circle", "cross", "square", "triangle")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
MANIFEST_NAME = "manifest.json"
REPORT_NAME = "report.md"
SPLITS = ("train", "validation", "test")
#: Aim per shard for large data (the TFRecord guide's 100-200 MB).
TARGET_SHARD_BYTES = 150 * 2**20

# Feature keys of every tf.train.Example the stage writes and the trainer reads.
FEATURE_IMAGE = "image/encoded"
FEATURE_LABEL = "image/class/label"
FEATURE_ID = "image/id"


class DatasetError(InputError):
    """A dataset source or parameter the stage cannot use."""


@dataclasses.dataclass(frozen=True)
class Example:
    """One source image: where to read it, its stable identity and its label index."""

    ref: str
    identity: str
    label: int
    size: int = 0


@dataclasses.dataclass
class SourceListing:
    """What a source holds, before any image is read."""

    kind: str
    classes: list[str]
    examples: list[Example]
    fingerprint: str


# --- The builtin dataset -------------------------------------------------------------


def generate_shapes(out_dir: str | os.PathLike, images_per_class: int = 400,
                    image_size: int = 32, seed: int = 0) -> Path:
    """Draws the builtin shapes dataset as PNG files in one folder per class.

    Each image is one filled shape (circle, cross, square, triangle) of random size,
    position and colour on a darker background of random colour, with pixel noise: a
    task a small CNN learns in seconds, yet one that needs spatial features.

    Args:
        out_dir: Directory to create the class folders in.
        images_per_class: Number of images per class.
        image_size: Width and height in pixels.
        seed: Seed of the generator; the same seed draws the same images.

    Returns:
        The output directory.
    """
    from PIL import Image, ImageDraw

    out = Path(out_dir)
    rng = random.Random(seed)
    scale = 4  # Draw large and downsample, for anti-aliased edges.
    big = image_size * scale
    for label in SHAPE_CLASSES:
        (out / label).mkdir(parents=True, exist_ok=True)
    for i in range(images_per_class):
        for label in SHAPE_CLASSES:
            # A darker background and a brighter shape, each of random colour: the
            # shape's outline, not its colour, tells the class.
            background = tuple(rng.randrange(0, 110) for _ in range(3))
            colour = tuple(rng.randrange(140, 256) for _ in range(3))
            img = Image.new("RGB", (big, big), background)
            draw = ImageDraw.Draw(img)
            size = rng.uniform(0.35, 0.8) * big
            cx = rng.uniform(size / 2, big - size / 2)
            cy = rng.uniform(size / 2, big - size / 2)
            half = size / 2
            if label == "circle":
                draw.ellipse([cx - half, cy - half, cx + half, cy + half], fill=colour)
            elif label == "square":
                draw.rectangle([cx - half, cy - half, cx + half, cy + half], fill=colour)
            elif label == "triangle":
                draw.polygon([(cx, cy - half), (cx - half, cy + half), (cx + half, cy + half)],
                             fill=colour)
            else:  # cross
                bar = size / 6
                draw.rectangle([cx - half, cy - bar, cx + half, cy + bar], fill=colour)
                draw.rectangle([cx - bar, cy - half, cx + bar, cy + half], fill=colour)
            img = img.resize((image_size, image_size), Image.BILINEAR)
            # Noise from the seeded generator (Pillow's effect_noise is not seedable).
            noise = Image.frombytes("RGB", (image_size, image_size),
                                    rng.randbytes(image_size * image_size * 3))
            img = Image.blend(img, noise, 0.06)
            img.save(out / label / f"{label}_{i:05d}.png", optimize=False)
    return out


# --- Reading bytes (local files and Cloud Storage) -------------------------------------

_GCS_CLIENT = None


def storage_client():
    """A Cloud Storage client; with STORAGE_EMULATOR_HOST set, an anonymous one for it."""
    global _GCS_CLIENT
    if _GCS_CLIENT is None:
        from google.cloud import storage

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            _GCS_CLIENT = storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT", "local"),
                                         credentials=AnonymousCredentials())
        else:
            _GCS_CLIENT = storage.Client()
    return _GCS_CLIENT


def mounted_gcs_uri(source: str) -> str | None:
    """The `gs://` URI of a path on Vertex AI's Cloud Storage mount, else None."""
    return "gs://" + source[len(GCS_MOUNT):] if source.startswith(GCS_MOUNT) else None


def split_gcs_uri(uri: str) -> tuple[str, str]:
    """`gs://bucket/path` -> (bucket, path)."""
    bucket, _, path = uri[len("gs://"):].partition("/")
    if not bucket:
        raise DatasetError(f"{uri!r} names no bucket; expected gs://BUCKET/PATH")
    return bucket, path


def read_bytes(ref: str) -> bytes:
    """The bytes of a local path or a gs:// object."""
    if ref.startswith("gs://"):
        bucket, path = split_gcs_uri(ref)
        return storage_client().bucket(bucket).blob(path).download_as_bytes()
    with open(ref, "rb") as f:
        return f.read()


# --- Listing sources -------------------------------------------------------------------


def _classes_from(labels: Iterable[str], where: str) -> list[str]:
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise DatasetError(f"{where} has {len(classes)} class(es) ({', '.join(classes) or 'none'});"
                           " classification needs at least 2")
    return classes


def _check_extension(name: str, where: str, unknown: list[str]) -> bool:
    suffix = Path(name).suffix.lower()
    if suffix in IMAGE_EXTENSIONS:
        return True
    unknown.append(f"{where}/{name}" if where else name)
    return False


def _raise_unknown(unknown: list[str], where: str) -> None:
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5
                                          else "")
        raise DatasetError(f"{where} holds {len(unknown)} file(s) of unknown type ({shown}); "
                           f"image files end in {', '.join(IMAGE_EXTENSIONS)}: remove or "
                           "convert the others")


def list_image_folder(source_dir: str | os.PathLike) -> tuple[list[str], list[tuple[str, int]]]:
    """Lists a local image folder with one sub-folder per class.

    Args:
        source_dir: Directory whose sub-folders are the class names.

    Returns:
        (class names sorted, [(path relative to source_dir, label index), ...]).

    Raises:
        DatasetError: The directory is missing, has fewer than two classes, a class folder
            holds no image, or files of unknown type.
    """
    listing = _list_local_folder(str(source_dir))
    return listing.classes, [(e.identity, e.label) for e in listing.examples]


def _list_local_folder(source: str) -> SourceListing:
    root = Path(source)
    if not root.is_dir():
        raise DatasetError(f"dataset source {source!r} is not a directory; expected a folder "
                           f"with one sub-folder of images per class, a CSV/JSONL manifest, a "
                           f"gs:// prefix, {TFDS_PREFIX}NAME or {BUILTIN_SHAPES!r}")
    names = [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    classes = _classes_from(names, f"dataset source {source!r}")
    examples, unknown = [], []
    h = hashlib.sha256()
    for label, name in enumerate(classes):
        count = 0
        for path in sorted((root / name).rglob("*")):
            rel = str(path.relative_to(root))
            if not path.is_file() or any(p.startswith(".") for p in Path(rel).parts):
                continue
            if _check_extension(rel, "", unknown):
                stat = path.stat()
                examples.append(Example(str(path), rel, label, stat.st_size))
                h.update(f"{rel}\0{label}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
                count += 1
        if not count and not unknown:
            raise DatasetError(f"class folder {str(root / name)!r} holds no image "
                               f"({', '.join(IMAGE_EXTENSIONS)})")
    _raise_unknown(unknown, f"dataset source {source!r}")
    return SourceListing("folder", classes, examples, "sha256:" + h.hexdigest())


def _list_gcs_folder(source: str) -> SourceListing:
    bucket, prefix = split_gcs_uri(source.rstrip("/") + "/")
    blobs = sorted(storage_client().list_blobs(bucket, prefix=prefix), key=lambda b: b.name)
    by_class: dict[str, list[Any]] = {}
    unknown: list[str] = []
    for blob in blobs:
        rel = blob.name[len(prefix):]
        if "/" not in rel or rel.endswith("/") or any(p.startswith(".") for p in rel.split("/")):
            continue
        if _check_extension(rel, "", unknown):
            by_class.setdefault(rel.split("/", 1)[0], []).append(blob)
    if not blobs:
        raise DatasetError(f"dataset source {source!r} holds no objects; expected "
                           f"{source.rstrip('/')}/<class>/<image> objects")
    _raise_unknown(unknown, f"dataset source {source!r}")
    classes = _classes_from(by_class, f"dataset source {source!r}")
    examples = []
    h = hashlib.sha256()
    for label, name in enumerate(classes):
        for blob in by_class[name]:
            rel = blob.name[len(prefix):]
            examples.append(Example(f"gs://{bucket}/{blob.name}", rel, label, blob.size or 0))
            h.update(f"{rel}\0{label}\0{blob.size}\0{blob.md5_hash}\0{blob.generation}\n".encode())
    return SourceListing("gcs-folder", classes, examples, "sha256:" + h.hexdigest())


def _manifest_rows(source: str, text: str) -> Iterator[tuple[int, str | None, str | None]]:
    if source.lower().endswith(".jsonl"):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{source}:{number} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{source}:{number} is not a JSON object with image and label")
            yield number, row.get("image"), row.get("label")
    else:
        reader = csv.DictReader(io.StringIO(text))
        missing = {"image", "label"} - set(reader.fieldnames or ())
        if missing:
            raise DatasetError(f"{source} lacks the column(s) {', '.join(sorted(missing))}; a "
                               "CSV manifest needs a header with image,label")
        for number, row in enumerate(reader, 2):
            yield number, row.get("image"), row.get("label")


def _list_manifest(source: str) -> SourceListing:
    try:
        text = read_bytes(source).decode("utf-8")
    except FileNotFoundError:
        raise DatasetError(f"dataset manifest {source!r} does not exist") from None
    base = os.path.dirname(source)
    rows, problems, unknown = [], [], []
    for number, image, label in _manifest_rows(source, text):
        label = str(label).strip() if label not in (None, "") else ""
        if not image:
            problems.append(f"{source}:{number}: no image URI")
        elif not label:
            problems.append(f"{source}:{number}: image {image!r} has no label")
        elif _check_extension(str(image), "", unknown):
            ref = image if image.startswith("gs://") or os.path.isabs(image) \
                else os.path.join(base, image)
            rows.append((ref, label))
    if problems:
        raise DatasetError(f"dataset manifest {source!r} has {len(problems)} unusable row(s): "
                           + "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else ""))
    _raise_unknown(unknown, f"dataset manifest {source!r}")
    if not rows:
        raise DatasetError(f"dataset manifest {source!r} lists no images")
    classes = _classes_from((label for _, label in rows), f"dataset manifest {source!r}")
    index = {c: i for i, c in enumerate(classes)}
    examples = [Example(ref, ref, index[label]) for ref, label in rows]
    h = hashlib.sha256(text.encode())
    for ex in examples:  # the images' own state, so a replaced file changes the key
        if not ex.ref.startswith("gs://") and os.path.exists(ex.ref):
            stat = os.stat(ex.ref)
            h.update(f"{ex.ref}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return SourceListing("manifest", classes, examples, "sha256:" + h.hexdigest())


def _list_tfds(source: str) -> SourceListing:
    name, _, split = source[len(TFDS_PREFIX):].partition("/")
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DatasetError(f"dataset source {source!r} needs tensorflow-datasets: install the "
                           "project with the [tfds] extra") from None
    try:
        builder = tfds.builder(name)
        info = builder.info
        prepared = os.path.isdir(builder.data_dir) and bool(os.listdir(builder.data_dir))
    except Exception as exc:  # noqa: BLE001 - tfds raises many types for unknown names
        raise DatasetError(f"TFDS dataset {name!r} cannot be used: {exc}") from None
    if not prepared:
        raise DatasetError(f"TFDS dataset {name!r} is not on disk under {builder.data_dir}; "
                           "prepare it first (this stage never downloads)")
    classes = list(info.features["label"].names)
    split = split or "train"
    total = info.splits[split].num_examples
    examples = [Example(f"{source}#{i}", f"{name}/{split}/{i}", -1) for i in range(total)]
    fingerprint = f"tfds:{name}:{info.version}:{split}:{total}"
    return SourceListing("tfds", classes, examples, fingerprint)


def list_source(source: str, work_dir: str | os.PathLike | None = None,
                image_size: int = 32, builtin_images_per_class: int = 400) -> SourceListing:
    """Lists a dataset source without reading its images.

    Args:
        source: See the module docstring for the accepted forms.
        work_dir: Where `builtin://shapes` is drawn (required for it).
        image_size: Size the builtin shapes are drawn at.
        builtin_images_per_class: Images per class of the builtin shapes.

    Returns:
        The classes, the examples and a fingerprint that changes when the source does.

    Raises:
        DatasetError: The source is missing or unusable (the message says how).
    """
    if not isinstance(source, str) or not source:
        raise DatasetError(f"dataset source is {source!r}; expected a folder, a manifest, a "
                           f"gs:// prefix, {TFDS_PREFIX}NAME or {BUILTIN_SHAPES!r}")
    if source == BUILTIN_SHAPES:
        if work_dir is None:
            return SourceListing("builtin", list(SHAPE_CLASSES), [], _builtin_fingerprint(
                image_size, builtin_images_per_class))
        folder = generate_shapes(Path(work_dir) / "builtin-shapes", builtin_images_per_class,
                                 image_size)
        listing = _list_local_folder(str(folder))
        listing.kind = "builtin"
        listing.fingerprint = _builtin_fingerprint(image_size, builtin_images_per_class)
        return listing
    if source.startswith(TFDS_PREFIX):
        return _list_tfds(source)
    if source.lower().endswith((".csv", ".jsonl")):
        return _list_manifest(source)
    if source.startswith("gs://"):
        return _list_gcs_folder(source)
    if "://" in source:
        raise DatasetError(f"dataset source {source!r} has an unknown scheme; use a local or "
                           f"/gcs/ path, gs://, {TFDS_PREFIX} or {BUILTIN_SHAPES}")
    return _list_local_folder(source)


def _builtin_fingerprint(image_size: int, per_class: int) -> str:
    return f"{BUILTIN_SHAPES}?images_per_class={per_class}&image_size={image_size}&v=2"


def source_fingerprint(source: str, image_size: int = 32,
                       builtin_images_per_class: int = 400) -> str:
    """A cheap key of the source's current state (names, sizes, times or checksums).

    The pipeline passes it to the preparation stage, so KFP's cache reuses the prepared
    data exactly when the source is unchanged.
    """
    return list_source(source, None, image_size, builtin_images_per_class).fingerprint


# --- Splitting and shard planning -----------------------------------------------------


def split_of(identity: str, validation_fraction: float, test_fraction: float = 0.0) -> str:
    """Assigns an example to a split by a hash of its identity.

    The same identity always lands in the same split, and adding examples never moves
    existing ones.
    """
    digest = hashlib.sha256(identity.encode("utf-8")).digest()
    position = int.from_bytes(digest[:8], "big") / 2**64
    if position < test_fraction:
        return "test"
    if position < test_fraction + validation_fraction:
        return "validation"
    return "train"


def plan_shards(examples: int, estimated_bytes: int, min_shards: int,
                target_bytes: int = TARGET_SHARD_BYTES) -> int:
    """Shards for a split: a multiple of the worker count, about `target_bytes` each.

    At least `min_shards` (the training workers), so each worker reads its own files; a
    multiple of it, so they read equal shares; never more than there are examples.
    """
    by_size = max(1, math.ceil(estimated_bytes / target_bytes))
    shards = max(min_shards, math.ceil(by_size / min_shards) * min_shards)
    return max(1, min(shards, examples))


# --- Decoding and encoding (in worker processes) ----------------------------------------


#: (index in the write order, PNG bytes or None, reason when None, label or None).
Result = tuple[int, "bytes | None", "str | None", "int | None"]


def _to_png(img: Any, size: int) -> bytes:
    from PIL import Image

    img = img.convert("RGB")
    if img.size != (size, size):
        img = img.resize((size, size), Image.BILINEAR)
    buf = io.BytesIO()
    # Fast zlib level: ~1.8x quicker to encode than the default for ~17% larger shards,
    # which training reads once and caches decoded.
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _encode(task: tuple[int, str, int]) -> Result:
    """Reads, decodes, converts and resizes one image; returns PNG bytes or the reason."""
    from PIL import Image

    index, ref, size = task
    try:
        data = read_bytes(ref)
    except Exception as exc:  # noqa: BLE001 - local and Cloud Storage errors alike
        if isinstance(exc, FileNotFoundError) or type(exc).__name__ == "NotFound":
            return index, None, "missing file", None
        return index, None, f"cannot read ({str(exc).splitlines()[0][:120]})", None
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # forces a full decode: truncated files fail here
            return index, _to_png(img, size), None, None
    except Exception as exc:  # noqa: BLE001 - any decoder failure means a bad image
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        return index, None, f"cannot decode ({reason})", None


def _tfds_results(order: Sequence[Example], size: int) -> Iterator[Result]:
    """Encoded TFDS images, with the labels TFDS stores (read in TFDS order)."""
    import tensorflow_datasets as tfds
    from PIL import Image

    source = order[0].ref.split("#", 1)[0]
    name, _, split = source[len(TFDS_PREFIX):].partition("/")
    wanted = {int(e.ref.rsplit("#", 1)[1]): i for i, e in enumerate(order)}
    dataset = tfds.as_numpy(tfds.load(name, split=split or "train", download=False,
                                      as_supervised=True, shuffle_files=False))
    for position, (image, label) in enumerate(dataset):
        if position in wanted:
            if image.ndim == 3 and image.shape[-1] == 1:  # grayscale (MNIST): PIL wants HxW
                image = image[..., 0]
            yield wanted[position], _to_png(Image.fromarray(image), size), None, int(label)


_END = object()


def bounded_imap(pool: Any, func: Any, items: Iterable[Any], window: int,
                 chunksize: int = 16) -> Iterator[Any]:
    """`pool.imap` that takes at most `window` items ahead of the consumer.

    Plain `imap` reads its whole input at once and queues results as fast as the workers
    make them; when writing is slower than decoding (many cores, a slow disk or the /gcs/
    mount), memory would grow with the dataset. Here the pool's feeder thread waits until
    the consumer has taken results.

    Args:
        pool: A `multiprocessing` pool.
        func: Function to map (picklable).
        items: Its inputs, read lazily.
        window: Most items taken but not yet consumed; must exceed `chunksize`.
        chunksize: Items sent to a worker at once.

    Yields:
        `func(item)` for each item, in order.
    """
    import threading

    if window <= chunksize:
        raise ValueError(f"window {window} must exceed chunksize {chunksize}")
    slots, stop = threading.Semaphore(window), threading.Event()

    def feed() -> Iterator[Any]:
        iterator = iter(items)
        while True:
            while not slots.acquire(timeout=0.1):  # a slot first, then the next item
                if stop.is_set():  # the consumer is gone: let the pool shut down
                    return
            item = next(iterator, _END)
            if item is _END:
                return
            yield item

    try:
        for result in pool.imap(func, feed(), chunksize=chunksize):
            slots.release()
            yield result
    finally:
        stop.set()


def _results(listing: SourceListing, order: Sequence[Example], size: int,
             processes: int) -> Iterator[Result]:
    """Encoded images, from a pool of processes (or inline for one)."""
    if listing.kind == "tfds":
        yield from _tfds_results(order, size) if order else ()
        return
    tasks = ((i, e.ref, size) for i, e in enumerate(order))
    if processes <= 1:
        yield from map(_encode, tasks)
        return
    # spawn: the workers must not inherit TensorFlow's threads (forking them is unsafe).
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        yield from bounded_imap(pool, _encode, tasks, window=64 * processes)


# --- Preparation ------------------------------------------------------------------------


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prepare_dataset(source: str, output_dir: str | os.PathLike, image_size: int = 32,
                    validation_fraction: float = 0.2, test_fraction: float = 0.0,
                    num_shards: int = 0, min_shards: int = 1, max_bad_fraction: float = 0.01,
                    processes: int = 0, builtin_images_per_class: int = 400,
                    report_path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Prepares sharded TFRecords per split and a manifest from an image source.

    Args:
        source: See the module docstring.
        output_dir: Directory to create; must not exist or be empty.
        image_size: Images are resized to image_size x image_size RGB.
        validation_fraction: Fraction of examples in the validation split.
        test_fraction: Fraction of examples in the test split (0 for none).
        num_shards: Shards per split; 0 plans them (see `plan_shards`).
        min_shards: Training workers; planned shard counts are multiples of it.
        max_bad_fraction: Above this fraction of undecodable images, the stage fails.
        processes: Decoding processes; 0 uses every core.
        builtin_images_per_class: Images per class drawn for `builtin://shapes`.
        report_path: Also write the Markdown report here (for a KFP Markdown artifact).

    Returns:
        The manifest (also written to `output_dir/manifest.json`).

    Raises:
        DatasetError: A parameter or the source is unusable, or too many images are bad.
    """
    problems = []
    if not 0.0 < validation_fraction < 1.0:
        problems.append(f"validation_fraction is {validation_fraction!r}; expected a number "
                        "strictly between 0 and 1")
    if not 0.0 <= test_fraction < 1.0 or validation_fraction + test_fraction >= 1.0:
        problems.append(f"test_fraction is {test_fraction!r}; expected >= 0 with "
                        "validation_fraction + test_fraction < 1")
    if num_shards < 0 or min_shards < 1:
        problems.append(f"num_shards is {num_shards!r} and min_shards {min_shards!r}; expected "
                        "num_shards >= 0 (0: planned) and min_shards >= 1")
    if image_size < 8:
        problems.append(f"image_size is {image_size!r}; expected an integer >= 8")
    if not 0.0 <= max_bad_fraction < 1.0:
        problems.append(f"max_bad_fraction is {max_bad_fraction!r}; expected a number in [0, 1)")
    if problems:
        raise DatasetError("; ".join(problems))
    out = Path(output_dir)
    if out.exists() and any(out.iterdir()):
        raise DatasetError(f"output directory {str(out)!r} is not empty")
    out.parent.mkdir(parents=True, exist_ok=True)
    processes = processes or os.cpu_count() or 1

    with tempfile.TemporaryDirectory(prefix=".dataset-", dir=out.parent) as work:
        work_dir = Path(work)
        listing = list_source(source, work_dir, image_size, builtin_images_per_class)
        by_split: dict[str, list[Example]] = {s: [] for s in SPLITS}
        for ex in listing.examples:
            by_split[split_of(ex.identity, validation_fraction, test_fraction)].append(ex)
        wanted = [s for s in SPLITS if s != "test" or test_fraction > 0]
        for split in wanted:
            if not by_split[split]:
                raise DatasetError(f"the {split} split is empty ({len(listing.examples)} "
                                   f"examples, validation_fraction={validation_fraction}, "
                                   f"test_fraction={test_fraction}); add images or change "
                                   "the fractions")
        staging = work_dir / "shards"
        staging.mkdir()
        import tensorflow as tf  # Late import: only the writing needs TensorFlow.

        # One ordered stream over all splits; each split's writers take their share.
        order = [ex for split in wanted for ex in by_split[split]]
        plans, writers, names = {}, {}, {}
        for split in wanted:
            items = by_split[split]
            if num_shards:
                plans[split] = min(num_shards, len(items))
            else:
                estimate = sum(e.size for e in items) or len(items) * image_size**2 * 3
                plans[split] = plan_shards(len(items), estimate, min_shards)
            names[split] = [f"{split}-{i:05d}-of-{plans[split]:05d}.tfrecord"
                            for i in range(plans[split])]
        split_of_index = [split for split in wanted for _ in by_split[split]]
        counts = {s: [0] * plans[s] for s in wanted}
        per_class = {s: [0] * len(listing.classes) for s in wanted}
        written = {s: 0 for s in wanted}
        skipped: list[dict[str, str]] = []
        try:
            for split in wanted:
                writers[split] = [tf.io.TFRecordWriter(str(staging / n)) for n in names[split]]
            for index, data, error, label in _results(listing, order, image_size, processes):
                ex, split = order[index], split_of_index[index]
                if data is None:
                    skipped.append({"file": ex.ref, "reason": error or "unreadable"})
                    continue
                label = ex.label if label is None else label
                shard = written[split] % plans[split]
                writers[split][shard].write(tf.train.Example(features=tf.train.Features(feature={
                    FEATURE_IMAGE: tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                    FEATURE_LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                    FEATURE_ID: tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[ex.identity.encode("utf-8")])),
                })).SerializeToString())
                counts[split][shard] += 1
                per_class[split][label] += 1
                written[split] += 1
        finally:
            for split_writers in writers.values():
                for w in split_writers:
                    w.close()

        total = len(order)
        bad_fraction = len(skipped) / total if total else 0.0
        if bad_fraction > max_bad_fraction:
            listed = "; ".join(f"{s['file']}: {s['reason']}" for s in skipped[:5])
            raise DatasetError(f"{len(skipped)} of {total} images ({bad_fraction:.1%}) could not "
                               f"be decoded, above max_bad_fraction {max_bad_fraction:.1%}: "
                               f"{listed}{' ...' if len(skipped) > 5 else ''}; fix or remove "
                               "them, or raise max_bad_fraction")
        for split in wanted:
            if not written[split]:
                raise DatasetError(f"every image of the {split} split was skipped")

        manifest: dict[str, Any] = {
            "format_version": 2,
            "classes": listing.classes,
            "image_size": [image_size, image_size, 3],
            "image_format": "png",
            "features": {"image": FEATURE_IMAGE, "label": FEATURE_LABEL, "id": FEATURE_ID},
            "source": source,
            "source_kind": listing.kind,
            "source_fingerprint": listing.fingerprint,
            "validation_fraction": validation_fraction,
            "test_fraction": test_fraction,
            "examples": total,
            "skipped": skipped,
            "bad_fraction": bad_fraction,
            "splits": {},
        }
        for split in wanted:
            shards = [{"file": n, "count": c, "bytes": (staging / n).stat().st_size,
                       "sha256": _sha256_file(staging / n)}
                      for n, c in zip(names[split], counts[split]) if c]
            for n, c in zip(names[split], counts[split]):
                if not c:  # all of a shard's images were skipped
                    (staging / n).unlink()
            manifest["splits"][split] = {
                "count": written[split],
                "per_class": dict(zip(listing.classes, per_class[split])),
                "shards": shards,
            }
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        report = markdown_report(manifest)
        (staging / REPORT_NAME).write_text(report)
        if report_path is not None:
            Path(report_path).parent.mkdir(parents=True, exist_ok=True)
            Path(report_path).write_text(report)
        if out.exists():
            out.rmdir()
        shutil.move(str(staging), str(out))
    return manifest


def markdown_report(manifest: dict[str, Any]) -> str:
    """The class distribution, shards and skipped files, as Markdown (KFP shows it)."""
    splits = list(manifest["splits"])
    lines = [f"# Dataset: {manifest['source']}", "",
             f"{manifest['examples']} images, {len(manifest['classes'])} classes, "
             f"{manifest['image_size'][0]}x{manifest['image_size'][1]} RGB PNG; source "
             f"fingerprint `{manifest['source_fingerprint']}`.", "",
             "| class | " + " | ".join(splits) + " |",
             "| --- | " + " | ".join("---:" for _ in splits) + " |"]
    for name in manifest["classes"]:
        lines.append(f"| {name} | " + " | ".join(
            str(manifest["splits"][s]["per_class"][name]) for s in splits) + " |")
    lines.append("| **total** | " + " | ".join(
        f"**{manifest['splits'][s]['count']}**" for s in splits) + " |")
    lines += ["", "| split | shards | MB |", "| --- | ---: | ---: |"]
    for s in splits:
        shards = manifest["splits"][s]["shards"]
        lines.append(f"| {s} | {len(shards)} | "
                     f"{sum(x['bytes'] for x in shards) / 2**20:.1f} |")
    skipped = manifest["skipped"]
    lines += ["", f"## Skipped files: {len(skipped)} ({manifest['bad_fraction']:.2%})", ""]
    lines += [f"- `{s['file']}`: {s['reason']}" for s in skipped[:200]]
    if len(skipped) > 200:
        lines.append(f"- ... and {len(skipped) - 200} more (see manifest.json)")
    return "\n".join(lines) + "\n"


def load_manifest(dataset_dir: str | os.PathLike) -> dict[str, Any]:
    """Reads the manifest of a prepared dataset.

    Raises:
        DatasetError: The directory holds no manifest.
    """
    path = Path(dataset_dir) / MANIFEST_NAME
    if not path.is_file():
        raise DatasetError(f"{str(dataset_dir)!r} is not a prepared dataset (no {MANIFEST_NAME})")
    return json.loads(path.read_text())


def shard_paths(dataset_dir: str | os.PathLike, manifest: dict[str, Any], split: str) -> list[str]:
    """Returns the absolute paths of a split's shards, in manifest order."""
    return [str(Path(dataset_dir) / s["file"]) for s in manifest["splits"][split]["shards"]]
