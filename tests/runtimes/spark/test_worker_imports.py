"""What a runtime's Python processes import: each one is a Spark worker or planner,
and every module it loads is memory it holds for the session's life."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )


def test_the_source_and_sink_modules_load_no_elasticsearch_client_until_a_document_goes() -> None:
    done = _run(
        """
        import sys
        import dbus_spark.spark.job, dbus_spark.planning.source, dbus_spark.sinks.writer
        from dbus_spark.sinks.elasticsearch import ElasticsearchSink
        from dbus_spark.state.records import IndexAction

        sink = ElasticsearchSink("http://127.0.0.1:1", on_refused=print, retry_for=0)
        assert sink.flush() == 0
        sink.close()
        print("before", "elasticsearch" in sys.modules)
        sink.write(IndexAction(index="i", doc_id="1", version=1))
        try:
            sink.flush()
        except Exception as exc:
            print("refused", type(exc).__name__)
        print("after", "elasticsearch" in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [
        "before False", "refused ElasticsearchSinkError", "after True",
    ]  # fmt: skip


def test_the_registered_data_sources_load_no_reader_or_writer_until_one_is_made() -> None:
    done = _run(
        """
        import sys
        from dbus_spark.spark.datasources import BinlogDataSource, FunctionSinkDataSource

        heavy = ("pyarrow", "dbus_spark.planning.source", "dbus_spark.sinks.writer",
                 "dbus_fn.capture")
        print(sorted(m for m in heavy if m in sys.modules))
        source = BinlogDataSource({"config": "/nonexistent.json"})
        print(source.name(), source.schema().fieldNames())
        try:
            source.streamReader(source.schema())
        except Exception:
            pass  # no such configuration: the reader's module was imported to say so
        print(sorted(m for m in heavy if m in sys.modules))
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == "[]", "a planner that only creates the source imports no reader"
    assert lines[1] == "dbus_binlog ['source', 'record_type', 'value']"
    assert "dbus_spark.planning.source" in lines[2]


def test_the_source_s_spark_schema_is_its_tasks_arrow_schema() -> None:
    from pyspark.sql.pandas.types import from_arrow_schema

    from dbus_spark.spark.datasources import SCHEMA
    from dbus_spark.stage.worker import ARROW_SCHEMA

    assert from_arrow_schema(ARROW_SCHEMA) == SCHEMA


def test_a_read_task_hands_spark_its_counts_without_importing_pandas() -> None:
    """The rows a read task hands Spark are built from their buffers: ``pa.array`` on a
    list would import pandas into the worker to ask whether the list is a pandas object.
    The writer's tasks read them back as they were added, non-ASCII included."""
    done = _run(
        """
        import sys
        from dbus_spark.sinks.batch_commit import task_counts
        from dbus_spark.stage.counts import SinkCounts, StageCounts
        from dbus_spark.stage.worker import ARROW_SCHEMA, Batcher

        batcher = Batcher("bücher")
        assert batcher.flush() is None
        stats = StageCounts(rows=7)
        batcher.add_stats(stats)
        batcher.add_delivered(SinkCounts(records=5, kafka=3))
        batcher.add("stats", StageCounts(rows=2).to_bytes())
        batch = batcher.flush()
        assert batch.schema == ARROW_SCHEMA, batch.schema
        columns = batch.to_pydict()
        print(columns["source"], columns["record_type"])
        print(columns["value"][0] == stats.to_bytes())
        report = task_counts(iter([batch]))
        print(report.stage.rows, report.records, report.kafka)
        print("pandas" in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == [
        "['bücher', 'bücher', 'bücher'] ['stats', 'delivered', 'stats']",
        "True",
        "9 5 3",
        "False",
    ]


def test_the_sink_writer_s_processes_import_no_sink() -> None:
    """Spark makes the ``dbus_functions`` writer in processes that only plan the write,
    sum a task's counts or commit a batch: its module loads none of the sinks, their
    clients or the function stage (the read tasks write to the sinks themselves)."""
    done = _run(
        """
        import sys
        from dbus_spark.spark.datasources import FunctionSinkDataSource

        sink = FunctionSinkDataSource({"config": "/nonexistent.json"})
        try:
            sink.streamWriter(None, False)
        except Exception:
            pass  # no such configuration: the writer's module was imported to say so
        unwanted = ("dbus_spark.sinks.writer", "dbus_spark.sinks.kafka", "confluent_kafka",
                    "dbus_spark.stage.functions")
        print("dbus_spark.sinks.batch_commit" in sys.modules)
        print(sorted(m for m in unwanted if m in sys.modules))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["True", "[]"]
