"""The Elasticsearch that `dbus services up elasticsearch` runs serves the 8.x client."""

from __future__ import annotations

from typing import Any

import psutil
import pytest
from elasticsearch import ConflictError, Elasticsearch
from scratch import scratch_index

from dbus_deploy.services import ElasticsearchEndpoint, status

pytestmark = pytest.mark.integration


@pytest.fixture
def client(elasticsearch_service):
    with Elasticsearch(elasticsearch_service.url) as es:
        yield es


def test_info_and_ping_answer_like_a_full_server(client) -> None:
    assert client.ping()
    info = client.info()
    assert info["version"]["number"] == "8.19.7"
    assert info["cluster_name"] == "dbus-dev"
    assert info["cluster_uuid"]


def test_index_and_search_through_the_8x_client(client, es_index) -> None:
    client.index(index=es_index, id="1", document={"status": "paid"}, refresh=True)
    found = client.search(index=es_index, query={"match": {"status": "paid"}})
    assert found["hits"]["total"]["value"] == 1
    assert found["hits"]["hits"][0]["_id"] == "1"


def test_external_versions_never_regress_a_document(client, es_index) -> None:
    # What the sink relies on: a replayed (older) write is refused, not applied.
    client.index(index=es_index, id="k", document={"v": 2}, version=20, version_type="external")
    with pytest.raises(ConflictError):
        client.index(index=es_index, id="k", document={"v": 1}, version=10, version_type="external")
    assert client.get(index=es_index, id="k")["_source"] == {"v": 2}


def test_cluster_is_single_node_with_disk_watermarks_off(client) -> None:
    assert client.cluster.health()["status"] in ("green", "yellow")
    settings = client.cluster.get_settings(include_defaults=True, flat_settings=True)
    merged = {**settings["defaults"], **settings["persistent"], **settings["transient"]}
    assert merged["discovery.type"] == "single-node"
    assert merged["cluster.routing.allocation.disk.threshold_enabled"] == "false"


def test_server_does_not_run_as_root() -> None:
    (elasticsearch,) = status(["elasticsearch"])
    assert elasticsearch.pid is not None
    assert psutil.Process(elasticsearch.pid).username() == "dbus-es"


def test_es_index_is_made_for_one_test_and_deleted_after_it(
    client: Any, elasticsearch_service: ElasticsearchEndpoint
) -> None:
    with scratch_index(elasticsearch_service) as index:
        client.indices.create(index=index)
        assert client.indices.exists(index=index)
    assert not client.indices.exists(index=index)
