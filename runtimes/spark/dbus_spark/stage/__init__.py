"""The function stage layer: every change through every deployment that wants it
(``functions``), what a read task counted (``counts``), the Elasticsearch document of
a change (``documents``), what a Spark Python worker keeps between tasks (``worker``)
and what a task carries of the runtime (``shipment``). Imports ``config`` and ``state``.
"""
