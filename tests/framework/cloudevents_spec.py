"""An independent check of the CloudEvents 1.0 rules, for the envelope tests.

Written from the spec text, not from the SDK, so the SDK's own validation is not
what checks our use of it.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

# CloudEvents 1.0: context attribute names are lowercase a-z/0-9, SHOULD be at most
# 20 characters; these names are taken by the spec and its JSON format.
_ATTRIBUTE_NAME = re.compile(r"[a-z0-9]{1,20}")
_RESERVED = {"data", "data_base64", "specversion", "id", "source", "type", "datacontenttype",
             "dataschema", "subject", "time"}
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_MEDIA_TYPE = re.compile(r"[a-z]+/[a-z0-9.+-]+(;.*)?")


def spec_problems(structured: dict[str, Any]) -> list[str]:
    """CloudEvents 1.0 rules checked on the structured JSON form, independently of the SDK."""
    problems = []
    for name in ("id", "source", "specversion", "type"):
        if not isinstance(structured.get(name), str) or not structured[name]:
            problems.append(f"required {name} missing or empty")
    if structured.get("specversion") != "1.0":
        problems.append("specversion is not 1.0")
    source = structured.get("source", "")
    if " " in source or urlsplit(source).geturl() != source:
        problems.append("source is not a URI-reference")
    if "time" in structured and not _RFC3339.fullmatch(structured["time"]):
        problems.append("time is not RFC 3339")
    if "subject" in structured and not structured["subject"]:
        problems.append("subject is empty")
    if "datacontenttype" in structured and not _MEDIA_TYPE.fullmatch(
        structured["datacontenttype"]
    ):
        problems.append("datacontenttype is not a media type")
    for name, value in structured.items():
        if name in _RESERVED:
            continue
        if not _ATTRIBUTE_NAME.fullmatch(name):
            problems.append(f"extension name {name!r} is not 1-20 lowercase letters/digits")
        if not isinstance(value, str | int | bool):
            problems.append(f"extension {name!r} has no CloudEvents type")
        if isinstance(value, int) and not -(2**31) <= value < 2**31:
            problems.append(f"extension {name!r} exceeds the 32-bit Integer type")
    return problems
