"""Fixtures for tests that talk to the real local services.

Session fixtures call the idempotent ``dbus services up`` for just the service a
test needs, so ``pytest tests/...`` works on its own: the first session on a
machine starts (and if need be installs) the service, later ones find it
running. Each test gets its own uuid-named database, topic, index or ZooKeeper
chroot, removed afterwards, so tests never see each other's data.
"""

from __future__ import annotations

import os
import signal
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import timing

from dbus_fn.errors import DbusError

if TYPE_CHECKING:
    # Service clients are imported inside the fixtures that use them, so a unit run
    # (no service, no client library needed) never loads them.

    from scratch import FreshDatabase
    from support import PrivateServices

    from dbus_deploy.services import (
        Endpoints,
        ServicesConfig,
    )

# Tests run several runtimes at once: each serves its API on a free port (it writes
# the address beside its checkpoint) instead of all asking for the default one.
os.environ.setdefault("DBUS_API", "127.0.0.1:0")

SERVICE_FIXTURES = frozenset(
    {
        "mariadb_service",
        "zookeeper_service",
        "kafka_service",
        "elasticsearch_service",
        "prometheus_service",
        "services",
        "private_zookeeper",
        "private_services",
        "module_services",
        "module_servers",
        "private_server",
        "private_database",
        "fresh_database",
        "kafka_topic",
        "es_index",
        "zk_root",
        "mysql_service",
        "mysql_database",
        # A fresh database on the server a test chose (MariaDB or MySQL): the capture
        # tests' and the CLI tests' fixture of that name.
        "database",
    }
)
"""Fixtures that start or reach a real service: a test using one, directly or through
another fixture, is an integration test."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--pass-name",
        default=None,
        help="the name this run's times are recorded under (tests/timing.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # A run started in the background by a script (`cmd &`, nohup) inherits SIGINT
    # ignored, and so would every process a test starts: the tests that play a
    # terminal's Ctrl-C then waited forever. Tests run as a terminal's foreground does.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Recorded on the controller only: xdist workers forward their reports to it.
    if os.environ.get(timing.TIMES_VARIABLE) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(timing.TimeRecorder(config), "dbus-test-times")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` hands out the files longest first (tests/timing.py)."""
    if config.getoption("dist") == "loadfile":
        return timing.make_cost_scheduler(config, log)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


_STARTED: set[str] = set()
"""The shared services this test process asked for: each must still run when a test
starts."""


_SETTING_UP: list[pytest.Item] = []
"""The test whose set-up is running: the one a service fixture is set up for."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A shared service that died (a full disk stops Kafka) fails each later test at
    once, naming the service and its log's last word, instead of in its timeouts."""
    _SETTING_UP[:] = [item]
    if not _STARTED:
        return
    from dbus_deploy.services import stopped

    gone = stopped(sorted(_STARTED))
    if gone:
        pytest.fail("; ".join(gone), pytrace=False)


def _ensure(request: pytest.FixtureRequest, *names: str) -> Endpoints:
    from dbus_deploy.services import endpoints, up

    test = _SETTING_UP[0] if _SETTING_UP else None
    if test is not None and not any(test.get_closest_marker(m) for m in ("integration", "e2e")):
        pytest.fail(
            f"the unit test {test.nodeid} asked for {', '.join(names)}: a test that needs a "
            "service must use a service fixture (so it is marked integration) or be marked e2e",
            pytrace=False,
        )
    try:
        up(list(names))
    except DbusError as exc:
        pytest.fail(f"local services unavailable: {exc}", pytrace=False)
    _STARTED.update(names)
    return endpoints()


def _service(name: str) -> Any:
    """The session fixture ``<name>_service``: that service running, its endpoint."""

    @pytest.fixture(scope="session", name=f"{name}_service")
    def running(request: pytest.FixtureRequest) -> Any:
        return getattr(_ensure(request, name), name)

    return running


# MariaDB runs with a ROW binlog (binlog_row_metadata=FULL) and GTIDs.
mariadb_service = _service("mariadb")
zookeeper_service = _service("zookeeper")
kafka_service = _service("kafka")
elasticsearch_service = _service("elasticsearch")
# Not among the services `up` starts by default: it watches the runtimes.
prometheus_service = _service("prometheus")
# Not among them either: MySQL 9 (ROW binlog with full metadata, GTIDs), installed once
# per machine into a Debian root of its own (``dbus_deploy.services._mysql``).
mysql_service = _service("mysql")


