"""Reading a signed apt repository: its `InRelease` checked with `gpgv` against the pinned
key alone, the package index its signature covers, Debian's version order, and the newest
version of each package pinned with its `.deb`'s SHA-256 (`resolve`). `make lock` runs it
where the repository can be reached; the GPU image build runs it (beside `apt_lock.py`,
standard library only) when the lock pins nothing. The lock's format and the install in
the image are `components.build.apt_lock`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import hashlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

try:
    from components.build import apt_lock
except ImportError:  # beside apt_lock.py in the GPU image build, without the project
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import apt_lock  # type: ignore[no-redef]


def compare_versions(a: str, b: str) -> int:
    """Debian version order (deb-version(7)): negative, zero or positive as a <, =, > b."""
    def split(version: str) -> tuple[int, str, str]:
        epoch, _, rest = version.partition(":") if ":" in version else ("0", "", version)
        upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
        return int(epoch or 0), upstream, revision

    def order(char: str) -> int:
        if char == "~":
            return -1
        if char.isalpha():
            return ord(char)
        return ord(char) + 256 if char else 0

    def part(x: str, y: str) -> int:
        while x or y:
            xs, ys = re.match(r"\D*", x).group(), re.match(r"\D*", y).group()
            for i in range(max(len(xs), len(ys)) + 1):
                cx, cy = order(xs[i:i + 1]), order(ys[i:i + 1])
                if cx != cy:
                    return cx - cy
            x, y = x[len(xs):], y[len(ys):]
            xd, yd = re.match(r"\d*", x).group(), re.match(r"\d*", y).group()
            if int(xd or 0) != int(yd or 0):
                return int(xd or 0) - int(yd or 0)
            x, y = x[len(xd):], y[len(yd):]
        return 0

    (ea, ua, ra), (eb, ub, rb) = split(a), split(b)
    return (ea - eb) or part(ua, ub) or part(ra, rb)


def stanzas(text: str) -> list[dict[str, str]]:
    """The paragraphs of a Debian control file (Release, Packages), continuation lines
    joined with newlines."""
    found = []
    for block in re.split(r"\n\s*\n", text.strip()):
        fields: dict[str, str] = {}
        last = ""
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and last:
                fields[last] += "\n" + line.strip()
            elif ":" in line:
                last, _, value = line.partition(":")
                fields[last] = value.strip()
        if fields:
            found.append(fields)
    return found


def signed_text(in_release: str) -> str:
    """The text a clearsigned InRelease signs (RFC 4880 7: framing and dash-escapes off)."""
    head, separator, rest = in_release.partition("-----BEGIN PGP SIGNED MESSAGE-----")
    if not separator:
        raise apt_lock.AptLockError("InRelease is not a clearsigned message")
    body = rest.split("\n\n", 1)[1].split("\n-----BEGIN PGP SIGNATURE-----", 1)[0]
    return "\n".join(line[2:] if line.startswith("- ") else line for line in body.split("\n"))


def verify_signature(in_release: bytes, key: bytes, expected: str, gpgv: str = "gpgv") -> None:
    """Checks InRelease's signature with `key` alone and that `expected` made it.

    Raises:
        AptLockError: gpgv is missing, or the signature is bad or by another key.
    """
    with tempfile.TemporaryDirectory() as work:
        keyring, message = Path(work, "pinned.gpg"), Path(work, "InRelease")
        keyring.write_bytes(key)
        message.write_bytes(in_release)
        try:
            result = subprocess.run([gpgv, "--status-fd", "1", "--keyring", str(keyring),
                                     str(message)], capture_output=True, text=True)
        except FileNotFoundError:
            raise apt_lock.AptLockError(f"{gpgv} is needed to check the repository's "
                                        "signature (Debian and Ubuntu: the gpgv package)"
                                        ) from None
    valid = [line.split() for line in result.stdout.splitlines()
             if line.startswith("[GNUPG:] VALIDSIG ")]
    if result.returncode != 0 or not valid or valid[0][-1].upper() != expected:
        raise apt_lock.AptLockError(
            f"InRelease is not signed by the pinned key {expected}: "
            f"{result.stderr.strip()[-500:] or result.stdout.strip()[-500:]}")


def _index(release: dict[str, str], component: str) -> tuple[str, str, int]:
    """(path, SHA-256, size) of the component's amd64 package index in a Release."""
    listed = {}
    for line in release.get("SHA256", "").splitlines():
        parts = line.split()
        if len(parts) == 3:
            listed[parts[2]] = (parts[0], int(parts[1]))
    for name in ("Packages.gz", "Packages"):
        path = f"{component}/binary-{apt_lock.ARCHITECTURE}/{name}"
        if path in listed:
            return path, *listed[path]
    raise apt_lock.AptLockError(f"the signed Release lists no {component}/binary-"
                                f"{apt_lock.ARCHITECTURE} package index")


