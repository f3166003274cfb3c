"""Pure parts of capture: DSNs, specs, positions, GTIDs, DDL targets, server ids."""

from __future__ import annotations

import pickle

import pytest

from dbus_fn import BinlogPosition
from dbus_fn.capture import (
    BinlogReader,
    SourceSpec,
    coordinates,
    parse_dsn,
    parse_gtid,
    parse_gtid_state,
    parse_position,
    parse_servers,
    position_from_json,
    position_to_json,
    redact_dsn,
    replica_id_for,
)
from dbus_fn.capture._ddl import ddl_target, is_account_statement, is_transaction_control
from dbus_fn.capture._positions import format_gtid_state
from dbus_fn.capture._replica_id import DBUS_RANGE, check_replica_id
from dbus_fn.capture._server import check_settings
from dbus_fn.errors import ConfigError, DsnError, SourceError


def test_dsn_parses_user_password_host_port_and_percent_escapes() -> None:
    settings = parse_dsn("mariadb://app%40x:p%3Aw%2Fd@db.local:3307")
    assert (settings.user, settings.password, settings.host, settings.port) == (
        "app@x", "p:w/d", "db.local", 3307,
    )  # fmt: skip
    assert parse_dsn("mysql://u@h").port == 3306 and parse_dsn("mysql://u@h").password == ""
    assert settings.redacted == "mariadb://app@x:***@db.local:3307"
    assert "p:w/d" not in repr(settings) and "p:w/d" not in str(settings)


@pytest.mark.parametrize("dsn", ["", "   ", "mysql://", "mysql://u:p@h:0", "mysql://u:p@h:x"])
def test_bad_dsns_are_dsn_errors_without_the_password(dsn: str) -> None:
    with pytest.raises(DsnError) as caught:
        parse_dsn(dsn)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    assert redact_dsn(dsn) == dsn.replace(":p@", ":***@")


@pytest.mark.parametrize(
    "dsn",
    [
        "mysql://app:12/34@db:3306",  # was blamed on "a database path"
        "mysql://app:pa/ss@db:3306",  # on "the port"
        "mysql://app:p@ss/w0rd@db:3306",
        "mysql://app:p?ss@db:3306",
        "mysql://app:p#ss@db1:3306,db2:3306",
        "mysql://app:a,1/b@db1:3306,db2:3306",
    ],
)
def test_an_unencoded_character_in_a_password_is_blamed_on_its_encoding(dsn: str) -> None:
    with pytest.raises(DsnError) as caught:
        parse_servers(dsn)
    message = str(caught.value)
    assert "password" in message and "percent-encode" in message and "%40 for @" in message
    assert "database path" not in message and "port" not in message
    assert redact_dsn(dsn).startswith("mysql://app:***@db")


def test_a_database_path_is_still_named_as_such() -> None:
    with pytest.raises(DsnError, match="a database path is not supported"):
        parse_servers("mysql://app:pw@db:3306/shop")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("kafka://user:hunter2@host:9092/topics", "kafka://user:***@host:9092/topics"),
        ("kafka://u:hun?ter2@b1:9092,b2:9092/t", "kafka://u:***@b1:9092,b2:9092/t"),
        ("kafka://u:hun@ter=2@h:9092/t?x=1", "kafka://u:***@h:9092/t"),
        ("kafka://h:9092/t?sasl.username=me@corp.com&sasl.password=hunter2", "kafka://h:9092/t"),
        ("http://elastic:hunter2@es:port", "http://elastic:***@es:port"),
        ("user:hunter2@k1:9092", "user:***@k1:9092"),
        ("spark://master:7077", "spark://master:7077"),
        ("kafka://u@h:9092/t", "kafka://u@h:9092/t"),
    ],
)
def test_redact_dsn_masks_any_url_s_password_and_leaves_its_query_out(url: str, shown: str) -> None:
    assert redact_dsn(url) == shown


