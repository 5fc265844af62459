// Google Vertex AI's prediction protocol (ServerOptions::predict_route): one POST carries a list
// of instances, each a request to one of the POST routes, answered together as predictions. The
// instances run side by side, each through its route's own handler, as llama-server runs them.
#include <fmt/core.h>

#include <cctype>
#include <future>

#include "server/protocols/vertex/vertex.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

constexpr std::size_t max_instances = 128;  // llama-server's bound

// "/v1/chat/completions" -> "chatCompletions", "/apply-template" -> "applyTemplate": the
// camelCase names Vertex AI clients give as "@requestFormat".
std::string camel_case_name(std::string_view path) {
    if (path.starts_with("/v1/")) path.remove_prefix(3);
    if (path.starts_with('/')) path.remove_prefix(1);
    std::string out;
    bool upper = false;
    for (const char c : path) {
        if (c == ':') break;  // a path parameter
        if (c == '/' || c == '-' || c == '_') {
            upper = true;
            continue;
        }
        out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
        upper = false;
    }
    return out;
}

json error_prediction(const HttpError& e) {
    return e.body();
}

}  // namespace

void VertexProtocol::register_routes(Routes& routes) {
    ProtocolRoutes on(routes, *this);
    if (state_.options.predict_route.empty()) return;
    // Each name to its route; where two routes share a name, the OpenAI one (under /v1) wins.
    std::map<std::string, std::string> names;
    const auto post_routes = routes.post_routes();
    for (const bool v1 : {true, false})
        for (const auto& [path, handler] : post_routes)
            if (path.starts_with("/v1/") == v1) names.emplace(camel_case_name(path), path);

    on.post(state_.options.predict_route, [names = std::move(names), post_routes](
                                              const httplib::Request& req, httplib::Response& res) {
        const json body = parse_body(req.body);
        const json* instances = optional_field(body, "instances");
        if (!instances || !instances->is_array())
            reject_field("instances", "the body needs an array named 'instances'", "invalid_type");
        if (instances->size() > max_instances)
            reject_field("instances", fmt::format("at most {} instances", max_instances));
        // Run one instance through its route's handler, as a request of its own.
        auto run = [&req, &names, &post_routes](json instance) -> json {
            if (!instance.is_object())
                return error_prediction(invalid("instances", "each instance must be an object"));
            const json* format = optional_field(instance, "@requestFormat");
            if (!format || !format->is_string())
                return error_prediction(
                    invalid("@requestFormat", "each instance needs a string '@requestFormat'"));
            const std::string name = format->get<std::string>();
            const auto by_name = names.find(name);
            const std::string path = by_name != names.end() ? by_name->second : name;
            const auto target = post_routes.find(path);
            if (target == post_routes.end())
                return error_prediction(
                    invalid("@requestFormat", fmt::format("no route for '{}'", name)));
            instance.erase("@requestFormat");
            if (instance.contains("stream")) instance["stream"] = false;  // one answer each
            httplib::Request inner;
            inner.method = "POST";
            inner.path = path;
            inner.headers = req.headers;
            inner.body = instance.dump();
            inner.is_connection_closed = [&req] { return req.is_connection_closed(); };
            httplib::Response out;
            try {
                target->second(inner, out);
            } catch (const HttpException& e) {
                return error_prediction(e.error);
            } catch (const std::exception& e) {
                return error_prediction(http_error(Error{ErrorCode::internal, e.what(), {}}));
            }
            const json reply = json::parse(out.body, nullptr, false);
            return reply.is_discarded() ? json(out.body) : reply;
        };
        std::vector<std::future<json>> running;
        for (const json& instance : *instances)
            running.push_back(std::async(std::launch::async, run, instance));
        json predictions = json::array();
        for (auto& prediction : running) predictions.push_back(prediction.get());
        res.set_content(dump(json{{"predictions", std::move(predictions)}}), "application/json");
    });
}

}  // namespace llamapp::detail
