"""Shared fixtures: a small prepared dataset, the Cloud Storage emulator and the fake Google
APIs on loopback."""

from __future__ import annotations

import os
import socket

import pytest

from components.dataset.prepare import prepare_source
from components.dataset.sources import BUILTIN_SHAPES

# TensorFlow's C++ start-up chatter makes failing tests hard to read.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_collection_modifyitems(items):
    """The longest files first (`tests.support.schedule`): `make test`'s processes take whole
    files in this order, and the short ones are left for the end."""
    from tests.support.schedule import longest_first

    items[:] = longest_first(items)


def _no_account():
    from google.auth.exceptions import DefaultCredentialsError

    raise DefaultCredentialsError("no credentials in the tests")


@pytest.fixture(scope="session", autouse=True)
def no_price_catalog_in_the_session(tmp_path_factory):
    """No test reads Google's price catalog or a user's cache of it, module fixtures and
    the processes they start included: the catalog client finds no account (as on a
    machine without credentials; a test that prices from the fake catalog gives its own
    client), and the cache is the session's own."""
    from components.prices import catalog

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        patch.setattr(catalog, "catalog_client", _no_account)
        yield


@pytest.fixture(autouse=True)
def no_price_catalog(tmp_path, monkeypatch):
    """Each test's price cache is its own (what one test read is not another's), no read
    that went unanswered in an earlier test shortens this one's (`bounded_read`), and the
    credentials found are looked for again (`default_credentials`)."""
    from trainer.common import cloud_calls

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setitem(cloud_calls._UNANSWERED, "what", "")
    cloud_calls.forget_credentials()  # each test's environment decides its credentials
    yield
    cloud_calls.forget_credentials()


@pytest.fixture
def hand_prices(monkeypatch):
    """The shipped price table as the tests' own figures (`tests.support.prices.TABLE`, the
    same in every region): what a test computes by hand does not follow the table's data."""
    from components.prices import shipped_table
    from tests.support.prices import TABLE

    monkeypatch.setattr(shipped_table, "prices", lambda region: dict(TABLE))
    return TABLE


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory):
    """The builtin shapes, 80 images per class, in 4 shards per split."""
    out = tmp_path_factory.mktemp("data") / "dataset"
    prepare_source(BUILTIN_SHAPES, out, image_size=32, validation_fraction=0.25,
                    test_fraction=0.1, num_shards=4, builtin_images_per_class=80)
    return out


@pytest.fixture
def apis(tmp_path):
    """The fake Google APIs on loopback (`tests.support.vertex_emulator.apis`), with the project's
    two images in `us-central1-docker.pkg.dev/my-proj/ml-images` (their containers exit
    at once: these tests start no training)."""
    from components import images
    from tests.support.vertex_emulator.apis import FakeGoogleApis

    repository = "us-central1-docker.pkg.dev/my-proj/ml-images"
    with FakeGoogleApis(tmp_path, {f"{repository}/{i.name}": ["true"]
                                   for i in images.PROJECT_IMAGES}) as fake:
        yield fake


@pytest.fixture
def storage_emulator(monkeypatch):
    """A Cloud Storage JSON API server (gcp-storage-emulator) on loopback, in memory.

    STORAGE_EMULATOR_HOST points the real google-cloud-storage client at it (also in the
    dataset stage's worker processes, which inherit the environment).
    """
    from gcp_storage_emulator.server import create_server

    from trainer.common import gcs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=None)
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test-project")
    monkeypatch.setattr(gcs, "_CLIENT", None)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()

