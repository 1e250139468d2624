"""The report assets: vendored once at set-up, and every Data Docs page pointed at its copy."""

from __future__ import annotations

import json
from pathlib import Path

from python_ingest.reports.assets import PACKAGES, is_vendored, packages_hash
from python_ingest.steps.fork.split import ASSETS_MANIFEST, localize_pages, report_assets_home
from tests.reports.conftest import external_assets

PAGE = """<html><head>
<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>
<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-lite@5"></script>
<script src="https://x.test/popper.min.js" integrity="sha384-abc" crossorigin="anonymous"></script>
</head><body><img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=1&dataContextId=2">
<img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/full_logo_dark.png">
<a href="https://greatexpectations.io">a link, not an asset</a></body></html>"""


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "assets"
    (home / "vega-5").mkdir(parents=True)
    (home / "vega-5" / "vega.min.js").write_text("// vega")
    urls = {"https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": "b/b.css",
            "https://cdn.jsdelivr.net/npm/vega@5": "vega-5/vega.min.js",
            "https://cdn.jsdelivr.net/npm/vega-lite@5": "vl/vl.js",
            "https://x.test/popper.min.js": "p/popper.js"}
    (home / ASSETS_MANIFEST).write_text(json.dumps({"urls": urls}))
    return home


def test_pages_at_any_depth_point_at_the_copies_in_their_report_folder(tmp_path: Path) -> None:
    home, report = _home(tmp_path), tmp_path / "reports" / "job"
    deep = report / "validations" / "suite" / "run" / "time" / "page.html"
    for page in (report / "index.html", deep):
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(PAGE)
    (report / "static" / "images").mkdir(parents=True)
    (report / "static" / "images" / "logo-long.png").write_bytes(b"png")

    assert localize_pages(report, home)
    assert external_assets(report) == {}
    index, page = (report / "index.html").read_text(), deep.read_text()
    assert '"static/vendor/vega-5/vega.min.js"' in index
    assert '"static/vendor/vl/vl.js"' in index  # vega-lite@5 is not vega@5 plus a suffix
    assert '"../../../../static/vendor/b/b.css"' in page
    assert page.count("../../../../static/images/logo-long.png") == 2  # no full_logo_dark copy
    assert "integrity=" not in page and "crossorigin" not in page  # file:// cannot do CORS
    assert 'href="https://greatexpectations.io"' in page  # links stay
    assert (report / "static" / "vendor" / "vega-5" / "vega.min.js").read_text() == "// vega"
    assert localize_pages(report, home)  # again: nothing left to change
    assert deep.read_text() == page


def test_without_vendored_assets_pages_stay_as_they_are(tmp_path: Path) -> None:
    report = tmp_path / "job"
    report.mkdir()
    (report / "index.html").write_text(PAGE)
    assert not localize_pages(report, tmp_path / "missing")
    assert (report / "index.html").read_text() == PAGE


def test_set_up_vendored_every_package_with_every_file() -> None:
    home = report_assets_home()
    assert is_vendored(home), f"{home}: run `make setup` (python -m python_ingest.reports.assets)"
    manifest = json.loads((home / ASSETS_MANIFEST).read_text())
    assert manifest["hash"] == packages_hash()
    for package in PACKAGES:
        for url, path in package.urls:
            assert (home / manifest["urls"][url]).is_file(), (url, path)
    fonts = home / "fortawesome-fontawesome-free-6.6.0" / "webfonts"
    assert (fonts / "fa-solid-900.woff2").is_file()  # what all.min.css loads
