"""The dashboard in a real headless Chromium: a running runtime's deployment appears
as nodes of the dataflow, its edges show a rate above zero after writes to MariaDB,
and a function that raises shows its dead-letter count and last error. A screenshot
is kept as an artifact (printed path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch, cli_runtime, insert_orders, tens_refused
from support import page_texts, wait_for

pytestmark = [pytest.mark.e2e]

ARTIFACTS = Path(__file__).resolve().parents[2] / ".dbus" / "artifacts"


def _rates(browser: Any) -> list[float]:
    return [float(rate or 0) for rate in page_texts(browser, "svg#flow text.rate", "data-rate")]


def test_the_dashboard_shows_the_flow_its_rates_and_a_raising_function(
    scratch: Scratch, browser: Any
) -> None:
    folder, table = tens_refused(scratch, "shown")
    with cli_runtime(scratch, folder) as url:
        browser.get(f"{url}/")
        wait_for(
            lambda: page_texts(browser, 'svg#flow g.node.deployment[data-id="deployment:shown"]')
            and page_texts(browser, "svg#flow g.node.source"),
            60, "the deployment and its source drawn as nodes",
        )  # fmt: skip
        assert page_texts(browser, "#status") == ["live"]

        def written_and_shown() -> bool:
            insert_orders(scratch, *next(batches))
            return any(rate > 0 for rate in _rates(browser))

        batches = iter([(first, first + 49) for first in range(1, 10_000, 50)])
        wait_for(written_and_shown, 90, "a rate above zero on an edge", every=1.0)
        edges = set(page_texts(browser, "svg#flow path.edge", "data-edge"))
        assert f"table:shop/{table}->deployment:shown" in edges
        assert f"deployment:shown->destination:kafka://{scratch.kafka_topic}" in edges
        shown = 'div.deployment[data-name="shown"]'
        wait_for(
            lambda: int(page_texts(browser, f'{shown} b[data-field="dead_letters"]')[0] or 0) > 0,
            30, "the dead letters counted", ignoring=(IndexError, ValueError),
        )  # fmt: skip
        (error,) = page_texts(browser, f'{shown} tr[data-function="shown:there"] '
                                       'td[data-field="last_error"]')  # fmt: skip
        assert "tens are refused" in error
        recent = page_texts(browser, f'{shown} details[data-field="recent_errors"] li')
        assert recent and all("tens are refused" in line for line in recent), recent
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        screenshot = ARTIFACTS / "dashboard.png"
        assert browser.save_screenshot(str(screenshot))
        print(f"dashboard screenshot: {screenshot}")
