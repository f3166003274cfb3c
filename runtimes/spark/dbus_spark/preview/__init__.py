"""Previews on live traffic: the runtime's window of recent changes (``window``), what
it answers a preview with (``service``), and `dbus fn preview` (``commands``); the
comparison itself is the SDK's (``dbus_fn.preview``)."""
