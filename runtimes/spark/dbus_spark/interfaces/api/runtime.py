"""One runtime's API: what it shows and the requests it takes, on a thread of the
runtime's own process, found by commands through a file beside the checkpoint."""

from __future__ import annotations

import logging
from pathlib import Path

from dbus_fn.files import replace_file
from dbus_spark.interfaces.api.desk import RequestDesk
from dbus_spark.interfaces.api.server import ApiServer, ApiSettings, build_app
from dbus_spark.interfaces.preview.service import Previewer
from dbus_spark.observe import RuntimeMetrics
from dbus_spark.state.checkpoint import address_path


class RuntimeApi:
    """The API server of a runtime, its metrics and its request desk."""

    def __init__(
        self, server: ApiServer, metrics: RuntimeMetrics, desk: RequestDesk, previewer: Previewer
    ) -> None:
        self.server = server
        self.metrics = metrics
        self.desk = desk
        self.previewer = previewer
        self.address_file: Path | None = None

    @classmethod
    def serve(cls, address: str, token: str | None, runtime_id: str) -> RuntimeApi | None:
        """The API bound at ``address`` before Spark starts (a taken port fails at
        once), or None for ``off``."""
        settings = ApiSettings.parse(address, token)
        if settings is None:
            return None
        metrics = RuntimeMetrics(runtime_id=runtime_id)
        desk = RequestDesk()
        previewer = Previewer(metrics.window, metrics.config)
        app = build_app(metrics, settings.token, desk, previewer)
        return cls(ApiServer(app, settings), metrics, desk, previewer)

    def start(self, checkpoint_dir: str) -> str:
        """Serve the runtime running at ``checkpoint_dir``, and say where; the URL."""
        url = self.server.start()
        self.desk.open(checkpoint_dir)
        self.address_file = address_path(checkpoint_dir)
        # In one step: a command (or a test) that finds the file reads the whole URL,
        # never the empty file between its making and its writing.
        replace_file(self.address_file, url + "\n")
        logging.getLogger("dbus.runtime").info("api: serving %s/metrics", url)
        return url

    def stop(self) -> None:
        self.server.stop()
        self.metrics.close()
        if self.address_file is not None:
            self.address_file.unlink(missing_ok=True)


__all__ = ["RuntimeApi"]
