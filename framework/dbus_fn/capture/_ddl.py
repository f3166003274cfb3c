"""Which table a DDL statement changes, best effort and never raising.

Capture only needs the table a statement names to route the ``SchemaChange``
and to drop cached decoders; column names always come from the binlog itself
(``binlog_row_metadata=FULL``). A statement this cannot read still becomes a
``SchemaChange``, with ``table=None``; it never stops capture.
"""

from __future__ import annotations

import re

_COMMENT = re.compile(r"/\*.*?\*/|--[^\n]*\n|#[^\n]*\n", re.S)
_NAME = r"(`(?:[^`]|``)+`|[\w$]+)"
_QUALIFIED = rf"{_NAME}(?:\s*\.\s*{_NAME})?"
_PATTERNS = tuple(
    re.compile(p, re.I | re.S)
    for p in (
        rf"^ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?{_QUALIFIED}",
        rf"^RENAME\s+TABLES?\s+(?:IF\s+EXISTS\s+)?{_QUALIFIED}",
        rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{_QUALIFIED}",
        rf"^DROP\s+(?:TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?{_QUALIFIED}",
        rf"^TRUNCATE\s+(?:TABLE\s+)?{_QUALIFIED}",
        rf"^(?:CREATE|DROP)\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+"
        rf"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_NAME}\s+(?:ON\s+){_QUALIFIED}",
    )
)
_INDEX_PATTERN = _PATTERNS[-1]
_DATABASE = re.compile(
    rf"^(?:CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_NAME}", re.I
)


def _unquote(name: str) -> str:
    if name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name


def ddl_target(statement: str, default_database: str) -> tuple[str, str | None]:
    """``(database, table)`` a DDL statement changes; ``table`` is None if unknown."""
    try:
        text = _COMMENT.sub(" ", statement + "\n").strip()
        database = _DATABASE.match(text)
        if database:
            return _unquote(database.group(1)), None
        for pattern in _PATTERNS:
            match = pattern.match(text)
            if not match:
                continue
            groups = match.groups()[1:] if pattern is _INDEX_PATTERN else match.groups()
            first, second = groups[0], groups[1]
            if second is not None:
                return _unquote(first), _unquote(second)
            return default_database, _unquote(first)
    except (re.error, IndexError, TypeError):  # pragma: no cover - defensive
        pass
    return default_database, None


_RENAME_TABLE = re.compile(r"^RENAME\s+TABLES?\s+(?:IF\s+EXISTS\s+)?", re.I)
_RENAME_PAIR = re.compile(
    rf"{_QUALIFIED}\s+TO\s+{_QUALIFIED}\s*(?:,\s*|(?:WAIT\s+\d+|NOWAIT)?\s*;?$)", re.I
)
_ALTER_RENAME = re.compile(
    rf"^ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?{_QUALIFIED}.*?"
    rf"\bRENAME\s+(?:TO\s+|AS\s+)?(?!(?:COLUMN|INDEX|KEY)\b){_QUALIFIED}",
    re.I | re.S,
)


def renamed_tables(statement: str, default_database: str) -> list[tuple[str, str]]:
    """Every ``(database, table)`` a table rename names, in the statement's order.

    ``RENAME TABLE t TO _t_old, _t_new TO t`` gives ``t``, ``_t_old``, ``_t_new``,
    ``t``; ``ALTER TABLE t RENAME TO u`` gives ``t``, ``u``. Any other statement, or
    a rename this cannot read, gives ``[]``.
    """

    def qualified(database: str | None, table: str | None) -> tuple[str, str]:
        if table is None:
            return default_database, _unquote(str(database))
        return _unquote(str(database)), _unquote(table)

    text = _COMMENT.sub(" ", statement + "\n").strip()
    head = _RENAME_TABLE.match(text)
    if head:
        names: list[tuple[str, str]] = []
        at = head.end()
        while at < len(text):
            pair = _RENAME_PAIR.match(text, at)
            if pair is None:
                return []
            a, b, c, d = pair.groups()
            names += [qualified(a, b), qualified(c, d)]
            at = pair.end()
        return names
    alter = _ALTER_RENAME.match(text)
    if alter:
        a, b, c, d = alter.groups()
        return [qualified(a, b), qualified(c, d)]
    return []


def is_transaction_control(statement: str) -> str | None:
    """``"begin"``, ``"commit"`` or ``None`` for a Query event's statement."""
    word = statement.strip().rstrip(";").strip().upper()
    if word in ("BEGIN", "START TRANSACTION", "XA START"):
        return "begin"
    if word in ("COMMIT", "ROLLBACK") or word.startswith(("XA COMMIT", "XA ROLLBACK")):
        return "commit"
    return None


_ACCOUNT = re.compile(r"^(?:CREATE|DROP|ALTER|RENAME)\s+(?:OR\s+REPLACE\s+)?(?:USER|ROLE)\b", re.I)


def is_account_statement(statement: str) -> bool:
    """``CREATE USER``, ``DROP ROLE``...: account management, not a schema change."""
    return bool(_ACCOUNT.match(_COMMENT.sub(" ", statement + "\n").strip()))
