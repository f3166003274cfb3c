"""The Dockerfiles of the runtime image and the content hashes that name them.

Three images, so that each kind of change costs only what it must:

* ``dbus-deps:<hash>`` — the base plus a virtualenv with every third-party
  requirement of dbus's ``runtime`` extra, installed offline from wheels the host
  downloaded once. Named by the base image, the requirements and the wheel files,
  so it is built once per dependency set and a dbus code change never re-installs
  pyspark.
* ``dbus-core:<hash>`` — the base, Java when the base lacks it, the venv copied
  from the deps image, dbus's own wheel and the native row decoder: everything but
  the functions. Named by dbus's sources, so a function change never rebuilds it.
* ``dbus-runtime:<hash>`` — the core image and the function folders (their
  requirements, then their code), named by the core image's id and the folders:
  a function change rebuilds those layers alone, whatever the builder's cache
  holds, and a core image built again makes new runtime tags.

Everything here is pure: the same inputs give the same text and the same tags.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DEPS_REPOSITORY = "dbus-deps"
CORE_REPOSITORY = "dbus-core"
RUNTIME_REPOSITORY = "dbus-runtime"
DEFAULT_BASE = "python:3.11-slim-bookworm"
"""A public image with Python 3.11 on Debian 12; Java 17 comes from its apt."""

VENV = "/opt/dbus/venv"
FUNCTIONS_DIR = "/opt/dbus/functions"
IMAGE_HOME = "/var/lib/dbus"
"""``DBUS_HOME`` inside the image: state of a driver or worker, never site-packages."""
PYTHON = "3.11"
LABEL = "org.dbus.image"

_SELF = re.compile(r"^dbus-fn\[([^\]]+)\]$")


def runtime_requirements(project: Mapping[str, object], extra: str = "runtime") -> tuple[str, ...]:
    """The requirements of dbus with ``extra``, its references to its own extras expanded.

    ``project`` is the ``[project]`` table of pyproject.toml.
    """
    optional = project.get("optional-dependencies", {})
    assert isinstance(optional, dict)
    found: list[str] = []
    pending = [*project.get("dependencies", []), *optional.get(extra, [])]  # type: ignore[misc]
    seen_extras = {extra}
    while pending:
        requirement = str(pending.pop(0)).strip()
        nested = _SELF.match(requirement.replace(" ", ""))
        if nested:
            for name in nested.group(1).split(","):
                if name not in seen_extras:
                    seen_extras.add(name)
                    pending.extend(optional.get(name, []))
        elif requirement not in found:
            found.append(requirement)
    return tuple(found)


def digest(*parts: str | bytes) -> str:
    """Twelve hex digits of a sha256 over ``parts`` (each length-prefixed)."""
    hasher = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return hasher.hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class DepsRecipe:
    """The deps image: which base, which pinned requirements, which wheel files."""

    base: str
    base_id: str
    pins: tuple[str, ...]
    wheels: tuple[str, ...]

    @property
    def dockerfile(self) -> str:
        check = (
            "import sys; v = sys.version_info[:2]; "
            f"sys.exit(None if v == ({PYTHON.replace('.', ', ')}) else "
            f"'the base image must have python3 {PYTHON}, it has ' + sys.version.split()[0])"
        )
        return "\n".join(
            [
                f"FROM {self.base}",
                f"LABEL {LABEL}=deps",
                # First, so a base that cannot host the venv fails before the big copy.
                f"RUN python3 -c {json.dumps(check)}",
                "COPY requirements.txt /tmp/dbus-deps/requirements.txt",
                "COPY wheels/ /tmp/dbus-deps/wheels/",
                f"RUN python3 -m venv {VENV} && {VENV}/bin/pip install --no-cache-dir "
                "--disable-pip-version-check --no-index "
                "--find-links /tmp/dbus-deps/wheels -r /tmp/dbus-deps/requirements.txt",
                "",
            ]
        )

    @property
    def requirements_txt(self) -> str:
        return "".join(f"{pin}\n" for pin in self.pins)

    @property
    def tag(self) -> str:
        return (
            f"{DEPS_REPOSITORY}:{digest(self.dockerfile, self.base_id, *self.pins, *self.wheels)}"
        )


@dataclass(frozen=True, slots=True)
class FunctionFolder:
    """A function folder baked into the image: its name there and its content hash."""

    name: str
    content: str
    has_requirements: bool = False


@dataclass(frozen=True, slots=True)
class CoreRecipe:
    """The core image: base, deps image, dbus's wheel (by content) and the native decoder."""

    base: str
    base_id: str
    deps_tag: str
    dbus_wheel: str
    dbus_content: str
    native_wheel: str | None = None
    """The capture's native row decoder, built on the host (``dbus_deploy.native``);
    None: the image's capture decodes in Python."""
    native_content: str = ""

    @property
    def dockerfile(self) -> str:
        lines = [
            f"FROM {self.base}",
            f"LABEL {LABEL}=core",
            f"ENV PATH={VENV}/bin:$PATH PYSPARK_PYTHON={VENV}/bin/python "
            f"DBUS_HOME={IMAGE_HOME} LANG=C.UTF-8",
            # The slim Python images have no man folders, which the JRE's postinst needs.
            "RUN command -v java >/dev/null || { mkdir -p /usr/share/man/man1 && "
            "apt-get update && apt-get install -y --no-install-recommends "
            "openjdk-17-jre-headless procps && rm -rf /var/lib/apt/lists/*; }",
            f"COPY --from={self.deps_tag} {VENV} {VENV}",
            f"COPY dist/{self.dbus_wheel} /opt/dbus/dist/{self.dbus_wheel}",
            f"RUN pip install --no-cache-dir --disable-pip-version-check --no-deps --no-index "
            f"/opt/dbus/dist/{self.dbus_wheel} && mkdir -p {IMAGE_HOME} "
            # Byte code in the zip Spark's Python processes import pyspark from.
            "&& python -m dbus_spark.spark.bytecode",
            'CMD ["dbus", "--help"]',
        ]
        if self.native_wheel:
            # Built for the host's Python; an image whose Python differs decodes in
            # Python, and says so in its build log.
            lines += [
                f"COPY dist/{self.native_wheel} /opt/dbus/dist/{self.native_wheel}",
                f"RUN pip install --no-cache-dir --disable-pip-version-check --no-deps "
                f"--no-index /opt/dbus/dist/{self.native_wheel} || echo 'warning: the "
                "native row decoder does not fit this image; the capture decodes in Python'",
            ]
        return "\n".join([*lines, ""])

    @property
    def tag(self) -> str:
        parts = [self.dockerfile, self.base_id, self.dbus_content, self.native_content]
        return f"{CORE_REPOSITORY}:{digest(*parts)}"


