"""Helpers for testing function modules with plain pytest, no Spark, no services."""
