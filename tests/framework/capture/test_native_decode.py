"""The native row decoder against the Python one on random row images of every type
it decodes itself, and the switch that turns it off. No service: the images are
made here, byte by byte (the equality over a real binlog is in test_capture_types)."""

from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from dbus_fn.capture._column_readers import NATIVE, column_width
from dbus_fn.capture._decode import TableDecoder, compile_table
from dbus_fn.capture._native import SWITCH, native_decoding
from dbus_fn.capture._table_map import VECTOR

UTF8 = "utf8mb4_general_ci"


def _column(name: str, code: int, **details: Any) -> SimpleNamespace:
    defaults = dict(unsigned=False, collation_name=None, fsp=0, length_size=0, max_length=0,
                    precision=0, decimals=0, enum_values=None, set_values=None, size=0, bits=0,
                    bytes=0)  # fmt: skip
    return SimpleNamespace(name=name, type=code, **{**defaults, **details})


COLUMNS = [
    *(_column(f"{kind}{'u' if unsigned else ''}", code, unsigned=unsigned)
      for kind, code in (("ti", FIELD_TYPE.TINY), ("si", FIELD_TYPE.SHORT),
                         ("mi", FIELD_TYPE.INT24), ("i", FIELD_TYPE.LONG),
                         ("bi", FIELD_TYPE.LONGLONG))
      for unsigned in (False, True)),
    _column("dec", FIELD_TYPE.NEWDECIMAL, precision=65, decimals=30),
    _column("dec2", FIELD_TYPE.NEWDECIMAL, precision=10, decimals=2),
    _column("dec3", FIELD_TYPE.NEWDECIMAL, precision=9, decimals=9),
    _column("dec4", FIELD_TYPE.NEWDECIMAL, precision=18, decimals=0),
    _column("fl", FIELD_TYPE.FLOAT),
    _column("dbl", FIELD_TYPE.DOUBLE),
    _column("y", FIELD_TYPE.YEAR),
    _column("d", FIELD_TYPE.DATE),
    *(_column(f"tm{fsp}", FIELD_TYPE.TIME2, fsp=fsp) for fsp in range(7)),
    *(_column(f"dt{fsp}", FIELD_TYPE.DATETIME2, fsp=fsp) for fsp in (0, 2, 3, 6)),
    *(_column(f"ts{fsp}", FIELD_TYPE.TIMESTAMP2, fsp=fsp) for fsp in (0, 1, 4, 6)),
    _column("vcs", FIELD_TYPE.VARCHAR, collation_name=UTF8, max_length=80),
    _column("vc", FIELD_TYPE.VARCHAR, collation_name=UTF8, max_length=1200),
    _column("c", FIELD_TYPE.STRING, collation_name=UTF8, max_length=40),
    _column("bn", FIELD_TYPE.STRING, max_length=4),
    _column("vb", FIELD_TYPE.VARCHAR, max_length=300),
    _column("bl", FIELD_TYPE.BLOB, length_size=2),
    _column("tx", FIELD_TYPE.BLOB, collation_name=UTF8, length_size=3),
    _column("l1", FIELD_TYPE.VARCHAR, collation_name="latin1_swedish_ci", max_length=10),
    _column("e", FIELD_TYPE.ENUM, enum_values=["", "a", "b", "it's"], size=1),
    _column("s", FIELD_TYPE.SET, set_values=["x", "y", "z"], size=1),
    _column("b12", FIELD_TYPE.BIT, bits=12, bytes=2),
    _column("b64", FIELD_TYPE.BIT, bits=64, bytes=8),
]  # fmt: skip


def _value(rng: random.Random, column: SimpleNamespace) -> bytes:
    width = column_width(column)
    if width is not None:
        return rng.randbytes(width)
    if column.type == FIELD_TYPE.BLOB:
        prefix = column.length_size
    else:
        prefix = 2 if column.max_length > 255 else 1
    if column.collation_name:
        text = "".join(rng.choice("aé😀 \\'\"\0z") for _ in range(rng.randrange(12)))
        payload = text.encode("cp1252" if "latin1" in column.collation_name else "utf-8",
                              errors="replace")  # fmt: skip
    else:
        payload = rng.randbytes(rng.randrange(min(column.max_length or 64, 64) + 1))
    return len(payload).to_bytes(prefix, "little") + payload


