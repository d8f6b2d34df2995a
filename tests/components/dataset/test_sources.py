"""Dataset sources as a registry: a new kind is one class and its registration; every kind's
cheap checks run before the pipeline starts."""

from __future__ import annotations

import pytest
from PIL import Image

from components.dataset import sources
from components.dataset.prepare import prepare_source
from components.dataset.sources import Example, SourceKind, SourceListing
from pipelines.config import ConfigError
from pipelines.config_loading import load_config
from trainer.common.schema import short


class Stripes(SourceKind):
    """A kind a team might add: `stripes://N`, N images per class of horizontal or vertical
    stripes, drawn in the decoding process like the builtin shapes."""

    name = "stripes"
    form = "stripes://N (N striped images per class)"

    @classmethod
    def matches(cls, source):
        return source.startswith("stripes://")

    @classmethod
    def problem(cls, source):
        return None if source[len("stripes://"):].isdigit() else "expected stripes://N"

    @classmethod
    def listing(cls, source, image_size, per_class):
        count = int(source[len("stripes://"):])
        examples = [Example(f"{source}#{label}/{i}", f"{name}/{i}", label)
                    for label, name in enumerate(("horizontal", "vertical"))
                    for i in range(count)]
        return SourceListing(cls.name, ["horizontal", "vertical"], examples, f"{source}@v1")

    @classmethod
    def load(cls, ref, image_size):
        label, index = map(int, ref.split("#", 1)[1].split("/"))
        image = Image.new("RGB", (image_size, image_size), "white")
        for k in range(0, image_size, 4):
            for j in range(image_size):
                image.putpixel((j, k) if label == 0 else (k, j), (40 * (index % 5), 0, 0))
        return image


@pytest.fixture
def stripes():
    sources.register(Stripes)
    yield Stripes
    sources.KINDS.remove(Stripes)


def test_a_new_kind_is_one_class_and_its_registration(stripes, tmp_path):
    assert sources.kind_of("stripes://12") is Stripes
    assert "stripes://N" in sources.accepted_forms()
    # The config accepts it and checks it by its own rule.
    assert load_config(overrides={"dataset": {"source": "stripes://12"}}).dataset.source
    with pytest.raises(ConfigError, match="dataset.source is 'stripes://x'; expected stripes://N"):
        load_config(overrides={"dataset": {"source": "stripes://x"}})
    manifest = prepare_source("stripes://12", tmp_path / "out", image_size=16, processes=1)
    assert manifest["source_kind"] == "stripes" and manifest["classes"] == ["horizontal",
                                                                            "vertical"]
    assert sum(s["count"] for s in manifest["splits"].values()) == 24
    # Without the registration, the same source is refused, naming what is read.
    sources.KINDS.remove(Stripes)
    with pytest.raises(ConfigError, match="the scheme stripes:// is not read; expected "
                                          "builtin://shapes"):
        load_config(overrides={"dataset": {"source": "stripes://12"}})
    sources.register(Stripes)


def test_the_kinds_are_tried_in_one_order_whatever_imports_them():
    """A manifest on Cloud Storage is a manifest, not a folder (both are gs://), and a plain
    path is tried last: the package registers its kinds in that order, once."""
    from components.dataset.sources.builtin import BuiltinShapes
    from components.dataset.sources.gcs_folder import GcsFolder
    from components.dataset.sources.local_folder import LocalFolder
    from components.dataset.sources.manifest import Manifest
    from components.dataset.sources.tfds import Tfds

    assert sources.KINDS == [BuiltinShapes, Tfds, Manifest, GcsFolder, LocalFolder]
    assert sources.kind_of("gs://images/labels.jsonl") is Manifest
    assert sources.kind_of("gs://images/flowers") is GcsFolder
    assert sources.kind_of("/data/flowers.csv") is Manifest
    assert sources.kind_of("tfds://mnist").one_stream
    assert not any(kind.one_stream for kind in sources.KINDS if kind is not Tfds)


def test_unusable_sources_are_refused_when_the_config_loads(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "one" / "circle").mkdir(parents=True)
    cases = [
        (tmp_path / "empty", "it has 0 class(es) (none); classification needs at least 2"),
        (tmp_path / "one", "it has 1 class(es) (circle)"),
        (tmp_path / "missing", "it is not a directory; expected builtin://shapes"),
        (tmp_path / "labels.csv", "this manifest does not exist"),
        ("tfds://gp_not_on_disk", "TFDS dataset 'gp_not_on_disk' cannot be used"),
    ]
    for source, reason in cases:
        with pytest.raises(ConfigError) as raised:
            load_config(overrides={"dataset": {"source": str(source)}})
        message = str(raised.value)
        # A long value is shortened in the message (`short`): the path's start, then `...`.
        assert f"dataset.source is {short(str(source))}: {reason}" in message, message
        assert len(message) < 2000  # TFDS's own error lists every dataset it knows
    # What only the pipeline can read is not looked at here.
    for source in ("gs://bucket/images", "/gcs/bucket/images", "gs://bucket/labels.jsonl"):
        assert load_config(overrides={"dataset": {"source": source}}).dataset.source == source
