package dbus.es;

import java.util.Collection;
import java.util.List;
import java.util.function.Predicate;
import java.util.function.Supplier;

import org.elasticsearch.Build;
import org.elasticsearch.client.internal.node.NodeClient;
import org.elasticsearch.cluster.metadata.IndexNameExpressionResolver;
import org.elasticsearch.cluster.node.DiscoveryNodes;
import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.common.bytes.BytesArray;
import org.elasticsearch.common.io.stream.NamedWriteableRegistry;
import org.elasticsearch.common.settings.ClusterSettings;
import org.elasticsearch.common.settings.IndexScopedSettings;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.common.settings.SettingsFilter;
import org.elasticsearch.features.NodeFeature;
import org.elasticsearch.index.IndexVersion;
import org.elasticsearch.plugins.ActionPlugin;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.rest.BaseRestHandler;
import org.elasticsearch.rest.RestController;
import org.elasticsearch.rest.RestHandler;
import org.elasticsearch.rest.RestRequest;
import org.elasticsearch.rest.RestResponse;
import org.elasticsearch.rest.RestStatus;
import org.elasticsearch.xcontent.XContentBuilder;

/**
 * Serves {@code GET /} and {@code HEAD /} the way a full Elasticsearch does.
 *
 * The minimal distribution published to Maven Central leaves out the module that
 * answers the root URL, so clients' {@code info()} and {@code ping()} would fail
 * against an otherwise complete server. This plugin answers with the node's
 * name, the cluster's name and uuid, and the build's version facts.
 */
public final class RootEndpointPlugin extends Plugin implements ActionPlugin {

    private volatile ClusterService clusterService;

    @Override
    public Collection<?> createComponents(PluginServices services) {
        clusterService = services.clusterService();
        return List.of();
    }

    @Override
    public Collection<RestHandler> getRestHandlers(
        Settings settings,
        NamedWriteableRegistry namedWriteableRegistry,
        RestController restController,
        ClusterSettings clusterSettings,
        IndexScopedSettings indexScopedSettings,
        SettingsFilter settingsFilter,
        IndexNameExpressionResolver indexNameExpressionResolver,
        Supplier<DiscoveryNodes> nodesInCluster,
        Predicate<NodeFeature> clusterSupportsFeature
    ) {
        return List.of(new RootHandler());
    }

    private final class RootHandler extends BaseRestHandler {

        @Override
        public String getName() {
            return "dbus_root_action";
        }

        @Override
        public List<Route> routes() {
            return List.of(new Route(RestRequest.Method.GET, "/"), new Route(RestRequest.Method.HEAD, "/"));
        }

        @Override
        protected RestChannelConsumer prepareRequest(RestRequest request, NodeClient client) {
            return channel -> {
                if (request.method() == RestRequest.Method.HEAD) {
                    channel.sendResponse(new RestResponse(RestStatus.OK, RestResponse.TEXT_CONTENT_TYPE, BytesArray.EMPTY));
                    return;
                }
                ClusterService cluster = clusterService;
                Build build = Build.current();
                XContentBuilder body = channel.newBuilder();
                body.startObject();
                body.field("name", cluster.getNodeName());
                body.field("cluster_name", cluster.getClusterName().value());
                body.field("cluster_uuid", cluster.state().metadata().clusterUUID());
                body.startObject("version");
                body.field("number", build.qualifiedVersion());
                body.field("build_flavor", build.flavor());
                body.field("build_type", build.type().displayName());
                body.field("build_hash", build.hash());
                body.field("build_date", build.date());
                body.field("build_snapshot", build.isSnapshot());
                body.field("lucene_version", IndexVersion.current().luceneVersion().toString());
                body.field("minimum_wire_compatibility_version", build.minWireCompatVersion());
                body.field("minimum_index_compatibility_version", build.minIndexCompatVersion());
                body.endObject();
                body.field("tagline", "You Know, for Search");
                body.endObject();
                channel.sendResponse(new RestResponse(RestStatus.OK, body));
            };
        }
    }
}
