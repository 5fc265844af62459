// Internal: what the server's handlers share.
#pragma once

#include <httplib.h>

#include <atomic>
#include <mutex>
#include <optional>

#include "llamapp/chat.hpp"
#include "llamapp/chat_stream.hpp"
#include "llamapp/embedder.hpp"
#include "llamapp/server.hpp"
#include "server/http_error.hpp"
#include "server/openai_request.hpp"

namespace llamapp::detail {

struct ServerState {
    ServerState(const Model& m, Engine& e, std::shared_ptr<KvStore> s, ServerOptions o)
        : model(m), engine(e), store(std::move(s)), options(std::move(o)) {}

    const Model& model;
    Engine& engine;
    std::shared_ptr<KvStore> store;
    ServerOptions options;
    std::optional<ChatTemplate> chat_template;  // empty: chat answers 400
    std::string chat_template_error;
    std::string model_id;
    RequestLimits limits;
    int max_prompt_tokens = 0;
    httplib::Server http;
    std::atomic<bool> draining{false};
    std::atomic<int> in_flight{0};
    std::atomic<std::uint64_t> next_id{0};
    int port = 0;
    std::once_flag drained;
    std::optional<Embedder> embedder;  // /v1/embeddings

    void register_routes();
    void install_hooks();  // logging, CORS, auth, drain and the error shapes around every route
    httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res);
    void answer_protocol_error(const httplib::Request& req, httplib::Response& res);
    void health(httplib::Response& res) const;
    void models(httplib::Response& res) const;
    void tokenize(const httplib::Request& req, httplib::Response& res) const;
    void detokenize(const httplib::Request& req, httplib::Response& res) const;
    void register_cache_routes();
    void generate(const httplib::Request& req, httplib::Response& res, bool chat);
    // Hands the request to the engine (chat: rendered and tokenized there); errors are thrown as
    // HttpException. A completion's ChatPrompt is empty.
    ChatSubmission submit(GenerationRequest& g, bool chat);
    void embeddings(const httplib::Request& req, httplib::Response& res);
    void send_error(httplib::Response& res, const HttpError& error) const;
    // Fails with a 404 unless `name` is the model this server serves.
    void check_model(const std::string& name) const;
    bool authorized(const httplib::Request& req) const;
    // One structured line per request. A generation adds its fields (finish, tokens, timings)
    // through `fields`; a streamed reply, whose body goes out after httplib's logger has run,
    // writes its own line when the stream ends.
    void access_log(const std::string& method, const std::string& path, int status,
                    std::size_t bytes, const std::string& id, const std::string& fields) const;
};

HttpError draining_error();

// Fields a non-streamed generation leaves for the access-log line of the request this thread
// is answering (httplib runs a request's handler and its logger on one thread).
std::string& pending_log_fields();

// Keeps the in-flight count for drain(); a streamed response holds it until its last event.
class InFlight {
  public:
    explicit InFlight(ServerState& s) : s_(&s) { s_->in_flight.fetch_add(1); }
    InFlight(InFlight&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    InFlight& operator=(InFlight&&) = delete;
    ~InFlight() {
        if (s_) s_->in_flight.fetch_sub(1);
    }

  private:
    ServerState* s_;
};

}  // namespace llamapp::detail
