"""`dbus fn deadletters` lists a deployment's failures; `dbus fn redrive` sends the
failed rows through the fixed version."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch
from history_support import create_products, index_contents
from support import serving_api, wait_for

from dbus_spark.interfaces.history.deadletters import FailedAgainError, dead_letters, redrive
from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e

FRAGILE = '''
import dbus_fn as fn

@fn.projection(tables="{table}")
def priced(event: fn.RowChange) -> dict:
    if event.row["price"] > 1000 and {broken}:
        raise ValueError("price too high to index")
    return {{"id": event.row["id"], "price": event.row["price"]}}

@fn.route(tables="{table}")
def search(event: fn.RowChange) -> str:
    return "es://{index}"
'''


def test_dead_letters_are_listed_and_redriven_through_the_fixed_version(
    spark: Any, scratch: Scratch, fresh_database: Any, services: Any
) -> None:
    _services, database, topic, index, _tmp, function_folder = scratch
    connection = database.connect()
    create_products(connection, 50)
    table = f"{database.name}.products"
    folder = function_folder(
        "fragile", FRAGILE.format(table=table, index=index, broken="True"), [table],
        dead_letter=f"kafka://{topic}.dead",
    )  # fmt: skip
    config = scratch.runtime_config(folder)
    query = start(config, spark=spark)
    try:
        wait_for(lambda: len(index_contents(services.elasticsearch.url, index)) == 50, 120,
                 "the bootstrap", every=0.5)  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute("UPDATE products SET price = 5000 WHERE id IN (3, 4)")
            cursor.execute("DELETE FROM products WHERE id = 4")
            cursor.execute("UPDATE products SET price = 20 WHERE id = 5")
        out = io.StringIO()

        def listed() -> bool:
            out.seek(0)
            out.truncate()
            # The updates of 3 and 4, and the delete of 4 (its row's price is too high).
            return len(dead_letters("fragile", checkpoint=config.checkpoint_dir, out=out)) == 3

        wait_for(listed, 120, "three dead letters", every=1)
        text = out.getvalue()
        assert text.startswith(f"3 dead letter(s) of fragile in kafka://{topic}.dead")
        assert "1.0.0" in text and "[projection]" in text and "price too high to index" in text
        assert "key=[3]" in text and "key=[4]" in text
        # The CLI prints the same.
        dbus = Path(sys.executable).parent / "dbus"
        result = subprocess.run([str(dbus), "fn", "deadletters", "fragile", "--checkpoint",
                                 config.checkpoint_dir], capture_output=True, text=True,
                                timeout=60)  # fmt: skip
        assert result.returncode == 0 and result.stdout == text, result.stderr
        # Redriven through the same broken version, row 3 fails again: not "done".
        with serving_api(config.checkpoint_dir), pytest.raises(FailedAgainError) as caught:
            redrive("fragile", checkpoint=config.checkpoint_dir, out=io.StringIO())
        assert "failed again and are dead letters again" in str(caught.value)
        assert caught.value.exit_code == 1 and caught.value.count >= 1
    finally:
        stop(query, spark)

    # The fix: a new version whose projection no longer fails; the runtime restarts.
    (folder / "fragile.py").write_text(FRAGILE.format(table=table, index=index, broken="False"))
    (folder / "dbus.toml").write_text((folder / "dbus.toml").read_text().replace("1.0.0", "1.0.1"))
    query = start(config, spark=spark)
    try:
        redriven = io.StringIO()
        with serving_api(config.checkpoint_dir):
            redrive("fragile", checkpoint=config.checkpoint_dir, out=redriven)
        assert "redrive of fragile: " in redriven.getvalue()  # 3, and those that failed again
        want = {i: {"id": i, "price": i * 3} for i in range(1, 51) if i != 4}
        want[3] = {"id": 3, "price": 5000}
        want[5] = {"id": 5, "price": 20}
        wait_for(lambda: index_contents(services.elasticsearch.url, index) == want, 120,
                 "the index to hold the redriven row", every=0.5)  # fmt: skip
    finally:
        stop(query, spark)


def test_bad_since_and_unknown_deployment_are_one_line_with_exit_2(tmp_path: Path) -> None:
    dbus = Path(sys.executable).parent / "dbus"
    for args, message in [
        (["deadletters", "x", "--since", "yesterday"], "--since 'yesterday' is not a time"),
        (["redrive", "x", "--checkpoint", str(tmp_path / "cp")], "no runtime has run"),
    ]:
        result = subprocess.run([str(dbus), "fn", *args], capture_output=True, text=True,
                                timeout=60)  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().count("\n") == 0 and message in result.stderr
