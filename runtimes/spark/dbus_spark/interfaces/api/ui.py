"""``dbus ui``: serve one dashboard, JSON API and ``/metrics`` for a whole cluster."""

from __future__ import annotations

import signal
import threading

import click

from dbus_fn.cli._options import env_option
from dbus_fn.cli.cluster import ZooKeeperOptions, zookeeper_options
from dbus_fn.errors import ConfigError
from dbus_spark.config.runtime import DEFAULT_UI_ADDRESS
from dbus_spark.interfaces.cli import API_TOKEN, RUN_FOR


@click.command("ui")
@zookeeper_options
@env_option(
    "--api",
    "api_address",
    env="DBUS_UI",
    default=DEFAULT_UI_ADDRESS,
    show_default=True,
    help="Serve the cluster's dashboard (/), JSON API (/api/v1/...) and metrics (/metrics) "
    "at HOST:PORT (port 0: any free one).",
)
@API_TOKEN
@RUN_FOR
def ui(
    zk: ZooKeeperOptions, api_address: str, api_token: str | None, run_for: float | None
) -> None:
    """One dashboard and API for a whole cluster: ZooKeeper's view of who reads what,
    and every runtime's own API (registered in ZooKeeper), merged. Runs until stopped.
    The token (--api-token) is also sent to the runtimes' APIs."""
    from dbus_spark.interfaces.api import ApiServer, ApiSettings, build_app
    from dbus_spark.interfaces.api.cluster import ClusterView

    settings = ApiSettings.parse(api_address, api_token)
    if settings is None:
        raise ConfigError(
            "dbus ui with --api off would serve nothing: give it HOST:PORT", setting="api"
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with zk.open() as (client, zk_settings):
        view = ClusterView(client, zk_settings, settings.token)
        server = ApiServer(build_app(view, settings.token), settings, may_be_off=False)
        try:
            url = server.start()
            click.echo(f"ui: serving cluster {zk_settings.cluster} at {url}/ (API {url}/api/v1/,"
                       f" metrics {url}/metrics)")  # fmt: skip
            stop.wait(run_for)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
            view.close()
    click.echo("ui stopped")