def resolve(template: apt_lock.AptLock, allowed: Sequence[str], packages: Sequence[str],
            fetch: apt_lock.Fetch = apt_lock.urlopen_fetch,
            gpgv: str = "gpgv") -> apt_lock.AptLock:
    """Pins the newest amd64 version of each of `packages` in `template`'s repository.

    Args:
        template: The repository and key file to read (its pins are ignored).
        allowed: The signing key's accepted fingerprints, in order of preference.
        packages: The package names to pin.
        fetch: Downloads a URL.
        gpgv: The gpgv program.

    Returns:
        The lock, with the signing key's fingerprint and the pins.

    Raises:
        AptLockError: The key, signature, index or a package does not check out.
    """
    chosen, key = apt_lock.pinned_key(apt_lock.get(fetch, template.key_url), allowed,
                                      template.key_url)
    base = f"{template.url.rstrip('/')}/dists/{template.suite}"
    in_release = apt_lock.get(fetch, f"{base}/InRelease")
    verify_signature(in_release, key, chosen, gpgv)
    release = stanzas(signed_text(in_release.decode()))[0]
    path, digest, size = _index(release, template.component)
    index = apt_lock.get(fetch, f"{base}/{path}")
    if hashlib.sha256(index).hexdigest() != digest or len(index) != size:
        raise apt_lock.AptLockError(f"{base}/{path} does not match the SHA-256 the signed "
                                    "Release gives it")
    entries = stanzas((gzip.decompress(index) if path.endswith(".gz") else index).decode())
    pins = []
    for name in packages:
        found = [e for e in entries if e.get("Package") == name
                 and e.get("Architecture") in (apt_lock.ARCHITECTURE, "all")]
        if not found:
            raise apt_lock.AptLockError(f"{template.url} {template.suite} has no {name} for "
                                        f"{apt_lock.ARCHITECTURE}")
        newest = found[0]
        for entry in found[1:]:
            if compare_versions(entry["Version"], newest["Version"]) > 0:
                newest = entry
        pins.append(apt_lock.Pin(name, newest["Version"], newest["Filename"], newest["SHA256"]))
    return dataclasses.replace(template, fingerprint=chosen, pins=tuple(pins), unresolved="")


def main(argv: list[str] | None = None) -> int:
    """`install LOCK [--resolve PACKAGE... --accept FINGERPRINT,...] [--record PATH]`: the
    GPU Dockerfile's apt step (`make lock` writes the lock: `release.locks`).
    With `--resolve`, a lock that pins nothing is resolved first (`resolve`)."""
    parser = argparse.ArgumentParser(prog="apt_repository.py", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("install")
    command.add_argument("lock")
    command.add_argument("--resolve", nargs="*", default=[], metavar="PACKAGE",
                         help="pin these now when the lock pins nothing")
    command.add_argument("--accept", default="", metavar="FINGERPRINT,...",
                         help="the signing key's accepted fingerprints, for --resolve")
    command.add_argument("--record", default="", help="where to record what was installed")
    command.add_argument("--mirror", default="", metavar="URL",
                         help="read the repository from this copy of it (empty: itself)")
    args = parser.parse_args(argv)
    accept = [f.strip().upper() for f in args.accept.split(",") if f.strip()]
    if args.resolve and not accept:
        print("apt lock: --resolve needs --accept: the fingerprints of the keys that may "
              "sign the repository (components/images.py passes them as the build argument "
              "APT_KEY_FINGERPRINTS)", file=sys.stderr)
        return 1
    try:
        lock = apt_lock.parse(Path(args.lock).read_text()).mirrored(args.mirror)
        apt_lock.install(lock, record=args.record,
                resolve_with=functools.partial(resolve, allowed=accept,
                                               packages=args.resolve)
                if args.resolve else None)
    except (apt_lock.AptLockError, subprocess.CalledProcessError) as error:
        print(f"apt lock: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
