"""The runtime image's recipe without an engine: tags from content, layer order, inputs.

What these pin down is what makes the caching work: a function change touches
only the last instruction, a dbus change never touches the deps image, and the
same inputs always give the same tag.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import free_port

from dbus_deploy.image import (
    BaseRecipe,
    CoreRecipe,
    DepsRecipe,
    FunctionFolder,
    RuntimeRecipe,
    debian_mirror,
)
from dbus_deploy.image._build import (
    _IMAGE_NAME,
    _BuildOutput,
    _failure,
    build_image,
    check_build_arguments,
)
from dbus_deploy.image._inputs import tree_digest
from dbus_deploy.image._prune import TaggedImage, stale_tags
from dbus_deploy.image._recipe import DEFAULT_BASE, pins_of, runtime_requirements
from dbus_deploy.image._worker import check_worker_arguments
from dbus_deploy.services import load_config
from dbus_fn.cli import cli
from dbus_fn.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


_CORE_FIELDS = {field.name for field in dataclasses.fields(CoreRecipe)}


def _runtime(**changes: object) -> RuntimeRecipe:
    core: dict[str, object] = {
        "base": "dbus-base:bookworm-x",
        "base_id": "sha256:base",
        "deps_tag": "dbus-deps:abc",
        "dbus_wheel": "dbus_fn-0.1.0-py3-none-any.whl",
        "dbus_content": "c0ffee",
    }
    core.update({k: v for k, v in changes.items() if k in _CORE_FIELDS})
    fields: dict[str, object] = {
        "core_id": "sha256:core",
        "functions": (FunctionFolder("orders", "f1"),),
    }
    fields.update({k: v for k, v in changes.items() if k not in _CORE_FIELDS})
    return RuntimeRecipe(CoreRecipe(**core), **fields)  # type: ignore[arg-type]


def _steps(recipe: RuntimeRecipe) -> list[str]:
    """The core's Dockerfile, then the runtime's on top of it."""
    lines = [*recipe.core.dockerfile.splitlines(), *recipe.dockerfile.splitlines()]
    assert recipe.dockerfile.startswith(f"FROM {recipe.core.tag}\n")
    return lines


def test_runtime_requirements_expand_the_extras_dbus_names_of_itself() -> None:
    with (REPO / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    requirements = runtime_requirements(project)
    names = [r.split(">")[0].split("=")[0].split("<")[0] for r in requirements]
    assert {"pyspark", "kazoo", "mysql-replication", "pluggy", "confluent-kafka"} <= set(names)
    assert not any(r.startswith("dbus-fn") for r in requirements)
    assert "docker" not in names and "pytest" not in names


def test_the_function_folders_are_the_last_layer_after_dbus_after_the_deps() -> None:
    lines = _steps(_runtime())
    order = [
        next(i for i, line in enumerate(lines) if line.startswith(prefix))
        for prefix in ("FROM", "RUN command -v java", "COPY --from=dbus-deps:abc", "COPY dist/",
                       "RUN pip install", "COPY functions/")
    ]  # fmt: skip
    assert order == sorted(order)
    assert lines[-1] == "COPY functions/ /opt/dbus/functions/"
    # Once dbus is installed, its byte code step writes into the image's pyspark zip.
    install = next(line for line in lines if line.startswith("RUN pip install") and "dist/" in line)
    assert install.endswith("&& python -m dbus_spark.spark.bytecode"), install


def test_function_requirements_install_before_the_code_and_offline() -> None:
    recipe = _runtime(functions=(FunctionFolder("orders", "f1", has_requirements=True),))
    lines = recipe.dockerfile.splitlines()
    install = next(i for i, line in enumerate(lines) if "requirements/orders" in line)
    assert "--no-index" in lines[install]
    assert install < len(lines) - 1 and lines[-1].startswith("COPY functions/")


def test_without_functions_there_is_no_functions_layer() -> None:
    assert "functions" not in _runtime(functions=()).dockerfile
    assert len(_runtime(functions=()).dockerfile.splitlines()) == 2, "FROM the core, a label"


def test_tags_follow_content_and_only_content() -> None:
    assert _runtime().content_tag == _runtime().content_tag
    assert _runtime().content_tag.startswith("dbus-runtime:")
    changed = {
        _runtime(functions=(FunctionFolder("orders", "f2"),)).content_tag,
        _runtime(dbus_content="beef").content_tag,
        _runtime(base_id="sha256:other").content_tag,
        _runtime(deps_tag="dbus-deps:def").content_tag,
        _runtime(core_id="sha256:core-built-again").content_tag,
    }
    assert len(changed) == 5 and _runtime().content_tag not in changed


def test_a_function_change_leaves_the_core_image_as_it_is() -> None:
    changed = _runtime(functions=(FunctionFolder("orders", "f2"),))
    assert changed.core.tag == _runtime().core.tag
    assert changed.core.dockerfile == _runtime().core.dockerfile
    assert "functions" not in changed.core.dockerfile
    assert _runtime(dbus_content="beef").core.tag != _runtime().core.tag


def test_the_native_row_decoder_is_installed_after_dbus_when_the_host_built_it() -> None:
    assert "dbus_native" not in _runtime().core.dockerfile
    wheel = "dbus_native-0.1.0-cp311-cp311-linux_x86_64.whl"
    recipe = _runtime(native_wheel=wheel, native_content="abc-cpython-311")
    lines = recipe.core.dockerfile.splitlines()
    installed = next(i for i, line in enumerate(lines) if f"/opt/dbus/dist/{wheel}" in line
                     and line.startswith("RUN pip install"))  # fmt: skip
    assert installed > next(i for i, line in enumerate(lines) if "dbus_fn-0.1.0" in line)
    assert "|| echo 'warning:" in lines[installed], "an image whose Python differs still builds"
    assert recipe.core.tag != _runtime(native_wheel=wheel).core.tag
    assert recipe.content_tag != _runtime(native_wheel=wheel).content_tag


def test_the_deps_image_depends_on_base_and_wheels_not_on_dbus() -> None:
    wheels = ("pyspark-4.3.0-py2.py3-none-any.whl", "py4j-0.10.9.9-py2.py3-none-any.whl")
    deps = DepsRecipe("b", "sha256:b", pins_of(wheels), wheels)
    assert deps.pins == ("py4j==0.10.9.9", "pyspark==4.3.0")
    assert "--no-index --find-links" in deps.dockerfile
    assert deps.tag == DepsRecipe("b", "sha256:b", pins_of(wheels), wheels).tag
    assert deps.tag != DepsRecipe("b", "sha256:c", pins_of(wheels), wheels).tag
    assert "dbus_fn" not in deps.dockerfile


def test_the_base_tag_names_suite_and_package_set() -> None:
    assert BaseRecipe().tag.startswith("dbus-base:bookworm-")
    assert BaseRecipe().tag != BaseRecipe(packages=("python3",)).tag


def test_the_mirror_comes_from_the_hosts_apt_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
    )
    assert debian_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] http://one.example/debian bookworm main\n"
    )
    assert debian_mirror("bookworm", tmp_path) == "http://one.example/debian"


def test_no_mirror_for_the_suite_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://one.example/debian bullseye main\n")
    with pytest.raises(ConfigError, match="--mirror"):
        debian_mirror("bookworm", tmp_path)


def test_tree_digest_ignores_caches_and_sees_content(tmp_path: Path) -> None:
    (tmp_path / "fn.py").write_text("x = 1\n")
    before = tree_digest([tmp_path], tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "fn.cpython-311.pyc").write_bytes(b"junk")
    assert tree_digest([tmp_path], tmp_path) == before
    (tmp_path / "fn.py").write_text("x = 2\n")
    assert tree_digest([tmp_path], tmp_path) != before


def test_two_function_folders_of_one_name_are_refused(tmp_path: Path) -> None:
    for parent in ("a", "b"):
        (tmp_path / parent / "orders").mkdir(parents=True)
    with pytest.raises(ConfigError, match="share the name 'orders'"):
        check_build_arguments(
            DEFAULT_BASE, [tmp_path / "a" / "orders", tmp_path / "b" / "orders"], ()
        )


def test_a_failing_step_names_the_step_its_exit_code_and_the_telling_line() -> None:
    error = _failure(
        "dbus-runtime:abc",
        "Step 10/11 : RUN pip install x",
        "The command '/bin/sh -c pip install x' returned a non-zero code: 1",
        ("Collecting x", "ERROR: No matching distribution found for x", ""),
    )
    assert str(error) == (
        "building dbus-runtime:abc failed at `Step 10/11 : RUN pip install x`: exit code 1; "
        "last output: ERROR: No matching distribution found for x"
    )
    assert error.exit_code == 1 and error.log[0] == "Collecting x"


def test_without_an_error_line_the_last_output_line_is_quoted() -> None:
    error = _failure("t", "Step 3/6 : RUN python3", "... returned a non-zero code: 127",
                     ("/bin/sh: 1: python3: not found",))  # fmt: skip
    assert str(error).endswith("exit code 127; last output: /bin/sh: 1: python3: not found")


@pytest.mark.parametrize(
    ("master", "cores", "memory", "option"),
    [
        ("local[2]", 1, "1g", "--master"),
        ("spark://nohost", 1, "1g", "--master"),
        ("spark://127.0.0.1:7077", 0, "1g", "--cores"),
        ("spark://127.0.0.1:7077", 1, "lots", "--memory"),
    ],
)
def test_worker_settings_are_checked_before_any_container(
    master: str, cores: int, memory: str, option: str
) -> None:
    with pytest.raises(ConfigError, match=option):
        check_worker_arguments("dbus-runtime:dev", master, cores, memory)


@pytest.mark.parametrize("scheme", ["unix", "tcp"])
def test_an_engine_nobody_runs_is_one_line_and_exit_3(tmp_path: Path, scheme: str) -> None:
    where = (
        f"unix://{tmp_path}/docker.sock" if scheme == "unix" else f"tcp://127.0.0.1:{free_port()}"
    )
    result = CliRunner().invoke(cli, ["image", "check", "any"], env={"DOCKER_HOST": where})
    assert result.exit_code == 3, result.output
    assert result.output.count("\n") == 1
    assert f"no Docker engine answers at {where}" in result.output
    assert "dbus image daemon" in result.output


def test_build_output_joins_lines_the_engine_sent_in_pieces() -> None:
    import io

    shown: list[str] = []
    log = io.StringIO()
    output = _BuildOutput(log, shown.append, verbose=False)
    pieces = ("Step 3/6 : RUN x\n", " ---> Running in 1f\n", "\x1b[91m/bin/sh: 1: ",
              "x: not fo", "und\n\x1b[0m", "tail without newline")  # fmt: skip
    for piece in pieces:
        output.feed(piece)
    output.flush()
    assert shown == ["Step 3/6 : RUN x"]
    assert output.step == "Step 3/6 : RUN x"
    assert list(output.lines) == ["/bin/sh: 1: x: not found", "tail without newline"]
    assert "Running in" not in log.getvalue()


@pytest.mark.parametrize("name", ["Bad Tag", "UPPER:1", "name:", ":tag"])
def test_a_bad_extra_tag_is_refused_before_anything_is_built(name: str, tmp_path: Path) -> None:
    config = load_config({"DBUS_HOME": str(tmp_path / "home")})
    with pytest.raises(ConfigError, match="--tag"):
        build_image(None, config, tags=[name])  # refused before the engine is asked


def test_good_extra_tags_pass_the_name_check() -> None:
    for name in ("dbus-runtime:dev", "registry.local:5000/team/dbus:1.2", "dbus"):
        assert _IMAGE_NAME.match(name), name


def test_prune_keeps_the_newest_of_each_repository() -> None:
    images = [
        TaggedImage("dbus-runtime:aaaaaaaaaaaa", "2026-01-01T00:00:01Z"),
        TaggedImage("dbus-runtime:bbbbbbbbbbbb", "2026-01-01T00:00:03Z"),
        TaggedImage("dbus-runtime:cccccccccccc", "2026-01-01T00:00:02Z"),
        TaggedImage("dbus-deps:dddddddddddd", "2026-01-01T00:00:00Z"),
    ]
    assert stale_tags(images, keep=2) == ["dbus-runtime:aaaaaaaaaaaa"]
    assert stale_tags(images, keep=0) == sorted(image.tag for image in images)


def _broken_function_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "dbus.toml").write_text(
        'name = "broken"\nversion = "1"\nmodule = "broken.py"\ntables = ["shop.orders"]\n'
    )
    (folder / "broken.py").write_text("import dbus_fn as fn\nimport no_such_module_here\n")
    return folder


@pytest.mark.parametrize(
    ("arguments", "code", "says"),
    [
        (["build", "--base", ""], 2, "--base '' is not an image name"),
        (["build", "--base", "Not An Image"], 2, "--base 'Not An Image' is not an image name"),
        (["build", "--base", "python@sha256:short"], 2, "is not an image name"),
        (["build", "--tag", "UPPER:1"], 2, "--tag 'UPPER:1' is not an image name"),
        (["build", "--functions", "BROKEN"], 1, "no_such_module_here"),
        (["worker", "--image", "dbus-runtime:dev", "--master", "bogus"], 2,
         "--master 'bogus' is not a standalone master"),
        (["worker", "--image", "dbus-runtime:dev", "--master", "spark://127.0.0.1:7077",
          "--cores", "0"], 2, "--cores 0 is not a positive number"),
        (["worker", "--image", "dbus-runtime:dev", "--master", "spark://127.0.0.1:7077",
          "--memory", "lots"], 2, "--memory 'lots' is not a size like 512m or 2g"),
        (["worker", "--image", "", "--master", "spark://127.0.0.1:7077"], 2,
         "--image '' is not an image name"),
        (["check", ""], 2, "IMAGE '' is not an image name"),
    ],
    ids=["empty-base", "malformed-base", "bad-digest", "bad-tag", "functions-not-importing",
         "master", "cores", "memory", "empty-image", "check-empty"],
)  # fmt: skip
def test_image_arguments_are_checked_before_the_engine_is_asked(
    arguments: list[str], code: int, says: str, tmp_path: Path
) -> None:
    broken = str(_broken_function_folder(tmp_path))
    arguments = [broken if a == "BROKEN" else a for a in arguments]
    nobody = f"unix://{tmp_path}/docker.sock"  # no engine answers there
    result = CliRunner().invoke(
        cli, ["image", *arguments],
        env={"DOCKER_HOST": nobody, "DBUS_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert result.exit_code == code, result.output
    assert says in result.stderr
    assert "no Docker engine" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.output
