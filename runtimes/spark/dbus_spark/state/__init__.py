"""The runtime's state layer: what a runtime keeps, and the values the layers above hand
each other.

``checkpoint`` owns the files beside the checkpoint; ``progress`` each deployment's
pace; ``history`` the history tasks and the gate that merges them with the stream;
``records`` the records the function stage hands the sinks; ``batch_reports``,
``live_counters`` and ``sink_activity`` the counts that reach the driver;
``preview_window`` the recent changes kept for previews. Imports only ``config``.
"""
