"""Function bundles: a deployment folder as one deterministic zip, and back.

A bundle holds the manifest (as ``dbus.toml``) and the function module: the
``.py`` file, or the package folder without caches and hidden files. Entries are
sorted and carry a fixed time and mode, so the same content always gives the
same bytes; the content hash (``sha256:`` over each path and its bytes) names
the bundle, and the cache folder it is unpacked into.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbus_fn.dependencies import REQUIREMENTS
from dbus_fn.errors import BundleError, ManifestError, SecretLeakError
from dbus_fn.home import home_from_environment
from dbus_fn.manifest import (
    ES_OPTIONS,
    MANIFEST_FILE,
    Manifest,
    load_manifest,
    manifest_path,
    manifest_table,
)
from dbus_fn.registry import load_deployment

if TYPE_CHECKING:
    from dbus_fn.dependencies import Resolved

MAX_BUNDLE_BYTES = 900_000
"""ZooKeeper refuses a znode over 1 MB (``jute.maxbuffer``); keep clear of it."""

_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
# Keys that name a secret: a password (passphrase), token, key or credential, HTTP
# authentication (Authorization, basic_auth, http_auth, bearer_auth), and key
# material: a private key itself (ssl.key.pem, ssl.keystore.key, private_key). A
# key's location (ssl.key.location, a keystore's) and certificates (ssl.ca.pem,
# ssl.certificate.pem, ssl.keystore.certificate.chain) are no secret.
_SECRET_KEY = re.compile(
    r"pass(word|wd)?|secret|token|api[_.-]?key|credential|authori[sz]ation|"
    r"(^|[_.-])auth($|[_.-])|(^|[_.-])key([_.-]pem)?$",
    re.I,
)
# Values that hold a secret whatever their key: an address with a password
# (scheme://user:password@, basic auth in an http URL too; the password may hold a
# '/'); an HTTP Authorization value ("Bearer ...", "Basic ..."); key=value settings
# that set one, as a JAAS config does (sasl.jaas.config = '... password="..."'); a
# PEM private key (a certificate beside it or not).
_ADDRESS_WITH_PASSWORD = re.compile(r"://[^/@\s:]*:[^@\s]+@")
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY", re.I)
_SECRET_SETTING = re.compile(
    r"^\s*(bearer|basic|token|apikey)\s+\S"
    r"|(^|[\s;,])(pass(word|wd)?|secret|token|api[_.-]?key|credentials?)\s*[=:]\s*\S",
    re.I,
)


@dataclass(frozen=True, slots=True)
class Bundle:
    """One packaged version of a deployment."""

    name: str
    version: str
    manifest: Mapping[str, Any]
    content_hash: str
    files: tuple[str, ...]
    data: bytes = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.data)


def manifest_json(manifest: Manifest) -> dict[str, Any]:
    """The manifest as plain JSON values (what the registry shows)."""
    return {
        "name": manifest.name,
        "version": manifest.version,
        "module": manifest.module,
        "tables": list(manifest.tables),
        "sources": list(manifest.sources),
        "default_route": None if manifest.default_route is None else str(manifest.default_route),
        "dead_letter_route": str(manifest.dead_letter_route),
        "timeout": manifest.timeout,
        "sinks": _plain(manifest.sinks),
        "initial": manifest.initial,
        "delivery": manifest.delivery,
    }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def check_no_secrets(value: Any, where: str) -> None:
    """Refuse a secret-looking key, or a value holding a password, token or private key
    (an address with a password, an Authorization value, a JAAS config, a PEM key),
    anywhere in ``value``.

    The message names the place and the fix, never the value. In a table of sinks
    (``{"kafka": {...}, "es": {...}}``) the fix is the option that names the
    runtime's environment variable instead (``"ssl.key.pem_env" = "VARIABLE"``).
    """
    _check_no_secrets(value, where, ())


def _check_no_secrets(value: Any, where: str, keys: tuple[str, ...]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            place = f"{where}.{key}"
            # A variable's name (KEY_env) or a file's path (KEY_file) names a secret.
            names_variable = str(key).endswith(("_env", "_file")) and isinstance(item, str)
            if _SECRET_KEY.search(str(key)) and item not in (None, "") and not names_variable:
                raise SecretLeakError(
                    f"{place} looks like a secret; secrets must not go into ZooKeeper: "
                    f"{_remedy((*keys, str(key)))}",
                    where=place,
                )
            _check_no_secrets(item, place, (*keys, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_no_secrets(item, f"{where}[{index}]", keys)
    elif isinstance(value, str):
        what = (
            "a private key"
            if _PRIVATE_KEY.search(value)
            else "an address with a password"
            if _ADDRESS_WITH_PASSWORD.search(value)
            else "a password or token"
            if _SECRET_SETTING.search(value)
            else None
        )
        if what is not None:
            raise SecretLeakError(
                f"{where} holds {what}; secrets must not go into ZooKeeper: {_remedy(keys)}",
                where=where,
            )


def _remedy(keys: tuple[str, ...]) -> str:
    """How to give the secret found under ``keys`` (a sinks table's scheme, then its
    option) by the name of the runtime's environment variable instead."""
    if len(keys) < 2:
        return "give the runtime an environment variable or secret file instead"
    option = keys[-1]
    if keys[0] == "es" and f"{option}_env" not in ES_OPTIONS:
        return (
            "name the runtime's environment variables that hold the login instead: "
            "username with password_env, or api_key_env (_file for a secret file)"
        )
    return (
        f'name the runtime\'s environment variable that holds it instead, "{option}_env" = '
        f'"VARIABLE" (or its secret file, "{option}_file" = "/path")'
    )


