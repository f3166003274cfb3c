"""The cluster layer: one runtime as a member of a dbus cluster (``member``).
"""
