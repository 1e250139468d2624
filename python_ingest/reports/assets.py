"""The browser assets of the expectation reports, vendored from the npm registry at set-up.

Great Expectations' Data Docs pages load Bootstrap, jQuery, bootstrap-table, Font Awesome and
Vega from CDNs. ``make setup`` runs ``python -m python_ingest.reports.assets vendor``: npm packs
each package below (exact version, checked against its pinned sha512), and the files the pages
need are copied into the report assets folder (``.sluice/report-assets`` or
``$SLUICE_REPORT_ASSETS_DIR``; see ``steps.fork.split.report_assets_home``) with a
``manifest.json`` mapping each CDN address to its file. The fork copies that folder into every
report folder and points the pages at it (``steps.fork.split.localize_pages``): nothing is
fetched when a page is viewed.

Like the jars, the folder appears atomically (built under a temporary name, then renamed) and
is rebuilt only when the package list below changes (its hash is in the manifest).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from python_ingest.exceptions import SetupError
from python_ingest.steps.fork.split import ASSETS_MANIFEST, report_assets_home

NPM_TIMEOUT_S = 600


@dataclass(frozen=True)
class Package:
    """One npm package: the files kept (paths inside the package, folders end with '/') and
    the CDN addresses the report pages use for each kept file."""

    name: str
    version: str
    integrity: str  # the registry's sha512 of the tarball
    urls: tuple[tuple[str, str], ...]  # (CDN address, path inside the package)
    keep: tuple[str, ...] = ()  # further paths the kept files load (fonts)

    @property
    def folder(self) -> str:
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}"


_BT = "https://unpkg.com/bootstrap-table@{}/dist/"
_FILTER = "extensions/filter-control/bootstrap-table-filter-control"
PACKAGES: tuple[Package, ...] = (
    Package("bootstrap", "4.3.1", "sha512-rXqOmH1VilAt2DyPzluTi2blhk17bO7ef+zLLPlWvG494pDxcM23"
            "4pJ8wTc/6R40UWizAIIMgxjvxZg5kmsbag==", (
                ("https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css",
                 "dist/css/bootstrap.min.css"),
                ("https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js",
                 "dist/js/bootstrap.min.js"))),
    Package("jquery", "3.7.1", "sha512-m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2B"
            "sfpTYrTRysYUdADVD7CkUUizgkpLfg==", (
                ("https://code.jquery.com/jquery-3.7.1.min.js", "dist/jquery.min.js"),)),
    Package("popper.js", "1.12.9", "sha512-s0EEi9xiSCdqz9lV4IiVH5yIZnDX/U1t0tCjB+0jXx9jW8lrR7k"
            "OpVupiUg175ogqVoudpDXHF1p6dKATCHMeg==", (
                ("https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js",
                 "dist/umd/popper.min.js"),)),
    Package("@fortawesome/fontawesome-free", "6.6.0", "sha512-60G28ke/sXdtS9KZCpZSHHkCbdsOGEhI"
            "UGlwq6yhY74UpTiToIh8np7A8yphhM4BWsvNFtIvLpi4co+h9Mr9Ow==", (
                ("https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css",
                 "css/all.min.css"),), keep=("webfonts/",)),
    Package("bootstrap-datepicker", "1.9.0", "sha512-9rYYbaVOheGYxjOr/+bJCmRPihfy+LkLSg4fIFMT9"
            "Od8WwWB/MB50w0JO1eBgKUMbb7PFHQD5uAfI3ArAxZRXA==", (
                ("https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/"
                 "bootstrap-datepicker.min.js", "dist/js/bootstrap-datepicker.min.js"),
                ("https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/"
                 "bootstrap-datepicker.min.css", "dist/css/bootstrap-datepicker.min.css"))),
    Package("@forevolve/bootstrap-dark", "1.1.0", "sha512-A3ucpEpxPoTVO490lZZCfjPXxv832l7mm1Ix"
            "X3bXyxvgwnPGXDLyh7dWrphXKO8YBAu3EswbBEu3VSW8NRMW3A==", (
                ("https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/"
                 "bootstrap-prefers-dark.css", "dist/css/bootstrap-prefers-dark.css"),)),
    # Data Docs name 1.19.0 for the filter-control styles and 1.19.1 for the rest: one copy
    Package("bootstrap-table", "1.19.1", "sha512-WvV+l1AI/C+zThaKmfHmi/IuayVNB0qdFyEhFx1jyZhO0o"
            "LtNJNANkCR3rvJf6Dkh72dsLElxpE/bzK9seEQLA==", tuple(
                (_BT.format(version) + path, "dist/" + path)
                for version, path in (
                    ("1.19.1", "bootstrap-table.min.css"), ("1.19.1", "bootstrap-table.min.js"),
                    ("1.19.1", f"{_FILTER}.min.js"), ("1.19.0", f"{_FILTER}.css"),
                    ("1.19.0", f"{_FILTER}.min.css"), ("1.19.1", f"{_FILTER}.css"),
                    ("1.19.1", f"{_FILTER}.min.css")))),
    Package("vega", "5.33.1", "sha512-1fArfVDUqVbb5z8n+/nVQb+VNBzx8svY6CrsyTK4Ujm4yrd9I1auoKxB"
            "APXLCavY1LcrbHUskQbGUP8gXOzyQw==", (
                ("https://cdn.jsdelivr.net/npm/vega@5", "build/vega.min.js"),)),
    Package("vega-lite", "5.23.0", "sha512-l4J6+AWE3DIjvovEoHl2LdtCUkfm4zs8Xxx7INwZEAv+XVb6kR6v"
            "IN1gt3t2gN2gs/y4DYTs/RPoTeYAuEg6mA==", (
                ("https://cdn.jsdelivr.net/npm/vega-lite@5", "build/vega-lite.min.js"),)),
    Package("vega-embed", "6.29.0", "sha512-PmlshTLtLFLgWtF/b23T1OwX53AugJ9RZ3qPE2c01VFAbgt3/G"
            "SNI/etzA/GzdrkceXFma+FDHNXUppKuM0U6Q==", (
                ("https://cdn.jsdelivr.net/npm/vega-embed@6", "build/vega-embed.min.js"),)),
)


def packages_hash(packages: tuple[Package, ...] = PACKAGES) -> str:
    text = json.dumps([[p.name, p.version, p.integrity, p.urls, p.keep] for p in packages])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def is_vendored(home: Path, packages: tuple[Package, ...] = PACKAGES) -> bool:
    manifest = home / ASSETS_MANIFEST
    try:
        return bool(json.loads(manifest.read_text()).get("hash") == packages_hash(packages))
    except (OSError, ValueError):
        return False


def vendor(home: Path | None = None, packages: tuple[Package, ...] = PACKAGES) -> Path:
    """Fill ``home`` with the packages' files and the manifest (no-op when already done)."""
    home = home or report_assets_home()
    if is_vendored(home, packages):
        return home
    if shutil.which("npm") is None:
        raise SetupError("vendoring the report assets needs npm (Debian package 'npm'; "
                         "`make setup` installs it)")
    home.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
    try:
        urls: dict[str, str] = {}
        with tempfile.TemporaryDirectory() as packs:
            for package in packages:
                tarball = _pack(package, Path(packs))
                _extract(tarball, package, building / package.folder)
                urls.update({url: f"{package.folder}/{path}" for url, path in package.urls})
        (building / ASSETS_MANIFEST).write_text(json.dumps(
            {"hash": packages_hash(packages), "urls": urls,
             "packages": {p.name: p.version for p in packages}}, indent=1, sort_keys=True))
        old = home.with_name(f".{home.name}-old-{os.getpid()}")
        if home.exists():
            home.rename(old)
        building.rename(home)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return home


