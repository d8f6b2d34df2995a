"""Dataset sources: one class per kind, registered once (`register`, `KINDS`).

A kind says which sources it takes (`matches`), what is wrong with one without looking at
it (`problem`, at config load), what is wrong with it before the pipeline starts
(`preflight`, cheap: does the folder have classes, is the TFDS dataset on disk), why the
pipeline on Vertex AI cannot read it (`vertex_problem`), what it holds (`listing`: classes,
examples and a fingerprint of its state, without reading images) and how an image is read
in a decoding process (`load`). The kinds here (`dataset.source`):

- a folder with one sub-folder of images per class: a local path or Vertex's `/gcs/`
  mount (`LocalFolder`), or a `gs://bucket/prefix` read with google-cloud-storage
  (`GcsFolder`);
- a CSV or JSONL manifest of (image URI, label), the URIs local, relative to the manifest
  or `gs://` (`Manifest`);
- `tfds://NAME[/SPLIT]`, a TensorFlow Datasets dataset already on disk (`Tfds`; optional
  extra; never downloaded);
- `builtin://shapes`, drawn by `components.dataset.shapes` (`BuiltinShapes`).

Adding a kind is one module with one class, registered here in the order kinds are tried
(the first whose `matches` takes a source reads it); messages list the accepted forms from
the registry. `base` holds what the kinds share; each kind's module holds its class beside
its reading: `builtin`, `tfds`, `manifest`, `gcs_folder`, `local_folder` (the fallback,
registered last). Code inside this package imports from `base` and the kinds' modules; the
rest of the project imports from the package.
"""

from components.dataset.sources.base import (
    IMAGE_EXTENSIONS,
    KINDS,
    DatasetError,
    Example,
    SourceKind,
    SourceListing,
    accepted_forms,
    kind_named,
    kind_of,
    list_source,
    register,
    source_fingerprint,
)
from components.dataset.sources.builtin import BUILTIN_SHAPES, BuiltinShapes, builtin_image
from components.dataset.sources.gcs_folder import GcsFolder
from components.dataset.sources.local_folder import LocalFolder, list_image_folder
from components.dataset.sources.manifest import Manifest
from components.dataset.sources.tfds import TFDS_PREFIX, Tfds

__all__ = ["BUILTIN_SHAPES", "IMAGE_EXTENSIONS", "KINDS", "TFDS_PREFIX", "BuiltinShapes",
           "DatasetError", "Example", "GcsFolder", "LocalFolder", "Manifest", "SourceKind",
           "SourceListing", "Tfds", "accepted_forms", "builtin_image", "kind_named", "kind_of",
           "list_image_folder", "list_source", "register", "source_fingerprint"]

# The order kinds are tried: a manifest before a Cloud Storage folder (both gs://), the
# plain path last (`SourceKind.fallback`).
for _kind in (BuiltinShapes, Tfds, Manifest, GcsFolder, LocalFolder):
    register(_kind)
