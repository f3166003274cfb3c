"""The MariaDB that `dbus services up mariadb` runs is fit for binlog capture."""

from __future__ import annotations

import uuid

import pymysql
import pytest
from scratch import scratch_database
from support import wait_for

from dbus_deploy.services import MariaDBEndpoint

pytestmark = pytest.mark.integration


def _variables(connection, *names: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES "
            "WHERE VARIABLE_NAME IN (" + ",".join(["%s"] * len(names)) + ")",
            [name.upper() for name in names],
        )
        return {name.lower(): value for name, value in cursor.fetchall()}


def test_binlog_is_row_based_with_full_images_and_metadata(fresh_database) -> None:
    settings = _variables(
        fresh_database.connect(),
        "log_bin",
        "binlog_format",
        "binlog_row_image",
        "binlog_row_metadata",
        "server_id",
        "gtid_strict_mode",
        "bind_address",
    )
    assert settings == {
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
        "server_id": "1",
        "gtid_strict_mode": "ON",
        "bind_address": "127.0.0.1",
    }


def test_dbus_user_can_replicate_and_grant(fresh_database) -> None:
    connection = fresh_database.connect()
    with connection.cursor() as cursor:
        cursor.execute("SHOW GRANTS FOR CURRENT_USER()")
        (grant,) = cursor.fetchone()
        assert "ALL PRIVILEGES ON *.*" in grant
        assert "WITH GRANT OPTION" in grant
        # What a binlog reader runs first: both need replication privileges.
        cursor.execute("SHOW BINARY LOGS")
        assert cursor.fetchall()
        cursor.execute("SHOW MASTER STATUS")
        assert cursor.fetchone() is not None


def test_fresh_database_is_empty_and_writes_reach_the_binlog(fresh_database) -> None:
    connection = fresh_database.connect()
    with connection.cursor() as cursor:
        cursor.execute("SHOW TABLES")
        assert cursor.fetchall() == ()
        cursor.execute("SELECT @@gtid_binlog_pos")
        (before,) = cursor.fetchone()
        cursor.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        cursor.execute("INSERT INTO t VALUES (1, 'a')")
        cursor.execute("SELECT @@gtid_binlog_pos")
        (after,) = cursor.fetchone()
    assert after != before
    assert after.startswith("0-1-")


def test_fresh_database_is_made_for_one_test_and_dropped_after_it(
    mariadb_service: MariaDBEndpoint,
) -> None:
    with scratch_database(mariadb_service) as database:
        database.connect().close()
        assert _database_exists(mariadb_service, database.name)
    assert not _database_exists(mariadb_service, database.name)


def _database_exists(endpoint: MariaDBEndpoint, name: str) -> bool:
    connection = pymysql.connect(
        host=endpoint.host, port=endpoint.port, user=endpoint.user, password=endpoint.password
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW DATABASES LIKE %s", [name])
            return cursor.fetchone() is not None
    finally:
        connection.close()


def test_dbus_user_can_create_a_restricted_user_for_a_test(fresh_database) -> None:
    name = f"r_{uuid.uuid4().hex[:12]}"
    admin = fresh_database.connect()
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY 'pw'")
        try:
            cursor.execute(
                f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{name}'@'127.0.0.1'"
            )
            restricted = pymysql.connect(
                host=fresh_database.endpoint.host,
                port=fresh_database.endpoint.port,
                user=name,
                password="pw",
            )
            with restricted.cursor() as other:
                other.execute("SHOW BINARY LOGS")
                assert other.fetchall()
                with pytest.raises(pymysql.err.OperationalError):
                    other.execute(f"CREATE TABLE `{fresh_database.name}`.t (id INT)")
            restricted.close()
        finally:
            cursor.execute(f"DROP USER '{name}'@'127.0.0.1'")


def test_the_replica_follows_the_primary_by_gtid_until_promoted(isolated) -> None:
    from dbus_deploy.services import endpoints, up
    from dbus_deploy.services import restart as restart_services

    config = isolated()
    up(["mariadb", "mariadb-replica"], config=config)
    found = endpoints(config)
    replica = found.mariadb_replica
    assert found.failover_dsn == f"{found.mariadb.dsn},127.0.0.1:{replica.port}"
    with found.mariadb.connect() as primary, primary.cursor() as cursor:
        cursor.execute("CREATE DATABASE shop")
        cursor.execute("CREATE TABLE shop.t (id INT PRIMARY KEY)")
        cursor.execute("INSERT INTO shop.t VALUES (1)")
        cursor.execute("SELECT @@gtid_binlog_pos")
        (written,) = cursor.fetchone()

    def replica_has_it() -> bool:
        with replica.connect() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT @@gtid_binlog_pos")
            return cursor.fetchone()[0] == written

    wait_for(replica_has_it, 30, "the replica to log the primary's transaction")
    with replica.connect() as connection:
        settings = _variables(connection, "server_id", "log_slave_updates", "read_only")
        assert settings == {"server_id": "2", "log_slave_updates": "ON", "read_only": "ON"}
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM shop.t")
            assert cursor.fetchall() == ((1,),)
            cursor.execute("STOP SLAVE")
            cursor.execute("RESET SLAVE ALL")
    # Promoted stays promoted: a restart does not point it at the primary again.
    restart_services(["mariadb-replica"], config=config)
    with replica.connect() as connection, connection.cursor() as cursor:
        cursor.execute("SHOW SLAVE STATUS")
        assert cursor.fetchall() == ()
