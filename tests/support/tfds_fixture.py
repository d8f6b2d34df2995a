"""A tiny TensorFlow Datasets dataset prepared on disk, as a user's own TFDS data would be.

Run as a script: `python tests/support/tfds_fixture.py DATA_DIR`. Nothing is downloaded: the
examples are generated. Grayscale like MNIST, and each class has its own grey level, so a
test can check that every label read back belongs to its image.
"""

from __future__ import annotations

import os
import sys

NAME = "gp_test_tones"
CLASSES = ["dark", "light"]
SPLITS = {"train": 20, "test": 6}


def tone(label: int) -> int:
    """The grey level of every pixel of an image of this class."""
    return 40 + 150 * label


def prepare(data_dir: str) -> None:
    """Generates and writes the dataset under `data_dir` (TFDS's own layout)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow_datasets as tfds

    class GpTestTones(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self, supervised_keys=("image", "label"),
                features=tfds.features.FeaturesDict({
                    "image": tfds.features.Image(shape=(12, 12, 1)),
                    "label": tfds.features.ClassLabel(names=CLASSES)}))

        def _split_generators(self, dl_manager):
            return {split: self._generate_examples(n) for split, n in SPLITS.items()}

        def _generate_examples(self, n):
            for i in range(n):
                yield i, {"image": np.full((12, 12, 1), tone(i % 2), np.uint8), "label": i % 2}

    GpTestTones(data_dir=data_dir).download_and_prepare()


if __name__ == "__main__":
    prepare(sys.argv[1])