def content_hash(files: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        content = files[path]
        digest.update(path.encode() + b"\0" + str(len(content)).encode() + b"\0")
        digest.update(content)
    return "sha256:" + digest.hexdigest()


def zip_files(contents: Mapping[str, bytes], *, compresslevel: int) -> bytes:
    """``contents`` (path to bytes) as a deflated zip that depends on nothing else:
    entries sorted, each with a fixed time and mode 0644."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for entry in sorted(contents):
            info = zipfile.ZipInfo(entry, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, contents[entry], compresslevel=compresslevel)
    return buffer.getvalue()


def _check_module_is_a_path(manifest: Manifest) -> None:
    spec = manifest.module
    if not (spec.endswith(".py") or "/" in spec or "\\" in spec):
        raise BundleError(
            f"module = {spec!r} in {MANIFEST_FILE} is a dotted name, which a runtime cannot "
            f"import from a bundle; write the path instead, e.g. module = "
            f'"{spec.replace(".", "/")}.py" or "./{spec.replace(".", "/")}"',
            path=str(manifest.root),
        )


def _module_files(manifest: Manifest, module: Any, root: Path) -> dict[str, Path]:
    spec = manifest.module
    file = Path(getattr(module, "__file__", "") or "")
    if not file.is_file():
        raise BundleError(f"{spec}: the loaded module has no source file", path=str(root))
    package = getattr(module, "__path__", None) is not None
    top = file.resolve().parent if package else file.resolve()
    try:
        top.relative_to(root)
    except ValueError:
        raise BundleError(
            f"module {spec!r} is at {top}, outside the deployment folder {root}; a bundle "
            "carries only the folder: move the module into it",
            path=str(root),
        ) from None
    if not package:
        return {top.relative_to(root).as_posix(): top}
    found: dict[str, Path] = {}
    for folder, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in names:
            if name.startswith(".") or name.endswith((".pyc", ".pyo")):
                continue
            path = Path(folder) / name
            found[path.relative_to(root).as_posix()] = path
    return found


def _check_sinks_hold_no_secret(path: str | Path) -> None:
    """A secret in the sink tables is named first, before any other problem of the
    manifest (an unknown option, say) could hide it."""
    try:
        sinks = manifest_table(path).get("sinks", {})
    except ManifestError:
        return  # load_manifest says what is wrong with the file
    if isinstance(sinks, Mapping):
        check_no_secrets(sinks, "dbus.toml sinks")


def build_bundle(
    path: str | Path, *, name: str | None = None, packages: Resolved | None = None
) -> Bundle:
    """Validate the deployment at ``path`` (as ``dbus fn validate`` does) and package it,
    with its ``requirements.txt`` when it has one.

    ``name`` is the name to register it under; the manifest's name by default.
    ``packages``: its own packages, resolved (``dbus_fn.dependencies``), which its
    module may import.
    """
    _check_sinks_hold_no_secret(path)
    # A dotted name would import whatever sys.path has under that name: refuse it
    # before loading anything.
    _check_module_is_a_path(load_manifest(path))
    # Registered under ``name``, it is that deployment everywhere, in the manifest its
    # version node shows too; its files stay as they are (one folder, several names).
    deployment = load_deployment(path, packages=packages, name=name)
    manifest = deployment.manifest
    assert manifest.root is not None
    root = manifest.root.resolve()
    data = manifest_json(manifest)
    check_no_secrets(data["sinks"], "dbus.toml sinks")
    sources: dict[str, Path] = {MANIFEST_FILE: manifest_path(path)}
    sources.update(_module_files(manifest, deployment.module, root))
    if (root / REQUIREMENTS).is_file():
        sources[REQUIREMENTS] = root / REQUIREMENTS
    contents = {entry: file.read_bytes() for entry, file in sources.items()}
    digest = content_hash(contents)
    packed = zip_files(contents, compresslevel=9)
    if len(packed) > MAX_BUNDLE_BYTES:
        raise BundleError(
            f"{root}: the bundle is {len(packed)} bytes, over the {MAX_BUNDLE_BYTES} a ZooKeeper "
            "node can hold; keep data files out of the module folder",
            path=str(root),
        )
    return Bundle(
        name=manifest.name,
        version=manifest.version,
        manifest=data,
        content_hash=digest,
        files=tuple(sorted(contents)),
        data=packed,
    )


def default_cache_dir() -> Path:
    """``$DBUS_BUNDLE_CACHE``, else ``$DBUS_HOME/bundles``, else ``~/.cache/dbus/bundles``."""
    explicit = os.environ.get("DBUS_BUNDLE_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = home_from_environment()
    if home is not None:
        return home / "bundles"
    return Path.home() / ".cache" / "dbus" / "bundles"


def unpack(data: bytes) -> dict[str, bytes]:
    """The files of a bundle, checked: relative paths only."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            files = {info.filename: archive.read(info) for info in archive.infolist()}
    except (zipfile.BadZipFile, OSError) as exc:
        raise BundleError(f"not a valid bundle: {exc}") from None
    for entry in files:
        parts = Path(entry).parts
        if entry.startswith(("/", "\\")) or ".." in parts or not parts:
            raise BundleError(f"not a valid bundle: entry {entry!r} leaves its folder")
    return files


def materialize(bundle: Bundle, cache_dir: Path | None = None) -> Path:
    """Unpack ``bundle`` into a folder named by its content hash, once; return the folder.

    ``load_deployment(folder)`` then loads it. The content is checked against the
    hash, so a cached folder is always the bundle it is named after.
    """
    base = cache_dir if cache_dir is not None else default_cache_dir()
    target = base / bundle.content_hash.replace(":", "-")
    if (target / MANIFEST_FILE).is_file():
        return target
    files = unpack(bundle.data)
    if content_hash(files) != bundle.content_hash:
        raise BundleError(
            f"bundle {bundle.name} {bundle.version}: content does not match its hash "
            f"{bundle.content_hash}; deploy it again",
        )
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=base))
    try:
        for entry, content in files.items():
            destination = staging / entry
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(content)
        try:
            staging.rename(target)
        except OSError:
            if not (target / MANIFEST_FILE).is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
