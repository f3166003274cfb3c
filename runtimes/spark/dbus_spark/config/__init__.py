"""The runtime's configuration layer: what a runtime is told, and nothing it keeps.

``runtime`` reads the configuration file; ``kafka_source`` parses a Kafka source's URL
and makes its consumers; ``routes`` says where a deployment's sinks write; ``secrets``
keeps source DSNs in memory; ``logs`` and ``jvm`` say how the runtime and Spark's JVMs
log and start; ``json_form`` is the JSON form of the configuration and of every value
the layers above write down. The lowest layer: it imports no other layer of the runtime
(docs/runtime.md, "Layers").
"""
