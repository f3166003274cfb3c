"""The planning layer: the driver's plan of each micro-batch (``source``, Spark's
``dbus_binlog`` reader; ``kafka_planner`` asks a Kafka source's cluster for offsets)
and the requests a running runtime takes: their one model (``request_models``), the
mailbox that carries them to the planner (``mailbox``) and what the planner does
with them (``requests``).
"""
