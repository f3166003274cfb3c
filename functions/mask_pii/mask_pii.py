"""Privacy: user changes without readable e-mail addresses or phone numbers.

E-mail local parts are replaced by a keyed hash (the same address always gives
the same token, so consumers can still join on it; the domain stays for
analytics); phone numbers keep their last two digits.
"""

import hashlib
import hmac
import os

import dbus_fn as fn

# The key comes from the environment in production; this default only serves
# local runs and tests, where no real address flows.
HASH_KEY = os.environ.get("PII_HASH_KEY", "local-development-key").encode()
PII_COLUMNS = ("email", "phone")


def email_token(address: str) -> str:
    local, _, domain = address.partition("@")
    digest = hmac.new(HASH_KEY, local.lower().encode(), hashlib.sha256).hexdigest()[:16]
    return f"{digest}@{domain.lower()}" if domain else digest


def masked_phone(number: str) -> str:
    digits = [c for c in number if c.isdigit()]
    return "*" * max(len(digits) - 2, 0) + "".join(digits[-2:])


@fn.projection(tables=["shop.users", "shop.user_contacts"])
def mask_contact_details(event: fn.RowChange, context: fn.FunctionContext) -> dict:
    row = dict(event.row)
    if row.get("email"):
        row["email"] = email_token(row["email"])
    if row.get("phone"):
        row["phone"] = masked_phone(row["phone"])
    masked = sum(1 for column in PII_COLUMNS if event.row.get(column))
    if masked:
        context.metrics.increment("columns_masked", masked)
    return row
