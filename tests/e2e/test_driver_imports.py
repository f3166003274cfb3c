"""What a runtime's driver imports as its Spark session starts and runs a job: not
pandas, which pyspark's NumPy converters pulled into every driver's start
(``dbus_spark.spark.session._without_numpy_converters``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.e2e

DRIVER = textwrap.dedent("""
    import datetime, sys
    from dbus_spark.spark.session import spark_session

    spark = spark_session("local[1]", app_name="driver-imports")
    try:
        # Numbers, a list and a date go through py4j's converters into the JVM.
        counted = spark.range(3).count()
        day = spark.sparkContext._jvm.java.lang.String.valueOf(datetime.date(2026, 12, 6))
        listed = spark.sparkContext._jvm.java.util.ArrayList([1, 2]).size()
        print(counted, day, listed, "pandas" in sys.modules)
    finally:
        spark.stop()
""")


def test_the_driver_starts_its_session_and_runs_a_job_without_importing_pandas() -> None:
    done = subprocess.run(
        [sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == "3 2026-12-06 2 False"
