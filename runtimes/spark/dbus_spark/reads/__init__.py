"""The reads layer: what runs on the executors to read a source and hand each change
through the stage to the sinks.

Every read runs in one frame, ``task`` (its counts, its output, the rows Spark gets).
``range_read`` reads a planned binlog range, or hands it to the source's read carried
across micro-batches (``open_read``, ``open_read_control``, ``open_read_socket``);
``shared_read`` serves each deployment at its own pace; ``catchup`` is a detached
deployment's own read; ``history_chunks`` reads history chunks and replay parts,
whose window ``replay_window`` keeps, as it does a Kafka replay's;
``kafka_read`` reads a Kafka source's partition. Imports the layers below: ``sinks``,
``stage``, ``state``, ``config``.
"""
