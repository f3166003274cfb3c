"""The pytest plugin dbus registers (entry point ``pytest11``): fixtures for authors."""