@pytest.fixture(scope="session")
def services(request: pytest.FixtureRequest) -> Endpoints:
    """Every local service, running; their endpoints."""
    return _ensure(request, "mariadb", "zookeeper", "kafka", "elasticsearch")


def _scratch(name: str, maker: str, service: str) -> Any:
    """The fixture ``name``: what ``scratch.<maker>`` makes on the ``service`` fixture's
    endpoint, removed after the test."""

    @pytest.fixture(name=name)
    def made(request: pytest.FixtureRequest) -> Iterator[Any]:
        import scratch

        with getattr(scratch, maker)(request.getfixturevalue(service)) as thing:
            yield thing

    return made


# A new uuid-named MariaDB database, dropped after the test.
fresh_database = _scratch("fresh_database", "scratch_database", "mariadb_service")
# The same on the local MySQL.
mysql_database = _scratch("mysql_database", "scratch_database", "mysql_service")


@pytest.fixture
def server() -> str:
    """The server of the test's ``database``: ``mariadb``, unless the test parametrizes
    this name (``@pytest.mark.parametrize("server", ["mariadb", "mysql"])``)."""
    return "mariadb"


@pytest.fixture
def database(request: pytest.FixtureRequest, server: str) -> Any:
    """The test's fresh database on ``server``: ``fresh_database`` or ``mysql_database``."""
    return request.getfixturevalue("mysql_database" if server == "mysql" else "fresh_database")


# A new uuid-named Kafka topic (3 partitions), deleted after the test.
kafka_topic = _scratch("kafka_topic", "scratch_topic", "kafka_service")
# A fresh uuid-named index name (not created), deleted after the test.
es_index = _scratch("es_index", "scratch_index", "elasticsearch_service")
# A fresh uuid-named ZooKeeper chroot path (created), deleted recursively after the test.
zk_root = _scratch("zk_root", "scratch_zk_root", "zookeeper_service")


@pytest.fixture
def private_zookeeper(tmp_path: Path) -> Iterator[tuple[ServicesConfig, str]]:
    """A ZooKeeper of the test's own (its own DBUS_HOME, a free port) that it may stop
    and start again: ``(config, hosts)``; ``down(["zookeeper"], config=config)``."""
    from support import free_port

    from dbus_deploy.services import down, load_config, up

    port = free_port()
    env = {**os.environ, "DBUS_HOME": str(tmp_path / "zookeeper"), "DBUS_ZOOKEEPER_PORT": str(port)}
    config = load_config(env)
    try:
        up(["zookeeper"], config=config)
    except DbusError as exc:
        pytest.fail(f"a private ZooKeeper did not start: {exc}", pytrace=False)
    try:
        yield config, f"127.0.0.1:{port}"
    finally:
        down(config=config)


@pytest.fixture
def private_services() -> Iterator[Callable[..., Any]]:
    """Start the named services privately, each in a temp home of its own on free ports,
    stopped and removed when the test ends: ``private_services("mariadb", "kafka")``.
    Installed artefacts (Kafka jars, the Elasticsearch distribution) are shared."""
    from support import PrivateHomes

    homes = PrivateHomes()
    yield homes.start
    homes.close()


@pytest.fixture(scope="module")
def module_services() -> Iterator[Callable[..., Any]]:
    """``private_services`` for a whole test module: what it starts serves every test of
    the module (in this process) and is stopped and removed after the last one."""
    from support import PrivateHomes

    homes = PrivateHomes()
    yield homes.start
    homes.close()


@pytest.fixture(scope="module")
def module_servers(
    module_services: Callable[..., PrivateServices],
) -> Callable[[str], PrivateServices]:
    """Database servers of the test module's own (``module_services``): ``module_servers
    ("mysql")`` starts that server on the first call and hands the same one out after.

    A module's tests in one process run one after another, so a test on one has the
    server to itself: its binlog holds that test's changes alone (a read up to the
    server's last position, a lag that drops to zero), and the test may restart or
    reconfigure it without touching anyone else's."""
    started: dict[str, PrivateServices] = {}

    def server(name: str) -> PrivateServices:
        if name not in started:
            started[name] = module_services(name)
        return started[name]

    return server


