"""The planning layer: the driver's plan of each micro-batch (``source``, Spark's
``dbus_binlog`` reader) and the requests a running runtime takes (``requests``).
"""