def test_a_dsn_may_list_several_servers_sharing_its_login() -> None:
    dsn = "mariadb://app:s3cret@db1:3307, db2 ,[::1]:3309"
    servers = parse_servers(dsn)
    assert [(s.host, s.port) for s in servers] == [("db1", 3307), ("db2", 3306), ("::1", 3309)]
    assert {(s.user, s.password, s.scheme) for s in servers} == {("app", "s3cret", "mariadb")}
    assert parse_dsn(dsn) == servers[0]
    assert redact_dsn(dsn) == "mariadb://app:***@db1:3307,db2:3306,[::1]:3309"
    spec = SourceSpec("shop", dsn)
    assert spec.servers == servers and "s3cret" not in repr(spec)
    assert spec.redacted_dsn == redact_dsn(dsn)


@pytest.mark.parametrize(
    ("dsn", "problem"),
    [
        ("mysql://u:s3cret@db1:3306,,db2", "the server list has an empty entry"),
        ("mysql://u:s3cret@db1:3306,db1", "server db1:3306 is listed twice"),
        ("mysql://u:s3cret@db1,db2:x", "the port is not a number from 1 to 65535"),
        ("mysql://u:s3cret@db1,db2/shop", "a database path is not supported"),
    ],
)
def test_a_bad_server_list_is_one_line_naming_the_entry(dsn: str, problem: str) -> None:
    with pytest.raises(DsnError) as caught:
        SourceSpec("shop", dsn)
    message = str(caught.value)
    assert problem in message and "s3cret" not in message and "\n" not in message
    assert caught.value.exit_code == 2


def test_source_spec_hides_the_password_pickles_and_validates() -> None:
    spec = SourceSpec("shop", "mysql://dbus:s3cret@127.0.0.1:3306", ("shop.*",))
    assert "s3cret" not in repr(spec) and "s3cret" not in str(spec)
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert spec.matches("shop", "orders") and not spec.matches("shopx", "orders")
    assert SourceSpec("s", "mysql://u@h", "a.b").tables == ("a.b",)  # type: ignore[arg-type]
    for bad in ({"name": "bad name"}, {"tables": ("nodot",)}, {"tables": ()}):
        with pytest.raises(ConfigError):
            SourceSpec(**{"name": "ok", "dsn": "mysql://u@h", **bad})  # type: ignore[arg-type]
    with pytest.raises(DsnError):
        SourceSpec("ok", "mysql:/nope")


def test_reader_pickles_before_use_without_connections_or_secrets() -> None:
    reader = BinlogReader(SourceSpec("s", "mysql://u:pw@127.0.0.1:9"), replica_id=42, heartbeat=0.5)
    copy = pickle.loads(pickle.dumps(reader))
    assert (copy.spec, copy.replica_id, copy.heartbeat) == (reader.spec, 42, 0.5)
    assert copy._control is None and "pw" not in repr(copy)


def test_gtids_and_gtid_states_parse_both_flavours() -> None:
    assert str(parse_gtid("0-1-42")) == "0-1-42"
    mysql = parse_gtid("3E11FA47-71CA-11E1-9E33-C80AA9429562:23")
    assert str(mysql) == "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
    state = parse_gtid_state("0-1-14,1-2-3\n")
    assert [str(g) for g in state.values()] == ["0-1-14", "1-2-3"]
    for bad in ("0-1", "x-1-2", "uuid:1"):
        with pytest.raises(ConfigError):
            parse_gtid(bad)


def test_positions_parse_and_round_trip_through_json() -> None:
    assert parse_position("binlog.000003:1234") == BinlogPosition("binlog.000003", 1234)
    assert parse_position("binlog.000003:4@0-1-9") == BinlogPosition("binlog.000003", 4, "0-1-9")
    assert parse_position("0-1-9,1-1-2") == BinlogPosition("", 0, "0-1-9,1-1-2")
    for bad in ("binlog.000003", "binlog:abc", ":12"):
        with pytest.raises(ConfigError):
            parse_position(bad)
    position = BinlogPosition("binlog.000003", 99, "0-1-9")
    assert position_from_json(position_to_json(position)) == position
    with pytest.raises(ConfigError):
        position_from_json({"file": 3, "pos": "x"})


