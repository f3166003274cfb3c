"""The Prometheus that `dbus services up prometheus` runs, and dbus's alert rules:
valid for `promtool check rules`, and each alert fires on what should raise it
(`promtool test rules`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

from dbus_deploy.services import PrometheusEndpoint

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def _promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool comes with Debian's prometheus, which the fixture installs"
    return found


def test_the_rules_file_is_valid(prometheus_service: PrometheusEndpoint) -> None:
    result = subprocess.run(
        [_promtool(), "check", "rules", str(RULES / "dbus-rules.yml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_each_alert_fires_on_what_should_raise_it(
    prometheus_service: PrometheusEndpoint,
) -> None:
    result = subprocess.run(
        [_promtool(), "test", "rules", "dbus-rules.test.yml"],
        capture_output=True, text=True, check=False, cwd=RULES,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_server_loaded_the_rules(prometheus_service: PrometheusEndpoint) -> None:
    with urllib.request.urlopen(f"{prometheus_service.url}/api/v1/rules", timeout=10) as answer:
        groups = json.load(answer)["data"]["groups"]
    names = {rule["name"] for group in groups for rule in group["rules"]}
    assert names == {
        "DbusRuntimeGone", "DbusSourceDown", "DbusSourceLagging", "DbusStalled",
        "DbusDeadLettersRising", "DbusClusterSourceUnread", "DbusDeploymentBehind",
    }  # fmt: skip
