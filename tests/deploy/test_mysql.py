"""The MySQL that `dbus services up mysql` runs is a real MySQL 9 fit for binlog
capture, and `mysql-replica` follows it by GTID."""

from __future__ import annotations

import pytest
from support import wait_for

from dbus_deploy.services import MariaDBEndpoint, load_config
from dbus_deploy.services._mysql import mysql_root

pytestmark = pytest.mark.integration


def test_mysql_9_logs_full_rows_with_metadata_and_gtids(mysql_database) -> None:
    with mysql_database.connect().cursor() as cursor:
        cursor.execute(
            "SELECT @@version, @@log_bin, @@binlog_format, @@binlog_row_image, "
            "@@binlog_row_metadata, @@gtid_mode, @@enforce_gtid_consistency, @@bind_address"
        )
        version, *settings = cursor.fetchone()
        cursor.execute("SHOW GRANTS FOR CURRENT_USER()")
        (grant,) = cursor.fetchone()
        cursor.execute(
            "SELECT plugin FROM mysql.user WHERE user = SUBSTRING_INDEX(CURRENT_USER(), '@', 1)"
            " AND host = SUBSTRING_INDEX(CURRENT_USER(), '@', -1)"
        )
        (plugin,) = cursor.fetchone()
    assert version.startswith("9.")
    assert settings == [1, "ROW", "FULL", "FULL", "ON", "ON", "127.0.0.1"]
    # MySQL lists ALL PRIVILEGES one by one: a reader needs these.
    assert all(needed in grant for needed in ("REPLICATION SLAVE", "REPLICATION CLIENT",
                                              "RELOAD", "WITH GRANT OPTION"))  # fmt: skip
    assert plugin == "caching_sha2_password", "MySQL's default login, as users have it"


def test_the_server_runs_from_one_root_per_machine_outside_the_home() -> None:
    config = load_config()
    root = mysql_root(config)
    assert (root / "usr/sbin/mysqld").is_file()
    assert config.home not in root.parents, "every checkout's home shares the one install"


def test_the_replica_follows_the_primary_by_gtid_and_is_read_only(
    mysql_service: MariaDBEndpoint, mysql_database
) -> None:
    from dbus_deploy.services import endpoints, up

    up(["mysql-replica"])
    replica = endpoints().mysql_replica
    with mysql_database.connect().cursor() as cursor:
        cursor.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cursor.execute("INSERT INTO t VALUES (1), (2)")
        cursor.execute("SELECT @@gtid_executed")
        (executed,) = cursor.fetchone()
    connection = replica.connect()
    try:

        def caught_up() -> bool:
            with connection.cursor() as cursor:
                cursor.execute("SELECT GTID_SUBSET(%s, @@gtid_executed)", (executed,))
                return bool(cursor.fetchone()[0])

        wait_for(caught_up, 60, "the replica to apply the primary's transactions")
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM `{mysql_database.name}`.t ORDER BY id")
            assert [row[0] for row in cursor.fetchall()] == [1, 2]
            cursor.execute("SELECT @@read_only, @@log_replica_updates, @@server_id")
            assert cursor.fetchone() == (1, 1, 12)
    finally:
        connection.close()
