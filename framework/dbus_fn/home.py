"""The services' home folder: where dbus keeps its local state, decided here only.

``DBUS_HOME`` when set; else, run from a checkout, the checkout's ``.dbus`` (or
``/var/tmp/dbus-<id>`` for a checkout other users cannot enter); else
``~/.local/state/dbus``. The local services keep their data there, a runtime its
default checkpoint; the sources file and the bundle cache go there when
``DBUS_HOME`` names it, and to their own per-user folders otherwise.

A home in ``/var/tmp`` outlives its checkout (a clone in a ``mktemp -d`` folder that
is deleted after a test run): it notes which checkout it serves (``mark_checkout``),
so one whose checkout is gone can be found and removed (``forgotten_homes``).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

HOME_ENV: Final = "DBUS_HOME"
SHARED_ROOT: Final = Path("/var/tmp")
"""Where a checkout other users cannot enter keeps its home."""
CHECKOUT_MARK: Final = "checkout"
"""The file in such a home naming the checkout it serves."""
_PROJECT_LINE: Final = 'name = "dbus-fn"'
_HOME_NAME: Final = re.compile(r"dbus-[0-9a-f]{12}")


def dbus_home(environ: Mapping[str, str] | None = None) -> Path:
    """The home by the precedence above; ``environ`` defaults to ``os.environ``."""
    chosen = home_from_environment(environ)
    if chosen is not None:
        return chosen
    repo = checkout()
    if repo is not None:
        return checkout_home(repo)
    return Path.home() / ".local" / "state" / "dbus"


def home_from_environment(environ: Mapping[str, str] | None = None) -> Path | None:
    """The folder ``DBUS_HOME`` names (absolute, ``~`` expanded); None when it is unset
    or blank."""
    raw = (os.environ if environ is None else environ).get(HOME_ENV, "").strip()
    return Path(raw).expanduser().resolve() if raw else None


def checkout_home(repo: Path) -> Path:
    """``<repo>/.dbus``, unless another user could not reach it.

    Elasticsearch runs as an unprivileged user, who must traverse every folder
    above its state; a checkout under a private folder (``/root/...``) gets its
    state in ``/var/tmp/dbus-<id of the checkout>`` instead, the same every time.
    """
    if all(folder.stat().st_mode & stat.S_IXOTH for folder in repo.parents if folder.exists()):
        return repo / ".dbus"
    digest = hashlib.sha1(str(repo).encode()).hexdigest()[:12]
    return SHARED_ROOT / f"dbus-{digest}"


def mark_checkout(home: Path, repo: Path) -> None:
    """Note in ``home``, kept outside ``repo``, which checkout it serves."""
    mark = home / CHECKOUT_MARK
    if not mark.is_file() or mark.read_text(encoding="utf-8") != str(repo):
        home.mkdir(parents=True, exist_ok=True)
        mark.write_text(str(repo), encoding="utf-8")


def forgotten_homes(root: Path = SHARED_ROOT) -> list[Path]:
    """Homes under ``root`` whose checkout (as marked) is no longer there. A home
    without a mark, or not named ``dbus-<id>``, is never listed."""
    found = []
    for home in sorted(root.glob("dbus-*")):
        mark = home / CHECKOUT_MARK
        if not _HOME_NAME.fullmatch(home.name) or home.is_symlink() or not mark.is_file():
            continue
        if not _is_checkout(Path(mark.read_text(encoding="utf-8").strip())):
            found.append(home)
    return found


def checkout() -> Path | None:
    """The checkout of this repository this dbus-fn runs from (an editable install);
    None for an installed release."""
    repo = Path(__file__).resolve().parents[2]
    return repo if _is_checkout(repo) else None


def _is_checkout(repo: Path) -> bool:
    pyproject = repo / "pyproject.toml"
    try:
        return pyproject.is_file() and _PROJECT_LINE in pyproject.read_text(encoding="utf-8")
    except OSError:
        return False
