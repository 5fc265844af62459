// Server: an OpenAI-compatible HTTP front end for the models of a ModelManager (and their KV
// store); the "model" of each request routes it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "llamapp/error.hpp"
#include "llamapp/model_manager.hpp"

namespace llamapp {

struct ServerOptions {
    std::string host = "127.0.0.1";  // a comma list listens on each address, at the same port
    int port = 8080;                 // 0 = any free port (see Server::port)
    std::string unix_socket;         // listen on this path instead of host:port
    // Any of them is accepted; none = no authentication. "sha256:HEX" is a key known only by its
    // SHA-256 digest (64 hex digits), so that a key file can hold digests instead of keys.
    std::vector<std::string> api_keys;
    std::vector<std::string> cors_origins;  // empty = no CORS headers; "*" = any origin
    // Host names a server on a loopback address answers to (as well as localhost and loopback
    // addresses), against DNS rebinding; "*" = any. A server on another address takes any Host.
    std::vector<std::string> allowed_hosts;
    // TLS with this PEM certificate (chain) and key; both or neither.
    std::filesystem::path ssl_cert_file;
    std::filesystem::path ssl_key_file;
    bool slots_route = true;  // GET /slots (llama-server's --slots)
    // Replies carry llama-server's "__verbose" debug object unless a request says otherwise
    // (its --verbose).
    bool verbose_replies = false;
    // POST /slots/{id}?action=save|restore|erase (llama-server's --slot-save-path): the state
    // goes into the KV store as an entry like any other, and a small file here names it. Empty:
    // the actions are refused.
    std::filesystem::path slot_save_path;
    // A server of one model serves it whatever name a request gives, as llama-server does (an
    // OpenAI client's "gpt-4", Claude Code's "claude-…"); the reply names the real model.
    // Ollama's routes keep exact names: a 404 is what makes its clients pull.
    bool accept_any_model = true;
    // No model was named when it started (llama-server's router mode): GET /props without
    // ?model= describes the server (role "router", max_instances, models_autoload), and
    // accept_any_model does not apply, since no one model is the server's.
    bool router = false;
    // What a model pulled over HTTP (llama-server's POST /models) is added to the manager with,
    // but its id, path and source.
    ModelSpec pulled_model;
    std::size_t max_body_bytes = 8u << 20;
    int max_prompt_tokens = 0;  // 0 = the context size
    int max_tokens = 0;         // largest max_tokens a request may ask for; 0 = the context size
    int max_stop_strings = 16;
    int max_embedding_inputs = 256;
    std::chrono::milliseconds request_timeout{10 * 60 * 1000};  // total deadline per request
    // A request's head (its line and headers) must arrive within this, and its body may pause
    // no longer between reads; a client that stops sending is then answered (408) or dropped.
    std::chrono::milliseconds read_timeout{10 * 1000};
    std::chrono::milliseconds drain_grace{30 * 1000};
    int http_threads = 0;  // 0 = enough for every slot and queued request to stream at once
    // /v1/responses kept for previous_response_id (store: true): the oldest go first once
    // either bound is reached, and none outlives the age limit. Kept in memory only.
    std::size_t max_stored_responses = 1024;
    std::size_t max_stored_response_bytes = std::size_t{64} << 20;
    std::chrono::seconds stored_response_ttl{3600};
    // Google Vertex AI's prediction protocol (its AIP_MODE=PREDICTION): POST on this path takes
    // {"instances": [...]}, each naming a POST route by "@requestFormat" ("chatCompletions" or
    // "/v1/chat/completions"), and answers {"predictions": [...]}. Empty: not served.
    std::string predict_route;
    std::string health_route;  // Vertex AI's AIP_HEALTH_ROUTE: one more path for GET /health
};

namespace detail {
struct ServerCore;
}

// Thread-safe. listen() blocks; drain() (from any thread, e.g. a signal watcher) makes it
// return after in-flight requests finished or the grace period ran out.
class Server {
  public:
    // `models` must outlive the server; drain() unloads its models.
    [[nodiscard]] static Result<std::unique_ptr<Server>> create(ModelManager& models,
                                                                ServerOptions options);
    ~Server();

    // Binds; then port() is known. Errors: io_error when the address is taken.
    [[nodiscard]] Result<void> bind();
    // Serves until drain() (or stop()) completes.
    [[nodiscard]] Result<void> listen();
    int port() const;
    // Where it listens once bound: "http://127.0.0.1:8080", "http://[::1]:8080" (empty on a
    // unix socket).
    std::vector<std::string> urls() const;

    // While true, GET /health answers 503 "loading" (as llama-server does while its model loads)
    // and requests wait for their model: set by a caller that binds before loading its models,
    // so that a taken port is reported at once and not after a long load.
    void set_loading(bool loading);

    // Stops accepting work (ready turns false, new requests get 503), lets in-flight requests
    // finish for up to the grace period, cancels the rest, unloads every model (saving KV store
    // entries per policy) and stops the listener.
    void drain();

  private:
    explicit Server(std::unique_ptr<detail::ServerCore> core);
    std::unique_ptr<detail::ServerCore> core_;
};

}  // namespace llamapp
