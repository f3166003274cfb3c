from dbus_fn.testing import insert, update


def test_each_tenant_has_its_topics(dbus_run):
    assert dbus_run(insert("saas.invoices", id=1, tenant_id=42)).destinations == [
        "kafka://tenant.42.invoices"
    ]
    assert dbus_run(update("saas.projects", {"id": 2, "tenant_id": 7}, name="x")).destinations == [
        "kafka://tenant.7.projects"
    ]


def test_shared_rows_take_the_default_route(dbus_run):
    assert dbus_run(insert("saas.plans", id=1, tenant_id=None)).destinations == [
        "kafka://saas.shared"
    ]


def test_tenants_are_counted(dbus_pipeline):
    for tenant in (1, 1, 2):
        dbus_pipeline.process(insert("saas.invoices", id=tenant, tenant_id=tenant))
    (stats,) = dbus_pipeline.stats().functions.values()
    assert stats.counters == {"tenant.1": 2, "tenant.2": 1}
