"""The GPU image's apt lock: a signed apt repository on loopback, keys made with gpg.

The repository is served over HTTP on 127.0.0.1 as Google's is laid out (`doc/apt-key.gpg`,
`dists/SUITE/InRelease`, the package index it signs, `pool/`), signed with a key this test
makes; the lock must pin only what that key signed, and the image's install step only
the exact `.deb` the lock names.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

import pytest

from components import images
from components.build import apt_lock, apt_repository
from components.build.apt_lock import AptLock, AptLockError
from release.locks import write_apt_lock
from tests.support.paths import ROOT

PACKAGE = images.REDUCTION_SERVER_PACKAGE
SUITE = "google-fast-socket"

pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not shutil.which("gpgv"),
                                reason="needs gpg and gpgv")


class Keys:
    """Two signing keys in a throw-away GnuPG home (short path: gpg-agent's socket)."""

    def __init__(self) -> None:
        self.home = tempfile.mkdtemp(prefix="gpg")
        self.pinned = self._new("Pinned Repository <pinned@example.com>")
        self.other = self._new("Someone Else <other@example.com>")

    def gpg(self, *args: str, data: bytes | None = None) -> bytes:
        return subprocess.run(["gpg", "--homedir", self.home, "--batch", "--yes", *args],
                              input=data, capture_output=True, check=True).stdout

    def _new(self, uid: str) -> str:
        self.gpg("--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
        listing = self.gpg("--with-colons", "--list-keys", uid).decode()
        return next(line.split(":")[9] for line in listing.splitlines()
                    if line.startswith("fpr:"))

    def export(self, *fingerprints: str) -> bytes:
        return self.gpg("--armor", "--export", *fingerprints)

    def clearsign(self, fingerprint: str, text: str) -> bytes:
        return self.gpg("--local-user", fingerprint, "--clearsign", data=text.encode())

    def close(self) -> None:
        subprocess.run(["gpgconf", "--homedir", self.home, "--kill", "gpg-agent"],
                       capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="module")
def keys():
    made = Keys()
    yield made
    made.close()


#: The index's packages: the newest amd64 version is 1.0.10 (1.0.10~rc1 sorts before it,
#: 1.0.9 before both; arm64's 2.0 is not for these machines).
DEBS = {("1.0.9", "amd64"): b"deb 1.0.9", ("1.0.10~rc1", "amd64"): b"deb rc",
        ("1.0.10", "amd64"): b"deb 1.0.10", ("2.0", "arm64"): b"deb arm"}


def write_repository(root: Path, keys: Keys, signer: str, key_file: bytes) -> None:
    """A repository laid out as Google's, signed by `signer`."""
    (root / "doc").mkdir(parents=True, exist_ok=True)
    (root / "doc" / "apt-key.gpg").write_bytes(key_file)
    stanzas = []
    for (version, arch), data in DEBS.items():
        filename = f"pool/{PACKAGE}_{version}_{arch}.deb"
        (root / filename).parent.mkdir(parents=True, exist_ok=True)
        (root / filename).write_bytes(data)
        stanzas.append(f"Package: {PACKAGE}\nVersion: {version}\nArchitecture: {arch}\n"
                       f"Filename: {filename}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\nDescription: plugin\n"
                       " continued description\n")
    stanzas.append("Package: google-fast-socket\nVersion: 9.9\nArchitecture: amd64\n"
                   "Filename: pool/fs.deb\nSHA256: 00\n")
    index = gzip.compress("\n".join(stanzas).encode(), mtime=0)
    dists = root / "dists" / SUITE
    (dists / "main" / "binary-amd64").mkdir(parents=True, exist_ok=True)
    (dists / "main" / "binary-amd64" / "Packages.gz").write_bytes(index)
    release = (f"Origin: test\nSuite: {SUITE}\nSHA256:\n"
               f" {hashlib.sha256(index).hexdigest()} {len(index)} "
               "main/binary-amd64/Packages.gz\n")
    (dists / "InRelease").write_bytes(keys.clearsign(signer, release))


@pytest.fixture
def repository(tmp_path):
    """(root folder, base URL) of an HTTP server on loopback; stopped after the test."""
    root = tmp_path / "repo"
    root.mkdir()
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join()


def direct(url: str) -> bytes:
    """Downloads without any proxy of the environment (the server is on loopback)."""
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url) as response:
        return response.read()


def template(url: str) -> AptLock:
    return AptLock(url, SUITE, "main", f"{url}/doc/apt-key.gpg")


def test_the_lock_pins_the_newest_amd64_version_signed_by_the_pinned_key(keys, repository):
    root, url = repository
    # The key file holds another key too (Google's holds several): only the pinned one counts.
    write_repository(root, keys, keys.pinned, keys.export(keys.other, keys.pinned))
    lock = apt_repository.resolve(template(url), ["0" * 40, keys.pinned], [PACKAGE], fetch=direct)
    assert lock.fingerprint == keys.pinned and not lock.unresolved
    (pin,) = lock.pins
    assert (pin.name, pin.version) == (PACKAGE, "1.0.10")
    assert pin.filename == f"pool/{PACKAGE}_1.0.10_amd64.deb"
    assert pin.sha256 == hashlib.sha256(b"deb 1.0.10").hexdigest()
    assert apt_lock.parse(lock.render()) == lock


def test_a_repository_signed_by_another_key_or_altered_is_refused(keys, repository):
    root, url = repository
    write_repository(root, keys, keys.other, keys.export(keys.pinned, keys.other))
    with pytest.raises(AptLockError, match=f"not signed by the pinned key {keys.pinned}"):
        apt_repository.resolve(template(url), [keys.pinned], [PACKAGE], fetch=direct)
    with pytest.raises(AptLockError, match=f"holds {keys.pinned}, {keys.other}, none of the "
                                           f"pinned fingerprints {'A' * 40}"):
        apt_repository.resolve(template(url), ["A" * 40], [PACKAGE], fetch=direct)
    write_repository(root, keys, keys.pinned, keys.export(keys.pinned))
    index = root / "dists" / SUITE / "main" / "binary-amd64" / "Packages.gz"
    index.write_bytes(gzip.compress(b"Package: google-reduction-server\nVersion: 6.6.6\n"))
    with pytest.raises(AptLockError, match="does not match the SHA-256 the signed Release"):
        apt_repository.resolve(template(url), [keys.pinned], [PACKAGE], fetch=direct)
    with pytest.raises(AptLockError, match=f"cannot download {url}/nowhere/doc"):
        apt_repository.resolve(AptLock(f"{url}/nowhere", SUITE, "main", f"{url}/nowhere/doc"),
                               [keys.pinned], [PACKAGE], fetch=direct)


def test_make_lock_keeps_a_pin_when_the_repository_cannot_be_reached(tmp_path, monkeypatch,
                                                                      capsys):
    lock_file = tmp_path / images.GPU_APT_LOCK
    lock_file.parent.mkdir()

    def unreachable(url: str) -> bytes:
        raise OSError("Name or service not known")

    first = write_apt_lock(tmp_path, fetch=unreachable)
    assert not first.pins and "Name or service not known" in first.unresolved
    assert apt_lock.parse(lock_file.read_text()) == first
    assert images.reduction_server_plugin(tmp_path) is None
    pinned = AptLock(*images.GOOGLE_APT_REPOSITORY, images.GOOGLE_APT_KEY_URL,
                     images.GOOGLE_APT_KEY_FINGERPRINTS[0],
                     (apt_lock.Pin(PACKAGE, "1.2.3", "pool/x.deb", "ab" * 32),))
    lock_file.write_text(pinned.render())
    assert write_apt_lock(tmp_path, fetch=unreachable) == pinned
    assert lock_file.read_text() == pinned.render()
    assert "kept as it is" in capsys.readouterr().out
    assert images.reduction_server_plugin(tmp_path) == "1.2.3"


class Apt:
    """Stands in for apt-get in the image build: records the commands; `download` puts
    the .deb bytes the repository would serve into the current folder."""

    def __init__(self, served: bytes):
        self.served, self.commands = served, []

    def __call__(self, command, check=False, cwd=None):
        self.commands.append(command)
        if command[:2] == ["apt-get", "download"]:
            name, version = command[2].split("=")
            Path(cwd, f"{name}_{version}_amd64.deb").write_bytes(self.served)
        return subprocess.CompletedProcess(command, 0)


def test_the_image_installs_exactly_the_locked_deb_from_the_pinned_key_alone(keys, tmp_path):
    key_file = keys.export(keys.other, keys.pinned)
    deb = b"deb 1.0.10"
    lock = AptLock("https://packages.example/apt", SUITE, "main",
                   "https://packages.example/key.gpg", keys.pinned,
                   (apt_lock.Pin(PACKAGE, "1.0.10", f"pool/{PACKAGE}_1.0.10_amd64.deb",
                                 hashlib.sha256(deb).hexdigest()),))
    apt = Apt(deb)
    installed = apt_lock.install(lock, root=str(tmp_path), fetch=lambda url: key_file,
                                 run=apt, log=lambda line: None)
    assert installed == [f"{PACKAGE}=1.0.10"]
    keyring = tmp_path / "etc/apt/keyrings" / f"{SUITE}.gpg"
    assert set(apt_lock.keys(keyring.read_bytes())) == {keys.pinned}  # no other key trusted
    assert (tmp_path / "etc/apt/sources.list.d" / f"{SUITE}.list").read_text() == \
        f"deb [signed-by=/etc/apt/keyrings/{SUITE}.gpg] https://packages.example/apt {SUITE} main\n"
    assert [c[:3] for c in apt.commands] == [
        ["apt-get", "update"], ["apt-get", "download", f"{PACKAGE}=1.0.10"],
        ["apt-get", "install", "-y"], ["rm", "-rf", "/var/lib/apt/lists"]]
    assert apt.commands[2][-1].endswith(f"{PACKAGE}_1.0.10_amd64.deb")
    # A .deb other than the locked one is refused before anything is installed.
    altered = Apt(b"something else")
    with pytest.raises(AptLockError, match="downloaded .deb has SHA-256"):
        apt_lock.install(lock, root=str(tmp_path / "b"), fetch=lambda url: key_file, run=altered)
    assert not any(c[:2] == ["apt-get", "install"] for c in altered.commands)
    # The key file no longer holds the pinned key: nothing is trusted or installed.
    with pytest.raises(AptLockError, match="none of the pinned fingerprints"):
        apt_lock.install(lock, root=str(tmp_path / "c"), fetch=lambda url: keys.export(keys.other),
                         run=altered)


def build_step(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The Dockerfile's apt step as it runs: the two files alone, with the base image's
    Python and no project package on the path (-I: isolated, -S: no site packages)."""
    for name in ("apt_lock.py", "apt_repository.py"):
        shutil.copyfile(ROOT / "components/build" / name, tmp_path / name)
    return subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "apt_repository.py"),
                           "install", *args], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "no_proxy": "*"})


def test_the_image_build_step_runs_alone_and_installs_nothing_for_an_unpinned_lock(tmp_path):
    unpinned = tmp_path / "gpu-apt.lock"
    unpinned.write_text(images.gpu_apt_template().render()
                        .replace("\nkey", "\nunresolved no network\nkey"))
    done = build_step(tmp_path, str(unpinned))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "apt lock: nothing pinned (no network); nothing installed\n"
    unpinned.write_text("source only-two words\n")
    done = build_step(tmp_path, str(unpinned))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "apt lock line 1: 'source only-two words' is not" in done.stderr
    done = build_step(tmp_path, str(unpinned), "--resolve", PACKAGE)
    assert done.returncode == 1 and done.stderr.startswith("apt lock: --resolve needs --accept")


@pytest.mark.parametrize("a, b", [
    ("1.0.10", "1.0.9"), ("1.0.10", "1.0.10~rc1"), ("1.0~rc1", "1.0~~"), ("1:0.1", "9.9"),
    ("1.0-2", "1.0-1"), ("1.0a", "1.0"), ("1.0", "1.0~"), ("2.0.0+git1", "2.0.0"),
    ("0.0.5", "0.0.5")])
def test_debian_version_order_agrees_with_dpkg(a, b):
    ours = apt_repository.compare_versions(a, b)
    if shutil.which("dpkg"):
        for op, holds in (("gt", ours > 0), ("eq", ours == 0), ("lt", ours < 0)):
            assert (subprocess.run(["dpkg", "--compare-versions", a, op, b]).returncode == 0) \
                == holds, (a, op, b)
    assert (ours > 0) == (a != b) and (ours == 0) == (a == b)


def test_an_unpinned_lock_is_resolved_when_the_image_is_built(keys, repository, tmp_path):
    """Google's apt repository is out of `make lock`'s reach here, so the lock pins
    nothing; the image build resolves the newest plugin itself, with the same checks, and
    records exactly what it installed."""
    root, url = repository
    write_repository(root, keys, keys.pinned, keys.export(keys.other, keys.pinned))
    unpinned = dataclasses.replace(template(url), unresolved="no network where make lock ran")
    apt, lines = Apt(b"deb 1.0.10"), []
    resolve = functools.partial(apt_repository.resolve, allowed=["0" * 40, keys.pinned],
                                packages=[PACKAGE], fetch=direct)
    installed = apt_lock.install(unpinned, root=str(tmp_path), fetch=direct, run=apt,
                                 log=lines.append, resolve_with=resolve,
                                 record=images.GPU_APT_RECORD)
    assert installed == [f"{PACKAGE}=1.0.10"]
    digest = hashlib.sha256(b"deb 1.0.10").hexdigest()
    assert lines[0] == (
        f"apt lock: pins nothing (no network where make lock ran); resolved now from {url} "
        f"{SUITE}, its InRelease signed by the pinned key {keys.pinned}: "
        f"{PACKAGE}=1.0.10 sha256:{digest}")
    recorded = apt_lock.parse((tmp_path / images.GPU_APT_RECORD.lstrip("/")).read_text())
    assert (recorded.fingerprint, recorded.pins) == (keys.pinned, (apt_lock.Pin(
        PACKAGE, "1.0.10", f"pool/{PACKAGE}_1.0.10_amd64.deb", digest),))
    assert ["apt-get", "download", f"{PACKAGE}=1.0.10"] in apt.commands
    # Signed by a key that is not pinned: nothing is trusted, downloaded or installed.
    write_repository(root, keys, keys.other, keys.export(keys.other, keys.pinned))
    refused = Apt(b"deb 1.0.10")
    with pytest.raises(AptLockError, match=f"not signed by the pinned key {keys.pinned}"):
        apt_lock.install(unpinned, root=str(tmp_path / "b"), fetch=direct, run=refused,
                         resolve_with=functools.partial(
                             apt_repository.resolve, allowed=[keys.pinned],
                             packages=[PACKAGE], fetch=direct))
    assert refused.commands == []


def test_the_build_step_resolves_on_its_own_and_refuses_a_wrong_signature(keys, repository,
                                                                          tmp_path):
    root, url = repository
    write_repository(root, keys, keys.other, keys.export(keys.other, keys.pinned))
    lock = tmp_path / "gpu-apt.lock"
    lock.write_text(dataclasses.replace(template(url), unresolved="offline").render())
    done = build_step(tmp_path, str(lock), "--resolve", PACKAGE, "--accept",
                      keys.pinned.lower())
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"apt lock: InRelease is not signed by the pinned key "
                                  f"{keys.pinned}")


def test_inside_a_perimeter_the_plugin_comes_from_a_mirror_checked_as_the_original(
        keys, repository, tmp_path):
    """A copy of the repository (`vertex.apt_mirror_url`) is read instead of Google's, which
    a pool without public egress cannot reach: the same pinned key, signature and SHA-256;
    only the mirror's own index is updated (Debian's are out of reach too)."""
    root, url = repository
    write_repository(root, keys, keys.pinned, keys.export(keys.pinned))
    google = dataclasses.replace(images.gpu_apt_template(), unresolved="offline")
    mirrored = google.mirrored(url + "/")
    assert (mirrored.url, mirrored.key_url, mirrored.mirror_of) == (
        url, f"{url}/doc/apt-key.gpg", images.GOOGLE_APT_REPOSITORY[0])
    assert google.mirrored("") is google
    apt, lines = Apt(b"deb 1.0.10"), []
    installed = apt_lock.install(
        mirrored, root=str(tmp_path), fetch=direct, run=apt, log=lines.append,
        record=images.GPU_APT_RECORD, resolve_with=functools.partial(
            apt_repository.resolve, allowed=[keys.pinned], packages=[PACKAGE], fetch=direct))
    assert installed == [f"{PACKAGE}=1.0.10"]
    source = tmp_path / "etc/apt/sources.list.d" / f"{SUITE}.list"
    assert apt.commands[0] == ["apt-get", "update", "-o", f"Dir::Etc::sourcelist={source}",
                               "-o", "Dir::Etc::sourceparts=-", "-o", "APT::Get::List-Cleanup=0"]
    assert f" {url} {SUITE} main" in source.read_text()
    assert lines[-1].startswith(f"apt lock: installed {PACKAGE}=1.0.10 from {url} (a mirror of "
                                f"{images.GOOGLE_APT_REPOSITORY[0]})")
    record = (tmp_path / images.GPU_APT_RECORD.lstrip("/")).read_text()
    assert f"# Read from {url}, a mirror of {images.GOOGLE_APT_REPOSITORY[0]}." in record
    # A mirror that serves something the pinned key did not sign is refused, as the
    # original would be; the build step reads the mirror it is given.
    write_repository(root, keys, keys.other, keys.export(keys.other, keys.pinned))
    lock = tmp_path / "gpu-apt.lock"
    lock.write_text(google.render())
    done = build_step(tmp_path, str(lock), "--resolve", PACKAGE, "--accept", keys.pinned,
                      "--mirror", url)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"apt lock: InRelease is not signed by the pinned key "
                                  f"{keys.pinned}")
