"""Platform team: each tenant's changes on its own topics.

Every table of the ``saas`` database carries ``tenant_id``; a tenant's consumers
read ``tenant.<id>.<table>`` and nothing else. Rows without a tenant (shared
reference data) go to the deployment's default route.
"""

import dbus_fn as fn


@fn.route(tables="saas.*")
def by_tenant(event: fn.RowChange, context: fn.FunctionContext) -> str | None:
    tenant = event.row.get("tenant_id")
    if tenant is None:
        return None
    context.metrics.increment(f"tenant.{tenant}")
    return f"kafka://tenant.{tenant}.{event.table}"
