"""A deployment's requirements.txt: read and checked here, resolved to wheels from the
package index (PyPI) and imported apart; each problem one line naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.tags import sys_tags

from dbus_fn.cli import cli
from dbus_fn.dependencies import (
    Requirements,
    Resolved,
    read_requirements,
    resolve,
    site_archive,
    unpacked_site,
)
from dbus_fn.errors import BundleError, ConfigError

ORDERS = Path(__file__).resolve().parents[2] / "functions" / "orders"


def folder_with(tmp_path: Path, requirements: str) -> Path:
    folder = tmp_path / "orders"
    folder.mkdir()
    for name in ("dbus.toml", "orders.py"):
        (folder / name).write_text((ORDERS / name).read_text())
    (folder / "requirements.txt").write_text(requirements)
    return folder


def test_a_folder_without_requirements_has_none(tmp_path: Path) -> None:
    assert read_requirements(tmp_path) is None


def test_requirements_are_read_one_a_line_without_comments(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, "# phone numbers\nphonenumbers==8.13.0  # pinned\n\n"
                                   "python-slugify>=8,<9\n")  # fmt: skip
    found = read_requirements(folder)
    assert found is not None
    assert found.lines == ("phonenumbers==8.13.0", "python-slugify>=8,<9")
    again = read_requirements(folder)
    assert again is not None and again.key == found.key and len(found.key) == 16
    (folder / "requirements.txt").write_text("phonenumbers==8.12.0\n")
    changed = read_requirements(folder)
    assert changed is not None and changed.key != found.key


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-r other.txt\n", "the pip option '-r' is not taken"),
        ("--index-url https://example.org\n", "the pip option '--index-url' is not taken"),
        ("phonenumbers===\n", "is not a requirement"),
        ("slugify @ https://example.org/slugify.whl\n", "names a URL"),
        ("six==1.16.0\npyarrow>=1\n", "line 2: pyarrow is the runtime's own package (pyarrow"),
        ("dbus-fn\n", "dbus-fn is the runtime's own package"),
        ("PySpark==3.5.0\n", "PySpark is the runtime's own package"),
    ],
)
def test_a_requirement_that_cannot_be_a_deployment_s_is_one_line(
    tmp_path: Path, text: str, problem: str
) -> None:
    folder = folder_with(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        read_requirements(folder)
    assert problem in str(caught.value) and "\n" not in str(caught.value)
    result = CliRunner().invoke(cli, ["fn", "validate", str(folder)])
    assert result.exit_code == 2 and problem in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.integration
def test_requirements_resolve_to_wheels_installed_apart_and_imported(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, "python-slugify==8.0.4\n")  # and text-unidecode with it
    found = read_requirements(folder)
    assert found is not None
    resolved = resolve(found, tmp_path / "cache")
    names = [wheel.name.split("-")[0] for wheel in resolved.wheels]
    assert names == ["python_slugify", "text_unidecode"]
    assert set(resolved.modules) == {"slugify", "text_unidecode"}
    assert (resolved.site / "slugify" / "__init__.py").is_file()
    # Resolved once: the same key finds the packages in place.
    assert resolve(found, tmp_path / "cache").site == resolved.site
    result = CliRunner().invoke(cli, ["fn", "validate", str(folder)],
                                env={"DBUS_HOME": str(tmp_path / "home")})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "dependencies: python_slugify 8.0.4, text_unidecode 1.3" in result.output


@pytest.mark.integration
@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("dbus-no-such-package-4f1c==1.0\n",
         "No matching distribution found for dbus-no-such-package-4f1c==1.0"),
        ("six==0.0.1\n", "No matching distribution found for six==0.0.1"),
        # deprecation needs packaging, which the runtime shares with its functions.
        ("deprecation==2.1.0\n", "packaging is the runtime's own package"),
    ],
)  # fmt: skip
def test_a_set_that_does_not_resolve_is_one_line(tmp_path: Path, text: str, problem: str) -> None:
    folder = folder_with(tmp_path, text)
    result = CliRunner().invoke(cli, ["fn", "validate", str(folder)],
                                env={"DBUS_HOME": str(tmp_path / "home")})  # fmt: skip
    assert result.exit_code == 2, result.output
    assert problem in result.stderr and len(result.stderr.strip().splitlines()) == 1


def pinned(tmp_path: Path, name: str, version: str) -> Path:
    """A deployment whose projection says which ``six`` its code sees."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "dbus.toml").write_text(
        f'name = "{name}"\nversion = "1.0.0"\nmodule = "{name}.py"\ntables = ["shop.orders"]\n'
        f'default_route = "kafka://{name}"\n'
    )
    (folder / f"{name}.py").write_text(
        "import six\nimport dbus_fn as fn\n\n\n"
        '@fn.projection(tables="shop.orders")\n'
        "def stamp(event: fn.RowChange) -> dict:\n"
        "    import six.moves  # imported when called, as libraries do\n"
        '    return {**event.row, "six": six.__version__, "lazy": six.moves.__name__}\n'
    )
    (folder / "requirements.txt").write_text(f"six=={version}\n")
    return folder


