"""The helper tables of online schema change tools, recognised by their names.

``pt-online-schema-change`` builds the altered copy of ``t`` as ``_t_new`` (its
triggers write every change of ``t`` there too), swaps it in with ``RENAME TABLE
t TO _t_old, _t_new TO t`` and drops ``_t_old``. gh-ost builds ``_t_gho``, keeps
its state in ``_t_ghc`` and swaps with ``RENAME TABLE t TO _t_del, _t_gho TO t``
(or two renames, ``--cut-over=two-step``). Either tool adds leading underscores
when the name is taken, and gh-ost may stamp the old table
(``_t_20240101120000_del``).

Their rows are the tool's copy of ``t``, not changes of a table of their own, so
a source leaves them out unless told to keep them (``SourceSpec.keep_helper_tables``);
a table of the application that happens to be named so is left out too, which is
what that option is for.
"""

from __future__ import annotations

import re

_HELPER = re.compile(r"_+.+?(?:_\d{14})?_(?:new|old|gho|ghc|del)", re.S)


def is_helper_table(table: str) -> bool:
    """Whether ``table`` is named as pt-online-schema-change's or gh-ost's helper tables."""
    return _HELPER.fullmatch(table) is not None
