"""`dbus image`: build the runtime image, check an image, run Spark workers from it.

Results go to stdout (a tag, a container id), progress to stderr, so
``TAG=$(dbus image build ...)`` works; failures end as one line and the exit
code of their error class (docs/image.md).
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import click

from dbus_deploy.image._base import BaseRecipe, ensure_base_image
from dbus_deploy.image._build import build_image, check_build_arguments, check_image_reference
from dbus_deploy.image._check import check_image
from dbus_deploy.image._daemon import docker_client, docker_host, start_daemon, stop_daemon
from dbus_deploy.image._errors import ImageBuildError
from dbus_deploy.image._prune import prune_images
from dbus_deploy.image._recipe import DEFAULT_BASE
from dbus_deploy.image._worker import check_worker_arguments, start_worker, stop_worker
from dbus_deploy.services import load_config
from dbus_fn.cli._options import env_option

ENV_HELP = (
    "Environment: DOCKER_HOST (the engine, default unix:///var/run/docker.sock), "
    "DBUS_HOME (caches and logs under <home>/image and <home>/logs)."
)


def _progress(message: str) -> None:
    click.echo(message, err=True)


@click.group(epilog=ENV_HELP)
def image() -> None:
    """Build the runtime image (driver and Spark worker in one), check images, run workers."""


@image.command(epilog=ENV_HELP)
@click.option("--stop", is_flag=True, help="Stop the dockerd this command started (none other).")
def daemon(stop: bool) -> None:
    """Make sure a Docker engine answers: as root, install docker.io and start dockerd
    (no bridge, no iptables; containers use the host network) when none does."""
    config = load_config()
    if stop:
        click.echo("dockerd stopped" if stop_daemon(config) else "no dockerd of ours runs")
        return
    with closing(start_daemon(config, progress=_progress)) as client:
        version = client.version().get("Version", "?")
    click.echo(f"docker {version} at {docker_host(config.environ)}")


@image.command(epilog=ENV_HELP)
@click.option("--mirror", help="Debian mirror (default: the one this machine's apt uses).")
def base(mirror: str | None) -> None:
    """Build a base image from Debian packages (debootstrap: Python 3.11, Java 17), for
    machines that cannot pull one; print its tag, for --base."""
    config = load_config()
    with closing(docker_client(config.environ)) as client:
        tag = ensure_base_image(client, config, BaseRecipe(), mirror=mirror, progress=_progress)
    click.echo(tag)


@image.command(epilog=ENV_HELP)
@env_option(
    "--base", env="DBUS_IMAGE_BASE", default=DEFAULT_BASE, show_default=True,
    help="The image to build on: Python 3.11 on Debian 12 (Java 17 is added when missing).",
)  # fmt: skip
@click.option(
    "--functions", "functions", multiple=True, metavar="PATH",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A function folder to bake in as the last layer (repeatable).",
)  # fmt: skip
@click.option("--tag", "tags", multiple=True, help="Another name for the image (repeatable).")
@click.option("--no-cache", is_flag=True, help="Ignore the builder's cache (a cold build).")
@click.option("-q", "--quiet", is_flag=True, help="Show build steps, not their output.")
def build(
    base: str, functions: tuple[Path, ...], tags: tuple[str, ...], no_cache: bool, quiet: bool
) -> None:
    """Build the runtime image from this checkout; print its content tag."""
    check_build_arguments(base, functions, tags)  # before the engine is asked anything
    config = load_config()
    try:
        with closing(docker_client(config.environ)) as client:
            built = build_image(
                client, config, base=base, functions=functions, tags=tags, nocache=no_cache,
                progress=_progress, verbose=not quiet,
            )  # fmt: skip
    except ImageBuildError as exc:
        if quiet:  # otherwise the step's output is already on the screen
            for line in exc.log:
                click.echo(f"  {line}", err=True)
        raise
    action = "built" if built.built else "found"
    _progress(f"{action} {built.tag} in {built.seconds:.1f}s ({built.size / 1e6:.0f} MB)")
    click.echo(built.tag)


@image.command(epilog=ENV_HELP)
@click.argument("name", metavar="IMAGE")
def check(name: str) -> None:
    """Check that IMAGE can serve as dbus driver and Spark worker (dbus, pyspark, Java)."""
    check_image_reference(name, "IMAGE")
    with closing(docker_client()) as client:
        result = check_image(client, name)
    click.echo(
        f"{name}: dbus {result.dbus}, pyspark {result.pyspark}, python {result.python}, "
        f"java {result.java}"
    )


@image.command(epilog=ENV_HELP)
@click.option("--image", "name", required=True, help="A runtime image (`dbus image build`).")
@click.option("--master", required=True, help="The Spark master: spark://HOST:PORT.")
@click.option("--cores", type=int, default=2, show_default=True)
@click.option("--memory", default="2g", show_default=True, help="Like 512m or 2g.")
@click.option("--name", "container_name", help="The container's name (default: dbus-worker-<hex>).")
def worker(name: str, master: str, cores: int, memory: str, container_name: str | None) -> None:
    """Start a Spark worker in a container of IMAGE (host network, no volumes); print
    its container id once the master accepted it."""
    check_worker_arguments(name, master, cores, memory)  # before the engine is asked anything
    with closing(docker_client()) as client:
        started = start_worker(
            client, name, master, cores=cores, memory=memory, name=container_name
        )
    click.echo(started.id)


@image.command(epilog=ENV_HELP)
@click.argument("container", metavar="CONTAINER")
@click.option("--kill", is_flag=True, help="SIGKILL instead of a graceful stop.")
def stop(container: str, kill: bool) -> None:
    """Stop and remove a worker container started by `dbus image worker`."""
    with closing(docker_client()) as client:
        stop_worker(client, container, kill=kill)


@image.command(epilog=ENV_HELP)
@click.option("--keep", type=click.IntRange(0), default=3, show_default=True,
              help="How many of the newest runtime, core and deps images to keep.")  # fmt: skip
def prune(keep: int) -> None:
    """Remove old dbus-runtime, dbus-core and dbus-deps content tags and untagged dbus
    images; images a container uses and names given with --tag stay."""
    with closing(docker_client()) as client:
        for removed in prune_images(client, keep=keep):
            click.echo(f"removed {removed}")
