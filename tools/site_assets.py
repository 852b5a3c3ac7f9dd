"""The site's JavaScript, served from the site itself: MathJax, require.js, the widget manager.

nbconvert's pages load these from CDNs, so offline (or behind a firewall) the maths shows as raw
``$...$`` and the widgets as nothing. ``tools/build_site.py`` instead takes them from the npm
registry with ``npm pack`` (the package tarball only, no dependency tree), checks each tarball
against the integrity hash pinned below, and copies the files the pages need into
``_site/_static/<package>/``. The tarballs are cached in ``build/site-npm/``: a second build needs
no network at all, and a tarball that does not match its hash is never used.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "site-npm"


@dataclass(frozen=True)
class Asset:
    name: str  # npm package name
    version: str
    integrity: str  # as the registry publishes it (npm view NAME@VERSION dist.integrity)
    folder: str  # _site/_static/<folder>/
    members: tuple[str, ...]  # paths inside the package (a trailing "/" copies a folder)

    @property
    def tarball(self) -> Path:
        # npm pack's file name: "@scope/name" -> "scope-name-VERSION.tgz"
        return CACHE / f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"


ASSETS = (
    # MathJax 3 (JupyterLab 4's renderer): the TeX->HTML bundle, its fonts, and the parts it loads
    # on demand (TeX extensions via \require, the menu's accessibility options).
    Asset(
        "mathjax",
        "3.2.2",
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
        "mathjax",
        (
            "es5/tex-chtml-full.js",
            "es5/output/",
            "es5/input/",
            "es5/a11y/",
            "es5/ui/",
            "es5/sre/",
            "es5/adaptors/",
            "LICENSE",
        ),
    ),
    # nbconvert's lab template loads require.js on every page; the widget manager needs it.
    Asset(
        "requirejs",
        "2.3.8",
        "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
        "requirejs",
        ("require.js", "LICENSE"),
    ),
    # ipywidgets 8's HTML manager: renders the saved widget state (base, controls, output widgets
    # are in the bundle) without a kernel; embed-amd.js is the whole manager, the fonts its icons.
    Asset(
        "@jupyter-widgets/html-manager",
        "1.0.15",
        "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
        "html-manager",
        (
            "dist/embed-amd.js",
            "dist/*.woff2",
            "dist/*.woff",
            "dist/*.ttf",
            "dist/*.eot",
            "dist/*.svg",
            "LICENSE",
        ),
    ),
)
MATHJAX = "mathjax/es5/tex-chtml-full.js"  # paths under _static/
REQUIREJS = "requirejs/require.js"
WIDGETS = "html-manager/dist/embed-amd.js"


def integrity_of(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def fetch(asset: Asset) -> Path:
    """The asset's tarball, from the cache or else from the npm registry; its hash checked."""
    if not (asset.tarball.is_file() and integrity_of(asset.tarball) == asset.integrity):
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit(
                "build_site: npm is needed once to fetch the site's JavaScript "
                f"({asset.name}@{asset.version}); install Node.js, or put the tarball at "
                f"{asset.tarball}"
            )
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:  # two builds at once never mix
            subprocess.run(
                [
                    npm,
                    "pack",
                    f"{asset.name}@{asset.version}",
                    "--pack-destination",
                    tmp,
                    "--silent",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            packed = Path(tmp) / asset.tarball.name
            got = integrity_of(packed)
            if got != asset.integrity:
                raise SystemExit(
                    f"build_site: {asset.name}@{asset.version} from npm has integrity "
                    f"{got}, expected {asset.integrity}; not used"
                )
            os.replace(packed, asset.tarball)
    return asset.tarball


def _wanted(member: str, patterns: tuple[str, ...]) -> bool:
    from fnmatch import fnmatch

    return any(member.startswith(p) if p.endswith("/") else fnmatch(member, p) for p in patterns)


def install(static: Path) -> dict[str, str]:
    """Unpack every asset's files into ``static``; returns {asset folder: "name@version"}."""
    installed = {}
    for asset in ASSETS:
        with tarfile.open(fetch(asset)) as tar:
            for member in tar.getmembers():
                inner = member.name.split("/", 1)[1] if "/" in member.name else member.name
                if not member.isfile() or not _wanted(inner, asset.members):
                    continue  # "package/..." is npm's top folder; links and folders are skipped
                target = static / asset.folder / inner
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as source, target.open("wb") as out:
                    shutil.copyfileobj(source, out)
        installed[asset.folder] = f"{asset.name}@{asset.version}"
    return installed