def _pack(package: Package, into: Path) -> Path:
    """``npm pack name@version`` into ``into``; the tarball, checked against its integrity."""
    spec = f"{package.name}@{package.version}"
    try:
        done = subprocess.run(["npm", "pack", spec, "--pack-destination", str(into), "--json",
                               "--silent"], capture_output=True, text=True, cwd=into,
                              timeout=NPM_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise SetupError(f"npm pack {spec} did not finish in {NPM_TIMEOUT_S}s") from exc
    if done.returncode != 0:
        raise SetupError(f"npm pack {spec} failed (is the npm registry reachable?): "
                         f"{(done.stderr or done.stdout).strip()[-500:]}")
    name = json.loads(done.stdout)[0]["filename"]
    tarball = into / name
    digest = "sha512-" + base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    if digest != package.integrity:
        raise SetupError(f"npm package {spec} has integrity {digest}, expected the pinned "
                         f"{package.integrity}")
    return tarball


def _extract(tarball: Path, package: Package, target: Path) -> None:
    """Copy the kept files (and folders) of the package's tarball into ``target``."""
    wanted = {path for _, path in package.urls}
    folders = tuple(p for p in package.keep if p.endswith("/"))
    found: set[str] = set()
    with tarfile.open(tarball) as archive:
        for member in archive.getmembers():
            path = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if not member.isfile() or ".." in Path(path).parts:
                continue
            if path in wanted or path in package.keep or path.startswith(folders):
                source = archive.extractfile(member)
                assert source is not None
                (target / path).parent.mkdir(parents=True, exist_ok=True)
                (target / path).write_bytes(source.read())
                found.add(path)
    missing = wanted - found
    if missing:
        raise SetupError(f"npm package {package.name}@{package.version} lacks {sorted(missing)}")


def main(argv: list[str]) -> int:
    if argv[:1] != ["vendor"] or len(argv) > 2:
        print("usage: python -m python_ingest.reports.assets vendor [FOLDER]", file=sys.stderr)
        return 2
    try:
        home = vendor(Path(argv[1]) if len(argv) > 1 else None)
    except SetupError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 1
    print(f"report assets in {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
