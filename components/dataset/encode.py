"""The decoding pool: images read, decoded, resized and re-encoded by several processes.

Results arrive in order and are written as they come; the pool reads at most a window
ahead of the writer, so memory does not grow with the dataset.
"""

from __future__ import annotations

import collections
import io
import itertools
import multiprocessing
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from components.dataset.image_facts import Facts, facts_of
from components.dataset.sources.base import Example, SourceKind, SourceListing, kind_named
from trainer.common.errors import StageError, first_line

#: (index in the write order, encoded bytes or None, reason when None, label or None, the
#: image's facts or None when skipped).
Result = tuple[int, "bytes | None", "str | None", "int | None", "Facts | None"]

#: JPEG quality of the stored images: visually lossless, a fifth of PNG's bytes for photos
#: at 224x224 and prepared 2.3x as fast (benchmarks/dataset_prep.py).
JPEG_QUALITY = 95


def to_bytes(img: Any, size: int, image_format: str) -> bytes:
    """The image as RGB, resized to size x size, encoded as `png` or `jpeg`."""
    from PIL import Image

    img = img.convert("RGB")
    if img.size != (size, size):
        img = img.resize((size, size), Image.BILINEAR)
    buf = io.BytesIO()
    if image_format == "jpeg":
        # Chroma at half resolution (4:2:0, as cameras store photos): smaller shards,
        # quicker to decode than 4:4:4.
        img.save(buf, format="JPEG", quality=JPEG_QUALITY, subsampling="4:2:0")
    else:
        # Fast zlib level: ~1.8x quicker to encode than the default for ~17% larger
        # shards, which training reads once and caches decoded.
        img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _encode(task: tuple[int, str, int, str, type[SourceKind]]) -> Result:
    """Reads (or draws) through its source's kind, decodes, converts and resizes one image;
    returns its bytes and facts, or the reason."""
    from PIL import Image

    index, ref, size, image_format, kind = task
    try:
        data = kind.load(ref, size)
    except Exception as exc:  # noqa: BLE001 - local and Cloud Storage errors alike
        if isinstance(exc, FileNotFoundError) or type(exc).__name__ == "NotFound":
            return index, None, "missing file", None, None
        return index, None, f"cannot read ({first_line(exc, 120)})", None, None
    if isinstance(data, Image.Image):  # drawn, not read: encoded once
        return index, to_bytes(data, size, image_format), None, None, facts_of(data)
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # forces a full decode: truncated files fail here
            return (index, to_bytes(img, size, image_format), None, None,
                    facts_of(img, data))
    except Image.UnidentifiedImageError:  # its message holds a memory address
        return index, None, "cannot decode (not an image format Pillow reads)", None, None
    except Exception as exc:  # noqa: BLE001 - any decoder failure means a bad image
        reason = first_line(exc, 120)
        return index, None, f"cannot decode ({reason})", None, None


class DecodingPoolError(StageError):
    """A decoding process died (killed for memory, or it could not start)."""


def _map_chunk(func: Any, chunk: list[Any]) -> list[Any]:
    return [func(item) for item in chunk]


def bounded_imap(executor: Any, func: Any, items: Iterable[Any], window: int,
                 chunksize: int = 16) -> Iterator[Any]:
    """`map` over a process pool that takes at most `window` items ahead of the consumer.

    A plain `imap` reads its whole input at once and queues results as fast as the workers
    make them; when writing is slower than decoding (many cores, a slow disk or the /gcs/
    mount), memory would grow with the dataset. Here chunks are submitted only while fewer
    than `window` items are in flight. A `concurrent.futures` pool, unlike
    `multiprocessing.Pool`, notices a worker that died and fails instead of waiting forever.

    Args:
        executor: A `concurrent.futures.ProcessPoolExecutor`.
        func: Function to map (picklable).
        items: Its inputs, read lazily.
        window: Most items taken but not yet consumed; must exceed `chunksize`.
        chunksize: Items sent to a worker at once.

    Yields:
        `func(item)` for each item, in order.

    Raises:
        DecodingPoolError: A worker process died.
    """
    from concurrent.futures.process import BrokenProcessPool

    if window <= chunksize:
        raise ValueError(f"window {window} must exceed chunksize {chunksize}")
    iterator = iter(items)
    pending: collections.deque = collections.deque()
    in_flight = 0
    try:
        while True:
            while in_flight + chunksize <= window:
                chunk = list(itertools.islice(iterator, chunksize))
                if not chunk:
                    break
                pending.append(executor.submit(_map_chunk, func, chunk))
                in_flight += len(chunk)
            if not pending:
                return
            done = pending.popleft().result()
            in_flight -= len(done)
            yield from done
    except BrokenProcessPool:
        raise DecodingPoolError(
            "a decoding process died (killed, perhaps for memory by a huge image, or unable "
            "to start: under the spawn start method the calling program must be an importable "
            "file or module, not code read from standard input); lower the number of "
            "processes or the image sizes, and run the program from a file") from None
    finally:
        for future in pending:
            future.cancel()


def results(listing: SourceListing, order: Sequence[Example], size: int, processes: int,
            image_format: str = "png") -> Iterator[Result]:
    """Encoded images (`png` or `jpeg`), from a pool of processes (or inline for one)."""
    kind = kind_named(listing.kind)
    bulk = kind.bulk_results(list(order), size, image_format) if order else iter(())
    if bulk is not None:
        yield from bulk
        return
    tasks = ((i, e.ref, size, image_format, kind) for i, e in enumerate(order))
    if processes <= 1:
        yield from map(_encode, tasks)
        return
    # spawn: the workers must not inherit TensorFlow's threads (forking them is unsafe).
    executor = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield from bounded_imap(executor, _encode, tasks, window=64 * processes)
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
