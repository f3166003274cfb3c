"""The `dbus fn` history commands: ``commands`` (backfill, verify, replay, deadletters,
redrive), ``follow`` (ask the runtime, then show the progress), ``verify``,
``deadletters`` and ``target`` (the runtime a command talks to).
"""
