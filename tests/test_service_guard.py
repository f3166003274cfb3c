"""The suite's guard on services: a test not marked integration or e2e that reaches a
service fails at once, in any pass, before anything is started for it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent


def test_a_unit_test_that_reaches_a_service_fails_naming_itself_and_the_fix(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DBUS_TEST_TIMES", raising=False)  # not a test of the suite's run
    pytester.syspathinsert(TESTS)
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    integration\n    e2e\n    exclusive\n")
    # Asked for by name inside the test, the fixture is not among the test's fixtures:
    # collection cannot mark the test integration.
    pytester.makepyfile(
        test_sneaky="""
        def test_reaches_mariadb(request):
            request.getfixturevalue("mariadb_service")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    expected = (
        "*the unit test test_sneaky.py::test_reaches_mariadb asked for mariadb: a test "
        "that needs a service must use a service fixture*"
    )
    result.stdout.fnmatch_lines([expected])
