#include "server_client.hpp"

#include <httplib.h>

#include <fmt/core.h>

#include "llama_flags.hpp"

namespace llamapp::cli {

namespace {

using json = nlohmann::json;

// Where to reach a server listening on `host`: its first address, and loopback for a wildcard.
std::string address_of(const std::string& host) {
    std::string first = host.substr(0, host.find(','));
    if (first.empty() || first == "0.0.0.0") return "127.0.0.1";
    if (first == "::" || first == "[::]") return "::1";
    return first;
}

ErrorCode code_of_status(int status) {
    switch (status) {
        case 400:
            return ErrorCode::invalid_argument;
        case 401:
        case 403:
            return ErrorCode::unauthorized;
        case 404:
            return ErrorCode::not_found;
        case 409:
            return ErrorCode::busy;
        default:
            return ErrorCode::io_error;
    }
}

// The message of an error body in any of the server's protocols: {"error": "text"} (Ollama's) or
// {"error": {"message": ...}}; the start of the body otherwise.
std::string refusal_message(const std::string& text) {
    const json body = json::parse(text, nullptr, false);
    if (body.is_object() && body.contains("error")) {
        const json& e = body["error"];
        if (e.is_string()) return e.get<std::string>();
        if (e.is_object() && e.contains("message") && e["message"].is_string())
            return e["message"].get<std::string>();
    }
    return text.substr(0, 200);
}

}  // namespace

void add_server_flags(CLI::App& cmd, ServerAddress& address) {
    add_llama_option(cmd, "--host", address.host, "the server's address")->capture_default_str();
    add_llama_option(cmd, "--port", address.port, "the server's port")->capture_default_str();
    add_llama_option(cmd, "--api-key", address.api_key, "the server's API key");
}

Result<json> ask_server(const ServerAddress& address, const std::string& path, const json* body) {
    httplib::Client client(address_of(address.host), address.port);
    client.set_connection_timeout(std::chrono::seconds(5));
    // serve takes a comma list of keys; any one of them opens the server.
    if (!address.api_key.empty())
        client.set_bearer_token_auth(address.api_key.substr(0, address.api_key.find(',')));
    auto r = body ? client.Post(path, body->dump(), "application/json") : client.Get(path);
    if (!r) {
        return std::unexpected(Error{ErrorCode::io_error, "no server answered",
                                     fmt::format("{}:{}", address.host, address.port)});
    }
    if (r->status != 200)
        return std::unexpected(Error{code_of_status(r->status), refusal_message(r->body)});
    json answer = json::parse(r->body, nullptr, false);
    if (answer.is_discarded()) {
        return std::unexpected(Error{ErrorCode::io_error, "the server's answer is not JSON",
                                     fmt::format("{}:{}{}", address.host, address.port, path)});
    }
    return answer;
}

}  // namespace llamapp::cli
