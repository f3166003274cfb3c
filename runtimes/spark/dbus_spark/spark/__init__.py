"""The Spark layer: the session a runtime runs in (``session``), the two data sources it
registers (``datasources``), the streaming query (``job``) and how its listeners
hear of each batch (``query_listener``), and what is checked or prepared before
Spark starts (``preflight``, ``planners``, ``bytecode``).
"""
