"""Runtime image build times and size: cold, warm, after a function change, after a dbus change.

Run with ``python tests/bench/bench_image.py [--base IMAGE] [--base-from-scratch]``
(as root on a machine with Docker, or with ``DOCKER_HOST`` set). Builds use a
copy of dbus's sources and of ``functions/orders``. It prints:

* cold: ``--no-cache`` (the deps, core and runtime images built step by step;
  the host's wheel cache is kept, so nothing is downloaded again),
* warm: nothing changed (the content tag exists), and with the tag removed but
  every step in the builder's cache,
* a function-only change (one file of the function folder),
* a dbus-only change (one module of dbus: its wheel is rebuilt, pyspark is not
  installed again),
* the sizes of the runtime image, its layers and the deps image,
* the base from Debian packages: import of the kept rootfs, and with
  ``--base-from-scratch`` debootstrap too.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import docker.errors
from image_support import source_snapshot

from dbus_deploy.image import BaseRecipe, build_image, ensure_base_image, start_daemon
from dbus_deploy.image._base import base_dir
from dbus_deploy.services import ServicesConfig, load_config

REPO = Path(__file__).resolve().parents[2]


def timed_build(label: str, client: Any, config: ServicesConfig, **options: Any) -> Any:
    built = build_image(client, config, **options)
    print(f"{label:<44} {built.seconds:7.1f} s   {built.tag}  (built: {built.built})")
    return built


def base_figures(client: Any, from_scratch: bool) -> str:
    config = load_config()
    recipe = BaseRecipe()
    tarball = base_dir(config) / f"{recipe.tag.split(':')[1]}.tar"
    if from_scratch:
        scratch = BaseRecipe(packages=(*recipe.packages, "less"))  # a new tag, a new rootfs
        began = time.monotonic()
        tag = ensure_base_image(client, config, scratch)
        print(f"{'base: debootstrap + tar + import':<44} {time.monotonic() - began:7.1f} s   {tag}")
        client.images.remove(tag)
        (base_dir(config) / f"{tag.split(':')[1]}.tar").unlink()
    tag = ensure_base_image(client, config, recipe)
    began = time.monotonic()
    client.api.import_image_from_file(str(tarball), repository="dbus-bench-base", tag="import")
    print(f"{'base: import of the kept rootfs tarball':<44} {time.monotonic() - began:7.1f} s")
    client.images.remove("dbus-bench-base:import")
    size = client.images.get(tag).attrs["Size"] / 1e6
    print(
        f"{'base image size':<44} {size:7.0f} MB  (tarball {tarball.stat().st_size / 1e6:.0f} MB)"
    )
    return tag


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="Base image (default: the one made from Debian packages).")
    parser.add_argument("--base-from-scratch", action="store_true",
                        help="Also time debootstrap of a new base (a minute or two).")  # fmt: skip
    args = parser.parse_args()
    client = start_daemon(load_config())
    base = base_figures(client, args.base_from_scratch)
    base = args.base or base
    with tempfile.TemporaryDirectory(prefix="bench-image-") as scratch:
        root = Path(scratch)
        (root / "src").mkdir()
        config = source_snapshot(root / "src")
        orders = root / "functions" / "orders"
        shutil.copytree(REPO / "functions" / "orders", orders)
        options = {"base": base, "functions": [orders]}

        before = {
            i.id for repo in ("dbus-deps", "dbus-core", "dbus-runtime")
            for i in client.images.list(repo)
        }  # fmt: skip
        cold = timed_build("cold (--no-cache: deps, core and runtime)", client, config,
                           nocache=True, **options)  # fmt: skip
        timed_build("warm: nothing changed", client, config, **options)
        client.images.remove(cold.tag, noprune=True)
        timed_build("warm: tag removed, every step cached", client, config, **options)

        module = orders / "orders.py"
        module.write_text(module.read_text() + f"\n# bench {uuid.uuid4()}\n")
        changed = timed_build("function-only change", client, config, **options)

        dbus_module = config.repo / "framework" / "dbus_fn" / "errors.py"
        dbus_module.write_text(dbus_module.read_text() + f"\n# bench {uuid.uuid4()}\n")
        dbus_changed = timed_build("dbus-only change (new wheel)", client, config, **options)

    image = client.images.get(changed.tag)
    newest_deps = max(client.images.list("dbus-deps"), key=lambda i: i.attrs["Created"])
    print(f"{'runtime image size':<44} {image.attrs['Size'] / 1e6:7.0f} MB")
    print(f"{'deps image size (build helper)':<44} {newest_deps.attrs['Size'] / 1e6:7.0f} MB")
    print("runtime image layers (newest first):")
    for layer in image.history():
        if layer["Size"]:
            created = " ".join(layer["CreatedBy"].replace("/bin/sh -c #(nop) ", "").split())
            print(f"  {layer['Size'] / 1e6:9.1f} MB  {created[:90]}")
    # What the bench made on the side: the images its --no-cache build replaced (now
    # untagged), and the two changed variants.
    for tag in (changed.tag, dbus_changed.tag):
        client.images.remove(tag)
    for image_id in before:
        with contextlib.suppress(docker.errors.APIError):
            if not client.images.get(image_id).tags:
                client.images.remove(image_id)
    client.close()


if __name__ == "__main__":
    main()
