"""JVM options of the user's for Spark (``DBUS_SPARK_JAVA_OPTIONS``, ``dbus_spark.config.jvm``):
they reach the driver and the executors after dbus's own, and options that are not
options, or that the JVM refuses, are one line naming the variable and the fix."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from dbus_fn.errors import ConfigError
from dbus_spark.config import jvm, logs
from dbus_spark.spark.session import spark_session


def test_the_added_options_come_after_dbus_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm.OPTIONS_ENV, "-Xss2m  '-Dwho=a b'")
    assert jvm.added_options() == ["-Xss2m", "-Dwho=a b"]
    options = logs.spark_java_options()
    assert options.startswith("-Dlog4j2.configurationFile=")
    assert options.endswith("-Xss2m '-Dwho=a b'")


def test_none_adds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm.OPTIONS_ENV, "  ")
    assert jvm.added_options() == []
    assert jvm.refused_options() is None
    monkeypatch.delenv(jvm.OPTIONS_ENV)
    assert jvm.added_options() == []


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('-Xmx1g "-Dunclosed', "does not split into options (No closing quotation)"),
        ("-Xmx1g Xss2m", "'Xss2m' is not a JVM option (they begin with '-'"),
    ],
)
def test_what_is_no_option_is_one_line_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    monkeypatch.setenv(jvm.OPTIONS_ENV, value)
    with pytest.raises(ConfigError) as raised:
        jvm.added_options()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(jvm.OPTIONS_ENV)
    assert says in message
    assert message.endswith("unset it")
    assert raised.value.exit_code == 2


def test_the_jvm_says_which_option_it_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm.OPTIONS_ENV, "-Xss2m -XX:+NoSuchOptionAnywhere")
    assert jvm.refused_options() == "Unrecognized VM option 'NoSuchOptionAnywhere'"
    monkeypatch.setenv(jvm.OPTIONS_ENV, "-Xss2m")
    assert jvm.refused_options() is None


def test_a_session_the_jvm_refuses_is_a_config_error_naming_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Spark starts its JVM with -XX:+IgnoreUnrecognizedVMOptions: an unknown -XX option
    # is passed over there, a heap size that is none stops it.
    monkeypatch.setenv(jvm.OPTIONS_ENV, "-Xss2m -Xmxlots")
    with pytest.raises(ConfigError) as raised:
        spark_session("local[1]", app_name="dbus-refused-options")
    message = str(raised.value)
    assert "\n" not in message
    assert "Spark's JVM did not start with DBUS_SPARK_JAVA_OPTIONS='-Xss2m -Xmxlots'" in message
    assert "Invalid maximum heap size: -Xmxlots" in message
    assert message.endswith("fix the options or unset it")