@pytest.mark.parametrize(
    ("statement", "target"),
    [
        ("ALTER TABLE t ADD c INT", ("db", "t")),
        ("alter online ignore table `s`.`we``ird` add c int", ("s", "we`ird")),
        ("/* gh-ost */ RENAME TABLE `d`.`t` TO `d`.`_t_del`, `d`.`_t_gho` TO `d`.`t`", ("d", "t")),
        ("CREATE TABLE IF NOT EXISTS x.y (id int)", ("x", "y")),
        ("CREATE OR REPLACE TEMPORARY TABLE y (id int)", ("db", "y")),
        ("DROP TABLE IF EXISTS `a` /* generated by server */", ("db", "a")),
        ("TRUNCATE t2", ("db", "t2")),
        ("CREATE UNIQUE INDEX i ON s.t (c)", ("s", "t")),
        ("DROP INDEX i ON t", ("db", "t")),
        ("CREATE DATABASE shop", ("shop", None)),
        ("CREATE VIEW v AS SELECT 1", ("db", None)),
        ("\x00garbage (((", ("db", None)),
    ],
)
def test_ddl_target_reads_common_ddl_and_never_raises(
    statement: str, target: tuple[str, str | None]
) -> None:
    assert ddl_target(statement, "db") == target


def test_account_statements_are_not_schema_changes() -> None:
    assert is_account_statement("CREATE USER 'u'@'h' IDENTIFIED BY PASSWORD '*AB'")
    assert is_account_statement("/* x */ drop role if exists r")
    assert not is_account_statement("CREATE TABLE users (id INT)")


def test_transaction_control_statements() -> None:
    assert is_transaction_control("BEGIN") == "begin"
    assert is_transaction_control("COMMIT") == is_transaction_control("XA COMMIT 'x'") == "commit"
    assert is_transaction_control("ALTER TABLE t ADD c INT") is None


def test_server_ids_are_stable_in_the_dbus_range_and_clashes_are_refused() -> None:
    first = replica_id_for("shop/runtime-1")
    assert first == replica_id_for("shop/runtime-1") != replica_id_for("shop/runtime-2")
    assert DBUS_RANGE[0] <= first <= DBUS_RANGE[1]
    assert replica_id_for("x", salt=1) != replica_id_for("x")
    with pytest.raises(SourceError, match="own server_id"):
        check_replica_id(1, source="s", source_server_id=1, replicas=[], me="dbus:s")
    with pytest.raises(SourceError, match="already used"):
        check_replica_id(
            7, source="s", source_server_id=1, replicas=[{"Server_id": 7, "Host": "r"}], me="dbus:s"
        )
    check_replica_id(7, source="s", source_server_id=1,
                    replicas=[{"Server_id": 7, "Host": "dbus:s"}], me="dbus:s")  # fmt: skip


def test_a_server_without_full_row_metadata_is_refused_clearly() -> None:
    variables = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
                 "binlog_row_metadata": "MINIMAL"}  # fmt: skip
    with pytest.raises(SourceError, match="binlog_row_metadata=MINIMAL") as caught:
        check_settings("s", variables)
    assert "binlog_row_metadata=FULL" in str(caught.value)
    del variables["binlog_row_metadata"]
    with pytest.raises(SourceError, match="missing"):
        check_settings("s", variables)
    with pytest.raises(SourceError, match="binlog_format=MIXED"):
        check_settings(
            "s",
            {**variables, "binlog_format": "MIXED", "binlog_row_metadata": "FULL"}
        )


def test_a_server_writing_compressed_events_is_refused_clearly() -> None:
    variables = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
                 "binlog_row_metadata": "FULL", "log_bin_compress": "OFF"}  # fmt: skip
    check_settings("s", variables)
    with pytest.raises(SourceError, match="log_bin_compress=ON") as caught:
        check_settings("s", {**variables, "log_bin_compress": "ON"})
    assert "set binlog_format=ROW" in str(caught.value)
    assert str(caught.value).count("log_bin_compress=OFF") == 1
    del variables["log_bin_compress"]  # MySQL has no such setting
    check_settings("s", variables)


