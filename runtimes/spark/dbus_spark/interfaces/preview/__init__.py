"""Previews on live traffic: what a runtime answers a preview with (``service``), over
its window of recent changes (``dbus_spark.state.preview_window``), and `dbus fn
preview` (``commands``); the comparison itself is the SDK's (``dbus_fn.preview``)."""
