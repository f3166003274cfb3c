"""MySQL GTID sets as positions, on a real MySQL 9 (``dbus services up mysql``): a
boundary carries the server's executed set, a read resumes by the set alone, a set
the server purged or never had is refused in one line, tagged GTIDs are read and
resumed past, and ``earliest`` and a bare file position learn their set. Each read
runs with the native decoder and with mysql-replication's."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from capture_support import commits, execute, read_all, rows

from dbus_fn import BinlogPosition
from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for
from dbus_fn.capture._gtid_sets import GtidSet
from dbus_fn.capture._positions import parse_position
from dbus_fn.errors import PositionError

pytestmark = pytest.mark.integration


def executed(connection: Any) -> GtidSet:
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@GLOBAL.gtid_executed")
        return GtidSet.parse(cursor.fetchone()[0])


def test_each_commit_carries_the_executed_set_and_a_resume_by_it_alone_yields_what_follows(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    # Other tests write to the same server meanwhile: each commit's set holds what
    # the server executed before its statement and its own GTID, and nothing the
    # server executed after it returned.
    connection = mysql_database.connect()
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    start = mysql_reader.master_position()
    around = []
    for statement in ("INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')",
                      "UPDATE t SET v = 'c' WHERE id = 1", "DELETE FROM t WHERE id = 2"):
        before = executed(connection)
        execute(connection, statement)
        around.append((before, executed(connection)))
    end = mysql_reader.master_position()
    everything = read_all(mysql_reader, start, end)
    ours = [commit for commit in commits(everything) if commit.rows]
    assert len(ours) == len(around)
    for change, commit, (before, after) in zip(rows(everything), ours, around, strict=True):
        carried = GtidSet.parse(commit.position.gtid)
        assert change.position.gtid == commit.transaction_id  # its own transaction's GTID
        assert change.position.gtid in carried and change.position.gtid not in before
        assert before.issubset(carried) and carried.issubset(after)
    for commit in commits(everything):  # a commit of any transaction is a place to resume
        index = everything.index(commit)
        by_set = BinlogPosition("", 0, commit.position.gtid)
        resumed = read_all(mysql_reader, by_set, end)
        assert [(type(i).__name__, getattr(i, "row", None)) for i in resumed] == [
            (type(i).__name__, getattr(i, "row", None)) for i in everything[index + 1 :]
        ]
        assert [c.position.gtid for c in commits(resumed)] == [
            c.position.gtid for c in commits(everything[index + 1 :])
        ]


def test_a_set_from_the_command_line_and_a_bare_file_position_start_where_they_say(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    connection = mysql_database.connect()
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)")
    middle = mysql_reader.master_position()
    execute(connection, "INSERT INTO t VALUES (2)", "INSERT INTO t VALUES (3)")
    end = mysql_reader.master_position()
    # `--from` a set as the server prints it: upper case and with newlines.
    typed = parse_position(str(middle.gtid).upper().replace(",", ",\n"))
    assert [c.row["id"] for c in rows(read_all(mysql_reader, typed, end))] == [2, 3]
    # A file position without GTIDs: its set is found, and carried on from there.
    bare = read_all(mysql_reader, BinlogPosition(middle.file, middle.pos), end)
    assert [c.row["id"] for c in rows(bare)] == [2, 3]
    assert commits(bare)[-1].position.gtid == end.gtid
    assert mysql_reader.resolve_start(BinlogPosition(middle.file, middle.pos)).gtid == middle.gtid


def test_the_binlog_end_is_one_consistent_pair_and_an_account_without_backup_admin_gets_it(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    connection = mysql_database.connect()
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)")
    end = mysql_reader.master_position()
    # The set the binlog itself gives at that offset (its file's PREVIOUS_GTIDS and the
    # GTIDs before the offset), while other tests may be committing.
    assert mysql_reader._gtid_at(end.file, end.pos) == end.gtid
    user = f"nb{uuid.uuid4().hex[:10]}"
    execute(connection, f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw'",
            f"GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* "
            f"TO '{user}'@'127.0.0.1'")  # fmt: skip
    try:
        endpoint = mysql_database.endpoint
        spec = SourceSpec(name="my", dsn=f"mysql://{user}:pw@{endpoint.host}:{endpoint.port}",
                          tables=(f"{mysql_database.name}.*",))  # fmt: skip
        reader = BinlogReader(spec, replica_id=replica_id_for(f"test/{uuid.uuid4()}"))
        try:
            plain = reader.master_position()
            assert reader._log_status_denied
            assert plain.file and GtidSet.parse(plain.gtid).issubset(executed(connection))
            execute(connection, "INSERT INTO t VALUES (2)")
            assert [c.row["id"] for c in rows(read_all(reader, plain))] == [2]
        finally:
            reader.close()
    finally:
        execute(connection, f"DROP USER '{user}'@'127.0.0.1'")


def test_earliest_learns_the_set_from_the_first_binlog_file(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    first = mysql_reader.binary_logs()[0][0]
    start = mysql_reader.resolve_start("earliest")
    with mysql_database.connect().cursor() as cursor:
        cursor.execute("SELECT @@GLOBAL.gtid_purged")
        purged = GtidSet.parse(cursor.fetchone()[0])
    assert (start.file, start.pos) == (first, 4)
    assert GtidSet.parse(start.gtid) == purged  # what no binlog file holds any more


def test_a_set_the_server_never_had_or_of_the_other_flavour_is_refused_in_one_line(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    end = mysql_reader.master_position()
    stranger = f"{uuid.uuid4()}:1-5"
    with pytest.raises(PositionError) as ahead:
        read_all(mysql_reader, BinlogPosition("", 0, f"{end.gtid},{stranger}"))
    message = str(ahead.value)
    assert "\n" not in message
    assert "are not in the source's binlog" in message and stranger in message
    assert "--from earliest" in message
    # A MariaDB GTID state on a MySQL source names the form it needs.
    with pytest.raises(PositionError, match=r"MySQL server; give a GTID set \(uuid:1-100\)"):
        read_all(mysql_reader, BinlogPosition("", 0, "0-1-5"))


def test_a_set_lacking_what_the_server_purged_is_refused_in_one_line(
    mysql_service: Any, mysql_database: Any
) -> None:
    from dbus_deploy.services import endpoints, up

    # The replica's own binlog, purged up to its newest file: every server purges so.
    up(["mysql-replica"])
    replica = endpoints().mysql_replica
    execute(mysql_database.connect(), "CREATE TABLE t (id INT PRIMARY KEY)")
    with replica.connect().cursor() as cursor:
        cursor.execute("FLUSH BINARY LOGS")
        cursor.execute("SHOW BINARY LOG STATUS")
        newest = cursor.fetchone()[0]
        cursor.execute("PURGE BINARY LOGS TO %s", (newest,))
        cursor.execute("SELECT @@GLOBAL.gtid_purged, @@GLOBAL.gtid_executed")
        purged, have = (GtidSet.parse(value) for value in cursor.fetchone())
    assert purged, "the replica applied the primary's transactions before the flush"
    first = str(purged).split(",")[0]  # uuid:1-400..., its untagged intervals first
    oldest = f"{first[:36]}:{first[37:].split(':')[0].split('-')[0]}"
    lacking = have.minus(GtidSet.parse(oldest))
    spec = SourceSpec(name="my", dsn=replica.dsn, tables=(f"{mysql_database.name}.*",))
    reader = BinlogReader(spec, replica_id=replica_id_for(f"test/{uuid.uuid4()}"), heartbeat=0.2)
    try:
        with pytest.raises(PositionError) as refused:
            read_all(reader, BinlogPosition("", 0, str(lacking)))
        assert reader.resolve_start(BinlogPosition("", 0, str(have))).gtid == str(have)
    finally:
        reader.close()
    message = str(refused.value)
    assert "\n" not in message
    assert f"the server purged transactions the set lacks ({oldest};" in message
    assert "--from earliest" in message and "--from snapshot" in message


def test_tagged_gtids_are_read_carried_and_resumed_past(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    connection = mysql_database.connect()
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY)")
    start = mysql_reader.master_position()
    tag = f"t{uuid.uuid4().hex[:12]}"
    execute(connection, f"SET gtid_next = 'AUTOMATIC:{tag}'", "INSERT INTO t VALUES (1)",
            "INSERT INTO t VALUES (2)", "SET gtid_next = 'AUTOMATIC'",
            "INSERT INTO t VALUES (3)")  # fmt: skip
    end = mysql_reader.master_position()
    everything = read_all(mysql_reader, start, end)
    ours = [c for c in commits(everything) if c.rows]  # other tests write meanwhile
    tagged = [str(c.transaction_id) for c in ours]
    assert tagged[0].endswith(f":{tag}:1") and tagged[1].endswith(f":{tag}:2")
    assert ":" + tag not in tagged[2] and len(tagged) == 3
    for commit in ours:
        carried = GtidSet.parse(commit.position.gtid)
        assert str(commit.transaction_id) in carried
        assert carried.issubset(executed(connection))
    assert f":{tag}:1-2" in str(end.gtid)
    # A resume by a set with a tag in it asks the server in MySQL 8.3's tagged form.
    after_first = ours[0].position.gtid
    resumed = read_all(mysql_reader, BinlogPosition("", 0, after_first), end)
    assert [c.row["id"] for c in rows(resumed)] == [2, 3]