@pytest.fixture
def private_server(
    module_servers: Callable[[str], PrivateServices], server: str
) -> PrivateServices:
    """The test's ``server`` (MariaDB or MySQL), of the test module's own (``module_servers``)."""
    return module_servers(server)


@pytest.fixture
def private_database(private_server: PrivateServices, server: str) -> Iterator[FreshDatabase]:
    """``fresh_database`` on the module's own ``server`` (``private_server``): a new
    uuid-named database, dropped after the test."""
    import scratch

    with scratch.scratch_database(private_server.database(server)) as database:
        yield database


FunctionFolder = Callable[..., Path]


@pytest.fixture
def function_folder(tmp_path: Path) -> FunctionFolder:
    """Write a function folder as an author would: ``<name>.py`` and its ``dbus.toml``.

    ``function_folder(name, code, tables, dead_letter=None, version="1.0.0",
    initial=None, delivery=None)`` returns the folder; ``code`` is dedented.
    """

    def write(
        name: str,
        code: str,
        tables: Sequence[str],
        *,
        dead_letter: str | None = None,
        version: str = "1.0.0",
        initial: str | None = None,
        delivery: str | None = None,
    ) -> Path:
        folder = tmp_path / f"fn-{name}"
        folder.mkdir()
        (folder / f"{name}.py").write_text(textwrap.dedent(code))
        manifest = [
            f'name = "{name}"',
            f'version = "{version}"',
            f'module = "{name}.py"',
            "tables = [" + ", ".join(f'"{table}"' for table in tables) + "]",
        ]
        if dead_letter is not None:
            manifest.append(f'dead_letter_route = "{dead_letter}"')
        if initial is not None:
            manifest.append(f'initial = "{initial}"')
        if delivery is not None:
            manifest.append(f'delivery = "{delivery}"')
        (folder / "dbus.toml").write_text("\n".join(manifest) + "\n")
        return folder

    return write


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium (Debian's ``chromium`` and ``chromium-driver``, installed
    if missing) driven by Selenium."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from dbus_deploy.services import apt_install, load_config

    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        try:
            apt_install(load_config(), {"chromium": "browser", "chromium-driver": "browser"})
        except DbusError as exc:
            pytest.fail(f"no headless browser: {exc}", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path / 'chromium'}"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=Service(executable_path=shutil.which("chromedriver"))
    )
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A client of a Docker engine, started (and installed) here if none runs; the
    test fails with the reason when docker cannot run (``image_support``). Every
    source change builds new content tags, so the session ends by pruning all but
    the newest runtime and deps image: runs on one machine do not fill its disk."""
    from image_support import docker_engine

    from dbus_deploy.image import prune_images

    client = docker_engine()
    try:
        yield client
    finally:
        prune_images(client, keep=1)
        client.close()


@pytest.fixture(scope="session")
def base_image_tag(docker_client: Any) -> str:
    """The tag of the Debian-made base image (``image_support.base_image``): made, or
    found in the engine, once a run for every test that builds on it."""
    from image_support import base_image

    return base_image(docker_client)


@pytest.fixture(scope="session")
def image_snapshot(tmp_path_factory: pytest.TempPathFactory) -> ServicesConfig:
    """The services' configuration over a frozen copy of dbus's sources
    (``image_support.source_snapshot``): every image a run builds has one version of
    dbus, so the deps and core images are built once and each test adds its top layer."""
    from image_support import source_snapshot

    return source_snapshot(tmp_path_factory.mktemp("dbus-source"))


@pytest.fixture(scope="session")
def image_orders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of functions/orders, baked into ``runtime_image``; a test that changes it
    puts it back."""
    import shutil

    folder = tmp_path_factory.mktemp("functions") / "orders"
    shutil.copytree(Path(__file__).resolve().parents[1] / "functions" / "orders", folder)
    return folder


@pytest.fixture(scope="session")
def runtime_image(
    docker_client: Any, base_image_tag: str, image_snapshot: ServicesConfig, image_orders: Path
) -> Any:
    """The runtime image (a ``BuiltImage``) of the frozen sources with functions/orders,
    built once a run for the tests that run it as it is: as a driver, a checked image
    or a Spark worker."""
    from dbus_deploy.image import build_image

    return build_image(docker_client, image_snapshot, base=base_image_tag, functions=[image_orders])
