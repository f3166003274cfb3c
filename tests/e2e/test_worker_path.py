"""The path a runtime's Spark starts its Python workers with
(``dbus_spark.spark.session._files_on_workers_path``)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from pyspark import SparkFiles

pytestmark = pytest.mark.e2e


def test_a_python_worker_starts_with_sparks_files_folder_on_its_path(spark: Any) -> None:
    """pyspark's worker puts the folder at ``sys.path[1]`` when it is missing, and then
    has every zip importer read its archive again (0.2 s of a core a process); given in
    the worker's environment, it stands where PYTHONPATH put it, after pyspark's zips."""
    folder = SparkFiles.getRootDirectory()
    assert folder in spark.sparkContext.environment["PYTHONPATH"].split(os.pathsep)

    def where_the_folder_is(folder: str) -> tuple[int, list[str]]:
        """In a worker: the folder's index on ``sys.path``, and the worker's PYTHONPATH."""
        import os
        import sys

        index = sys.path.index(folder) if folder in sys.path else -1
        return index, os.environ.get("PYTHONPATH", "").split(os.pathsep)

    rdd = spark.sparkContext.parallelize([folder], 1)
    [(index, path)] = rdd.map(where_the_folder_is).collect()
    assert folder in path
    zips = [entry for entry in path if entry.endswith(".zip")]
    assert zips, f"pyspark's zips first on the worker's path: {path}"
    assert index > 1, f"the folder was put on the path by the worker itself, at {index}"
