"""Bundles' zip: the same files always give the same bytes."""

from __future__ import annotations

import io
import zipfile

from dbus_fn.bundle import unpack, zip_files


def test_the_same_files_in_any_order_zip_to_the_same_bytes() -> None:
    files = {"pkg/rules.py": b"x = 1\n", "dbus.toml": b'name = "a"\n', "a.py": b""}
    packed = zip_files(files, compresslevel=9)
    assert zip_files(dict(reversed(files.items())), compresslevel=9) == packed
    assert unpack(packed) == files
    entries = zipfile.ZipFile(io.BytesIO(packed)).infolist()
    assert [e.filename for e in entries] == ["a.py", "dbus.toml", "pkg/rules.py"]
    assert {(e.date_time, e.external_attr >> 16, e.compress_type) for e in entries} == {
        ((1980, 1, 1, 0, 0, 0), 0o644, zipfile.ZIP_DEFLATED)
    }