@pytest.mark.integration
def test_two_deployments_in_one_process_each_run_with_their_own_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from dbus_fn.pipeline import Pipeline
    from dbus_fn.registry import with_packages
    from dbus_fn.testing import insert

    monkeypatch.setenv("DBUS_HOME", str(tmp_path / "home"))
    # The process's own module of that name (as a runtime's may be), loaded first.
    mine = tmp_path / "process"
    (mine / "six").mkdir(parents=True)
    (mine / "six" / "__init__.py").write_text('__version__ = "the process\'s own"\n')
    monkeypatch.syspath_prepend(str(mine))
    monkeypatch.delitem(sys.modules, "six", raising=False)
    import six as before  # type: ignore[import-not-found]

    monkeypatch.setitem(sys.modules, "six", before)  # gone again after the test

    old, new = (with_packages(pinned(tmp_path, n, v)) for n, v in (("old", "1.15.0"),
                                                                 ("new", "1.16.0")))  # fmt: skip
    pipelines = [Pipeline(old), Pipeline(new)]
    for _ in range(3):  # taking turns, as one worker runs every deployment of a table
        seen = [p.process(insert("shop.orders", id=1)).deliveries[0].payload for p in pipelines]
        assert [(row["six"], row["lazy"]) for row in seen] == [
            ("1.15.0", "six.moves"), ("1.16.0", "six.moves")]  # fmt: skip
    assert sys.modules["six"] is before  # the process's own, as it was
    assert before.__version__ == "the process's own" and "six.moves" not in sys.modules
    assert not any("function-deps" in entry for entry in sys.path)
    result = CliRunner().invoke(cli, ["fn", "validate", str(tmp_path / "old")])
    assert result.exit_code == 0 and "dependencies: six 1.15.0" in result.output, result.output


def test_a_requirements_file_of_comments_names_no_package(tmp_path: Path) -> None:
    assert read_requirements(folder_with(tmp_path, "# none yet\n\n")) is None


def _shipped(tmp_path: Path, wheels: list[str]) -> tuple[Requirements, Path]:
    """A set as the driver ships it: an archive of its site, with the wheels' names."""
    requirements = Requirements(tmp_path / "requirements.txt", ("some==1.0",))
    site = tmp_path / "driver" / "site"
    (site / "some").mkdir(parents=True)
    (site / "some" / "__init__.py").write_text("")
    resolved = Resolved(requirements, tuple(tmp_path / name for name in wheels), site, ("some",))
    return requirements, site_archive(resolved)


def test_an_executor_unpacks_a_set_whose_wheels_run_on_its_platform(tmp_path: Path) -> None:
    here = next(iter(sys_tags()))
    native = f"some-1.0-{here.interpreter}-{here.abi}-{here.platform}.whl"
    requirements, archive = _shipped(tmp_path, ["six-1.16.0-py2.py3-none-any.whl", native])
    unpacked = unpacked_site(requirements, archive, tmp_path / "executor")
    assert (unpacked.site / "some" / "__init__.py").is_file()


@pytest.mark.parametrize(
    "wheel",
    ["some-1.0-cp311-cp311-macosx_11_0_arm64.whl", "some-1.0-cp27-cp27mu-manylinux1_x86_64.whl"],
)
def test_an_executor_refuses_native_code_for_another_platform_in_one_line(
    tmp_path: Path, wheel: str
) -> None:
    requirements, archive = _shipped(tmp_path, [wheel])
    with pytest.raises(BundleError) as raised:
        unpacked_site(requirements, archive, tmp_path / "executor")
    message = str(raised.value)
    assert "\n" not in message and f"the wheel {wheel} was resolved on the driver" in message
    assert "run the executors on the driver's Python and platform" in message
    assert not (tmp_path / "executor" / requirements.key / "site").exists()  # nothing kept


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"phonenumbers==8.13.0\n\x97\xde\xad", "is not UTF-8 text (byte 0x97 at offset 21)"),
        ("phonenumbers==8.13.0\n".encode("utf-16"), "is not UTF-8 text but UTF-16"),
    ],
    ids=["random-bytes", "utf-16-with-bom"],
)
def test_a_requirements_file_not_in_utf8_names_it_and_says_to_save_it_as_utf8(
    tmp_path: Path, data: bytes, says: str
) -> None:
    folder = folder_with(tmp_path, "")
    (folder / "requirements.txt").write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        read_requirements(folder)
    message = str(caught.value)
    assert message.startswith(f"{folder / 'requirements.txt'} {says}")
    assert "; save it as UTF-8, one requirement a line" in message


def test_a_requirements_file_with_a_utf8_byte_order_mark_is_read(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, "")
    (folder / "requirements.txt").write_bytes("phonenumbers==8.13.0\n".encode("utf-8-sig"))
    requirements = read_requirements(folder)
    assert requirements is not None and requirements.lines == ("phonenumbers==8.13.0",)


def test_a_requirements_txt_that_is_a_folder_is_refused_not_passed_over(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, "")
    (folder / "requirements.txt").unlink()
    (folder / "requirements.txt").mkdir()
    with pytest.raises(ConfigError, match=r"requirements.txt is a folder; a deployment's pack"):
        read_requirements(folder)
    result = CliRunner().invoke(cli, ["fn", "validate", str(folder)])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
