"""The services' home folder: where dbus keeps its local state, decided here only.

``DBUS_HOME`` when set; else, run from a checkout, the checkout's ``.dbus`` (or
``/var/tmp/dbus-<id>`` for a checkout other users cannot enter); else
``~/.local/state/dbus``. The local services keep their data there, a runtime its
default checkpoint; the sources file and the bundle cache go there when
``DBUS_HOME`` names it, and to their own per-user folders otherwise.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

HOME_ENV: Final = "DBUS_HOME"


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
    return Path("/var/tmp") / f"dbus-{digest}"


def checkout() -> Path | None:
    """The checkout of this repository this dbus-fn runs from (an editable install);
    None for an installed release."""
    repo = Path(__file__).resolve().parents[2]
    pyproject = repo / "pyproject.toml"
    if pyproject.is_file() and 'name = "dbus-fn"' in pyproject.read_text(encoding="utf-8"):
        return repo
    return None