@pytest.mark.parametrize(
    ("text", "written"),
    [("0-1-14", "0-1-14"), ("0-01-007", "0-1-7"), ("2-1-5,0-1-14", "0-1-14,2-1-5"), ("", None)],
    ids=["one-domain", "one-domain-unpadded", "domains-in-order", "empty"],
)
def test_a_gtid_state_is_written_domain_by_domain_in_order(text: str, written: str | None) -> None:
    assert format_gtid_state(parse_gtid_state(text)) == written


def test_a_server_has_committed_gtids_only_from_their_own_server_ids() -> None:
    from dbus_fn.capture._failover import binlog_state, missing

    state = binlog_state("0-1-308,0-2-320,\n1-5-7")
    assert state == {(0, 1): 308, (0, 2): 320, (1, 5): 7}
    assert missing(parse_gtid_state("0-1-308,1-5-7"), state) == []
    assert missing(parse_gtid_state("0-2-300"), state) == []
    # A promoted replica that never received 0-1-309 logs 0-2-309 and later ones:
    # a higher sequence number in the domain is not the transaction.
    assert [str(g) for g in missing(parse_gtid_state("0-1-309,1-5-8"), state)] == [
        "0-1-309",
        "1-5-8",
    ]
    assert [str(g) for g in missing(parse_gtid_state("2-1-1"), state)] == ["2-1-1"]


def test_what_a_server_lacks_is_said_in_its_own_flavour_and_a_mixed_pair_lacks_all() -> None:
    from dbus_fn.capture._failover import binlog_state, lacks, parse_committed
    from dbus_fn.capture._gtid_sets import GtidSet

    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    executed = GtidSet.parse(f"{uuid}:1-100")
    mariadb = binlog_state("0-1-308")
    assert parse_committed(None) is None and parse_committed("") is None
    assert lacks(None, executed) == "" and lacks(None, mariadb) == ""
    assert lacks(parse_committed(f"{uuid}:1-100"), executed) == ""
    assert lacks(parse_committed(f"{uuid}:1-102"), executed) == f"{uuid}:101-102"
    assert lacks(parse_committed("0-1-308"), mariadb) == ""
    assert lacks(parse_committed("0-1-309"), mariadb) == "0-1-309"
    # A MySQL set asked of a MariaDB server, or a MariaDB state of a MySQL one.
    assert lacks(parse_committed(f"{uuid}:1-2"), mariadb) == f"{uuid}:1-2"
    assert lacks(parse_committed("0-1-308"), executed) == "0-1-308"


def test_server_neutral_positions_order_transactions_by_gtid_state_then_changes() -> None:
    from dbus_fn.capture._positions import (
        TRANSACTION_END,
        StreamGtids,
        is_neutral,
        neutral_boundary,
        neutral_position,
    )

    state = StreamGtids("0-1-40,1-2-7", mysql=False)
    # The next transaction of either domain is one place further, on any server.
    assert state.total_with("1-3-8") == state.total_with("0-2-41") == 48
    assert StreamGtids(None, mysql=False).total_with("0-1-5") == 5
    end = neutral_boundary("0-1-40,1-2-7")
    assert (end.file, end.pos, end.gtid) == ("gtid.47", TRANSACTION_END, "0-1-40,1-2-7")
    inside = [neutral_position(48, n, "0-2-41") for n in (0, 3, TRANSACTION_END + 5)]
    after = neutral_boundary("0-2-41,1-2-7")
    order = [coordinates(p) for p in (end, *inside, after)]
    assert order == sorted(order) and len(set(order)) == len(order)
    assert all(map(is_neutral, (end, *inside, after)))
    assert not is_neutral(BinlogPosition("mariadb-bin.000001", 4))
    assert neutral_boundary(None) == BinlogPosition("gtid.0", TRANSACTION_END, None)
