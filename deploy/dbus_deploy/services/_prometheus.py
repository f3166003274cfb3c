"""Prometheus, from Debian's ``prometheus`` package: scrapes the local runtimes and
evaluates dbus's alert rules (``deploy/prometheus/dbus-rules.yml``).

Not one of the services ``up`` starts by default: ``dbus services up prometheus``.
It scrapes a runtime on its default API address (127.0.0.1:9464) and every target
listed in ``config/targets/*.json`` (Prometheus file service discovery: a runtime
on another port is one file there, picked up within seconds); and, as job
``dbus-ui``, ``dbus ui`` on its default address (127.0.0.1:9465), which says who
in a cluster reads what.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from dbus_deploy.services._config import ServicesConfig
from dbus_deploy.services._process import Launch
from dbus_deploy.services._service import Service
from dbus_fn.local_services import prometheus_targets

_BINARY = "prometheus"
SCRAPE_SECONDS = 2
"""Scrape and rule-evaluation interval: a local stack wants to see changes at once."""
DEFAULT_RUNTIME = "127.0.0.1:9464"
DEFAULT_UI = "127.0.0.1:9465"


def targets_dir(config: ServicesConfig) -> Path:
    """Where a file ``<name>.json`` adds scrape targets (file service discovery)."""
    return prometheus_targets(config.home)


class Prometheus(Service):
    name = "prometheus"
    log_name = "prometheus.log"
    start_timeout = 60.0

    def _binary(self) -> str | None:
        return shutil.which(_BINARY, path="/usr/bin:/bin:/usr/local/bin")

    def apt_packages(self) -> dict[str, str]:
        return {} if self._binary() else {"prometheus": self.name}

    @property
    def rules_file(self) -> Path:
        return self.config.repo / "deploy" / "prometheus" / "dbus-rules.yml"

    def prepare(self) -> Launch:
        self._make_dirs()
        targets = targets_dir(self.config)
        targets.mkdir(parents=True, exist_ok=True)
        binary = self._binary()
        if binary is None:
            raise FileNotFoundError("prometheus is not installed (apt-get install prometheus)")
        settings = {
            "global": {
                "scrape_interval": f"{SCRAPE_SECONDS}s",
                "evaluation_interval": f"{SCRAPE_SECONDS}s",
            },
            "rule_files": [str(self.rules_file)],
            "scrape_configs": [
                {
                    "job_name": "dbus",
                    "static_configs": [{"targets": [DEFAULT_RUNTIME]}],
                    "file_sd_configs": [
                        {"files": [str(targets / "*.json")], "refresh_interval": "5s"}
                    ],
                },
                {"job_name": "dbus-ui", "static_configs": [{"targets": [DEFAULT_UI]}]},
            ],
        }
        config_file = self.conf / "prometheus.yml"
        # JSON is YAML: no YAML writer needed.
        config_file.write_text(json.dumps(settings, indent=2) + "\n")
        return Launch(
            argv=[
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={self.data}",
                "--storage.tsdb.retention.time=2d",
                f"--web.listen-address={self.config.host}:{self.port}",
                "--web.enable-lifecycle",
            ],
            log_file=self.log_file,
            cwd=self.root,
            env={"PATH": "/usr/bin:/bin"},
        )

    def check_health(self) -> str | None:
        try:
            with urllib.request.urlopen(
                f"http://{self.config.host}:{self.port}/-/ready", timeout=2
            ) as answer:
                return None if answer.status == 200 else f"HTTP {answer.status}"
        except (urllib.error.URLError, OSError) as exc:
            return f"not ready: {exc}"
