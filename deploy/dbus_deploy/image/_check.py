"""Whether an image can serve as a dbus driver or Spark worker: dbus, pyspark, Java.

The check runs the image once, offline (``--network none``), with a short Python
script that imports what a worker imports and asks Java for its version, so an
image is refused before a worker container is started from it, with the one
thing it lacks named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dbus_deploy.image._errors import NotARuntimeImageError, one_line

if TYPE_CHECKING:
    import docker

_PROBE = """
import json, re, shutil, subprocess, sys
found = {"python": sys.version.split()[0]}
def done(missing=None):
    if missing:
        found["missing"] = missing
    print(json.dumps(found))
    sys.exit(0)
try:
    import dbus_fn, dbus_spark, dbus_deploy
    from importlib.metadata import version
    found["dbus"] = version("dbus-fn")
except Exception as exc:
    done(f"dbus is not importable by python3 ({type(exc).__name__}: {exc})")
try:
    import pyspark
    found["pyspark"] = pyspark.__version__
except Exception as exc:
    done(f"pyspark is not importable ({type(exc).__name__}: {exc})")
java = shutil.which("java")
if java is None:
    done("java is not on its PATH")
answer = subprocess.run([java, "-version"], capture_output=True, text=True)
match = re.search(r'version "([^"]+)"', answer.stderr + answer.stdout)
if answer.returncode or not match:
    done(f"{java} -version failed: {(answer.stderr or answer.stdout).strip()[:200]}")
found["java"] = match.group(1)
done()
"""


@dataclass(frozen=True, slots=True)
class ImageCheck:
    """What an image that passed the check runs: its versions of each part."""

    image: str
    python: str
    dbus: str
    pyspark: str
    java: str


def check_image(client: docker.DockerClient, image: str) -> ImageCheck:
    """Run the probe in ``image``; :class:`NotARuntimeImageError` names what it lacks."""
    import docker.errors

    try:
        output = client.containers.run(
            image, ["python3", "-c", _PROBE], network_mode="none", remove=True,
            stdout=True, stderr=False, entrypoint=[],
        )  # fmt: skip
    except docker.errors.ImageNotFound as exc:
        raise NotARuntimeImageError(image, "there is no such image in the engine") from exc
    except docker.errors.ContainerError as exc:
        raise NotARuntimeImageError(image, f"its python3 failed (exit {exc.exit_status})") from exc
    except docker.errors.APIError as exc:
        text = str(getattr(exc, "explanation", "") or exc)
        if "executable file not found" in text or "no such file or directory" in text:
            raise NotARuntimeImageError(image, "it has no python3 on its PATH") from exc
        raise NotARuntimeImageError(image, one_line(text)) from exc
    try:
        found = json.loads(output.decode("utf-8", errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise NotARuntimeImageError(image, "its python3 printed no answer to the check") from exc
    if "missing" in found:
        raise NotARuntimeImageError(image, found["missing"])
    return ImageCheck(image, found["python"], found["dbus"], found["pyspark"], found["java"])