def _image(rng: random.Random, columns: list[SimpleNamespace]) -> bytes:
    nulls = [rng.random() < 0.1 for _ in columns]
    bitmap = sum(1 << i for i, null in enumerate(nulls) if null)
    body = b"".join(_value(rng, c) for c, null in zip(columns, nulls, strict=True) if not null)
    return bitmap.to_bytes((len(columns) + 7) // 8, "little") + body


def _outcome(decoder: TableDecoder, data: bytes, present: bytes, after: bytes | None) -> Any:
    try:
        rows = list(decoder.images(data, present, after))
    except Exception as exc:  # both decoders must fail alike on what they cannot read
        return ("raised", type(exc).__name__, str(exc))
    return [[sorted((k, type(v).__name__, repr(v)) for k, v in (image or {}).items())
             for image in pair] for pair in rows]  # fmt: skip


@pytest.mark.parametrize("seed", range(8))
def test_native_and_python_decode_random_row_images_alike(native: None, seed: int) -> None:
    rng = random.Random(seed)
    decoder = compile_table("db", "t", COLUMNS, [0])
    assert decoder.native is not None
    python = replace(decoder, native=None)
    everything = b"\xff" * ((len(COLUMNS) + 7) // 8)
    for _ in range(40):
        # A random subset of the columns, a rows event of 1 to 4 rows, and updates.
        present = bytes(rng.choice((0xFF, rng.randrange(256))) for _ in everything)
        chosen = [c for i, c in enumerate(COLUMNS) if present[i >> 3] >> (i & 7) & 1]
        update = rng.random() < 0.3
        data = b"".join(
            _image(rng, chosen) + (_image(rng, COLUMNS) if update else b"")
            for _ in range(rng.randrange(1, 5))
        )
        after = everything if update else None
        assert _outcome(decoder, data, present, after) == _outcome(python, data, present, after)


def test_float_ties_and_extremes_round_to_six_digits_alike(native: None) -> None:
    import struct

    column = _column("fl", FIELD_TYPE.FLOAT)
    decoder = compile_table("db", "t", [column], [])
    python = replace(decoder, native=None)
    values = [1234565.0, 2345675.0, -9999995.0, 0.5, 1.4e-45, 3.4028235e38, 16777215.0,
              0.1, 1e-10, float("inf"), -0.0, 125.0]  # fmt: skip
    for value in values:
        data = b"\0" + struct.pack("<f", value)
        assert _outcome(decoder, data, b"\x01", None) == _outcome(python, data, b"\x01", None)


def test_vectors_read_as_the_shortest_decimals_of_their_float32s_alike(native: None) -> None:
    import math
    import struct

    column = _column("v", VECTOR, length_size=4, dimensions=None)
    decoder = compile_table("db", "t", [column], [])
    assert getattr(decoder.columns[0].reader, NATIVE)[0] == "vector"
    python = replace(decoder, native=None)
    rng = random.Random(7)
    floats = [0.1, 2.5, -3.0, 1.2345678, 1e-45, -0.0, 3.4028235e38, 1.17549435e-38,
              float("inf"), 123456.0]  # fmt: skip
    raw = struct.pack(f"<{len(floats)}f", *floats) + rng.randbytes(4 * 4000)
    data = b"\0" + len(raw).to_bytes(4, "little") + raw
    assert _outcome(decoder, data, b"\x01", None) == _outcome(python, data, b"\x01", None)
    ((image, _),) = decoder.images(data, b"\x01", None)
    values = image["v"]
    assert values[:6] == [0.1, 2.5, -3.0, 1.2345678, 1e-45, -0.0]
    for at, value in enumerate(values):
        stored = raw[4 * at : 4 * at + 4]
        if math.isnan(value) or math.isinf(value):
            continue
        assert struct.pack("<f", value) == stored, "every float is the stored float32"
        digits = len(repr(abs(value)).split("e")[0].replace(".", "").strip("0"))
        if digits > 1:  # and no decimal with a digit less is that float32
            shorter = float(f"{value:.{digits - 1}g}")
            assert abs(shorter) > 3.4028235e38 or struct.pack("<f", shorter) != stored
    # A length that is not whole float32s: the Python reader's part, on both sides.
    odd = b"\0" + (5).to_bytes(4, "little") + b"\0\0\x80?\x01"
    assert _outcome(decoder, odd, b"\x01", None) == _outcome(python, odd, b"\x01", None)


def test_columns_the_native_side_leaves_to_python_are_read_by_their_python_reader(
    native: None,
) -> None:
    decoder = compile_table("db", "t", COLUMNS, [0])
    kinds = {info.name: getattr(info.reader, NATIVE, ("python",))[0] for info in decoder.columns}
    assert kinds["l1"] == "python"  # latin1 text
    assert {kinds[name] for name in ("i", "dec", "tm6", "vc", "bn", "e", "s")} == {
        "int", "decimal", "time2", "utf8", "padded", "enum", "set"
    }
    # A FLOAT(M,D) or a UUID shown as text: the declared type's own reader.
    declared = compile_table(
        "db", "t", [_column("f", FIELD_TYPE.FLOAT), _column("u", FIELD_TYPE.STRING, max_length=16)],
        [], [("f", "float(7,2)"), ("u", "uuid")],
    )  # fmt: skip
    assert declared.native is None, "no column the native decoder reads itself"


def test_the_switch_turns_the_native_decoder_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SWITCH, "0")
    assert not native_decoding()
    assert compile_table("db", "t", COLUMNS, [0]).native is None