@dataclass(frozen=True, slots=True)
class RuntimeRecipe:
    """The runtime image: the core image (by its id) and the function folders."""

    core: CoreRecipe
    core_id: str
    """The id of the image tagged ``core.tag``: a core built again is a new runtime."""
    functions: tuple[FunctionFolder, ...] = ()

    @property
    def dockerfile(self) -> str:
        lines = [f"FROM {self.core.tag}", f"LABEL {LABEL}=runtime"]
        with_requirements = [f.name for f in self.functions if f.has_requirements]
        if with_requirements:
            # Before the code, so a code change does not install the requirements again;
            # offline, from the wheels the host fetched into the context.
            lines.append("COPY requirements/ /opt/dbus/requirements/")
            lines.extend(
                "RUN pip install --no-cache-dir --disable-pip-version-check --no-index "
                f"--find-links /opt/dbus/requirements/{name} "
                f"-r /opt/dbus/requirements/{name}/requirements.txt"
                for name in with_requirements
            )
        if self.functions:
            lines.append(f"COPY functions/ {FUNCTIONS_DIR}/")
        return "\n".join([*lines, ""])

    @property
    def content_tag(self) -> str:
        parts = [self.dockerfile, self.core_id]
        parts += [f"{f.name}={f.content}" for f in self.functions]
        return f"{RUNTIME_REPOSITORY}:{digest(*parts)}"


def pins_of(wheels: Iterable[str]) -> tuple[str, ...]:
    """``name==version`` for each wheel file name, sorted: the deps image's lock."""
    pins = set()
    for wheel in wheels:
        name, version = wheel.split("-")[:2]
        pins.add(f"{name.replace('_', '-').lower()}=={version}")
    return tuple(sorted(pins))
