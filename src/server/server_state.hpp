// Internal: what the server's handlers share.
#pragma once

#include <httplib.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "llamapp/chat.hpp"
#include "llamapp/chat_stream.hpp"
#include "llamapp/model_manager.hpp"
#include "llamapp/server.hpp"
#include "server/access_policy.hpp"
#include "server/connection.hpp"
#include "server/http_error.hpp"
#include "server/model_pulls.hpp"
#include "server/openai_request.hpp"
#include "server/response_store.hpp"

namespace llamapp::detail {

// A request's model: the lease keeps it loaded until the reply is sent.
struct ServedModel {
    ModelLease lease;
    RequestLimits limits;
    int max_prompt_tokens = 0;
};

// One Server-Sent Event without a name.
inline std::string sse_data(const nlohmann::json& data) {
    return "data: " + dump(data) + "\n\n";
}

// The wire format of one streamed reply: what each engine event becomes on the connection.
// Used by one connection thread at a time.
class StreamFormat {
  public:
    virtual ~StreamFormat() = default;
    virtual const char* content_type() const { return "text/event-stream"; }
    // A piece of the reply; `so_far` is set when the request asked for progress.
    virtual std::string piece(const StreamPiece& piece, const std::optional<Progress>& so_far) = 0;
    // Progress while the prompt is computed (EngineRequest::report_progress).
    virtual std::string prompt_progress(const Progress&) { return {}; }
    // The final events, or the error that ended the generation.
    virtual std::string last(const Completion& done) = 0;
};

struct ServerState;

// Vectors of a request's inputs (dimensions applied), for the embedding routes' shapes.
struct ComputedEmbeddings {
    std::vector<std::vector<float>> vectors;
    int prompt_tokens = 0;
    bool base64 = false;  // encoding_format: base64
};

// Keeps the in-flight count for drain(); a streamed response holds it until its last event.
class InFlight {
  public:
    explicit InFlight(ServerState& s);
    InFlight(InFlight&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    InFlight& operator=(InFlight&&) = delete;
    ~InFlight();

  private:
    ServerState* s_;
};

struct ServerState {
    ServerState(ModelManager& m, ServerOptions o)
        : models(m),
          store(m.kv_store()),
          options(std::move(o)),
          stored_responses({.max_responses = options.max_stored_responses,
                            .max_bytes = options.max_stored_response_bytes,
                            .max_age = options.stored_response_ttl}),
          pulls(m, options.pulled_model),
          access(options),
          api_key_digests(key_digests(options.api_keys)) {}

    ModelManager& models;
    std::shared_ptr<KvStore> store;
    ServerOptions options;
    ResponseStore stored_responses;  // /v1/responses with store: true
    ModelPulls pulls;                // POST /models
    AccessPolicy access;             // Host, Origin and Content-Type rules (SECURITY.md)
    // SHA-256 (hex) of each API key; a key given as "sha256:HEX" is its digest already, so that
    // a key file need not hold the keys themselves.
    std::vector<std::string> api_key_digests;
    // The first listener (make_listener); its routes are registered by route().
    std::unique_ptr<httplib::Server> http = make_listener();
    std::atomic<bool> draining{false};
    std::atomic<int> in_flight{0};
    std::atomic<std::uint64_t> next_id{0};
    int port = 0;
    std::once_flag drained;

    // The listeners of the other addresses of a comma-separated host (Server::bind): each
    // serves every route, with the same limits and hooks as `http`.
    std::vector<std::unique_ptr<httplib::Server>> more_listeners;
    std::size_t http_threads = 0;  // per listener
    enum class Method { get, post, del };
    struct Route {
        Method method;
        std::string pattern;
        httplib::Server::Handler handler;
    };
    std::vector<Route> routes;  // every route, for more_listeners
    // Every POST route by path, for the prediction route's dispatch (predict_route.cpp).
    std::map<std::string, httplib::Server::Handler> post_routes;

    void register_routes();
    // A listener without routes: TLS (httplib's SSLServer, its own connection loop) when a
    // certificate is configured, else a Listener (connection.hpp). Check is_valid().
    std::unique_ptr<httplib::Server> make_listener();
    ConnectionLimits connection_limits() const;
    // Registers on `http` and keeps the route for the other listeners.
    void route(Method method, const std::string& pattern, httplib::Server::Handler handler);
    void get(const std::string& pattern, httplib::Server::Handler handler) {
        route(Method::get, pattern, std::move(handler));
    }
    void post(const std::string& path, httplib::Server::Handler handler);
    void del(const std::string& pattern, httplib::Server::Handler handler) {
        route(Method::del, pattern, std::move(handler));
    }
    void register_predict_route();
    // Threads, limits, socket options, then logging, CORS, auth, drain and the error shapes
    // around every route.
    void configure(httplib::Server& listener);
    // A listener on `host` (one of a comma-separated list) with every route; `port` is the first
    // listener's. False when the address cannot be bound.
    bool listen_also(const std::string& host);
    void stop_listening();
    httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res);
    void answer_protocol_error(const httplib::Request& req, httplib::Response& res);
    void health(httplib::Response& res) const;
    void list_models(httplib::Response& res) const;
    // llama-server's own routes (native_routes.cpp).
    void register_native_routes();
    void tokenize(const httplib::Request& req, httplib::Response& res) const;
    void detokenize(const httplib::Request& req, httplib::Response& res) const;
    // /completion; `infill`: /infill, whose prompt is laid out around a gap in code.
    void native_completion(const httplib::Request& req, httplib::Response& res, bool infill);
    void apply_template(const httplib::Request& req, httplib::Response& res) const;
    void count_chat_tokens(const httplib::Request& req, httplib::Response& res) const;
    void props(const httplib::Request& req, httplib::Response& res) const;
    void slots(const httplib::Request& req, httplib::Response& res) const;
    // POST /slots/{id}?action= (slot_routes.cpp).
    void slot_action(const httplib::Request& req, httplib::Response& res) const;
    // Anthropic's Messages API (anthropic_routes.cpp).
    void register_anthropic_routes();
    void anthropic_messages(const httplib::Request& req, httplib::Response& res);
    void count_message_tokens(const httplib::Request& req, httplib::Response& res) const;
    // OpenAI's Responses API (responses_routes.cpp).
    void register_responses_routes();
    void responses(const httplib::Request& req, httplib::Response& res);
    void count_response_tokens(const httplib::Request& req, httplib::Response& res);
    void register_cache_routes();
    void register_model_routes();
    void load_model(const httplib::Request& req, httplib::Response& res);
    void delete_model(const httplib::Request& req, httplib::Response& res);
    // Unloads and forgets a model pulled from the hub, and deletes its files (both DELETE routes).
    void forget_pulled(const ModelListing& m) const;
    void pull_model(const httplib::Request& req, httplib::Response& res);
    void pull_events(httplib::Response& res);
    void generate(const httplib::Request& req, httplib::Response& res, bool chat);
    // Hands the request to the engine (chat: rendered and tokenized there); errors are thrown as
    // HttpException. A completion's ChatPrompt is empty.
    ChatSubmission submit(const ServedModel& m, GenerationRequest& g, bool chat);
    // Answers `handle` as a stream in `format` (Server-Sent Events); the provider runs on the
    // connection's thread until the final event, the lease and the in-flight count are held
    // until then, and a client that goes away cancels the request. `more` are further choices
    // (n > 1), streamed after it in order: they run side by side in the engine meanwhile, their
    // events waiting in their handles, and `format` is told when one ends (its last()).
    void stream_reply(const httplib::Request& req, httplib::Response& res, ModelLease lease,
                      RequestHandle handle, InFlight counted, const std::string& id,
                      std::unique_ptr<StreamFormat> format,
                      std::vector<RequestHandle> more = {}) const;
    // Waits for a whole reply (a departed client cancels it) and leaves its log fields; an
    // error that ended the generation is thrown.
    static Completion await_whole(const httplib::Request& req, RequestHandle& handle);
    // The body's input, encoding_format, dimensions and embd_normalize; `truncate`: an input over
    // the limit is cut, not refused.
    ComputedEmbeddings compute_embeddings(const nlohmann::json& body, const ServedModel& m,
                                          bool truncate) const;
    // /v1/embeddings (and /embeddings); `native`: llama-server's /embedding shape.
    void embeddings(const httplib::Request& req, httplib::Response& res, bool native);
    // /rerank and its aliases: documents scored against a query by a reranker (rerank.cpp).
    void rerank(const httplib::Request& req, httplib::Response& res);
    // In the shape of the protocol the request's path speaks (Anthropic's on /v1/messages).
    void send_error(const httplib::Request& req, httplib::Response& res,
                    const HttpError& error) const;
    // The model the body's "model" names (absent: the default), loaded if it is not, and what
    // its requests may ask for. Throws HttpException: 404 model_not_found, 503 for a model that
    // failed or does not fit, 429 when too many wait for its load, 400 when it cannot `need`.
    enum class Need { generate, embed, rerank, tokens };
    // `keep_alive` replaces the model's idle time from now on (Ollama's per-request keep_alive).
    ServedModel serve(const nlohmann::json& body, Need need,
                      std::optional<std::chrono::milliseconds> keep_alive = std::nullopt) const;
    // Ollama's API (ollama_routes.cpp, ollama_models.cpp).
    void register_ollama_routes();
    // The body with "model" (or "name") resolved to the manager's name; "name" keeps the name
    // the client gave.
    nlohmann::json ollama_body(const httplib::Request& req) const;
    // /api/chat, or /api/generate when not `chat`.
    void ollama_generate(const httplib::Request& req, httplib::Response& res, bool chat);
    void ollama_embed(const httplib::Request& req, httplib::Response& res, bool older);
    void ollama_tags(httplib::Response& res) const;
    void ollama_ps(httplib::Response& res) const;
    void ollama_show(const httplib::Request& req, httplib::Response& res) const;
    void ollama_pull(const httplib::Request& req, httplib::Response& res);
    void follow_pull(const httplib::Request& req, httplib::Response& res,
                     std::shared_ptr<PullListener> listener, const std::string& name,
                     bool stream) const;
    void ollama_delete(const httplib::Request& req, httplib::Response& res);
    void ollama_copy(const httplib::Request& req, httplib::Response& res);
    bool authorized(const httplib::Request& req) const;
    // One structured line per request. A generation adds its fields (finish, tokens, timings)
    // through `fields`; a streamed reply, whose body goes out after httplib's logger has run,
    // writes its own line when the stream ends.
    void access_log(const std::string& method, const std::string& path, int status,
                    std::size_t bytes, const std::string& id, const std::string& fields) const;
};

inline InFlight::InFlight(ServerState& s) : s_(&s) {
    s_->in_flight.fetch_add(1);
}
inline InFlight::~InFlight() {
    if (s_) s_->in_flight.fetch_sub(1);
}

HttpError draining_error();
// A model lookup's error, naming the field "model"; an unknown model is model_not_found.
HttpError model_error(const Error& e);
bool anthropic_route(const std::string& path);
bool ollama_route(const std::string& path);  // errors as {"error": message}

// RFC 3339 with nanoseconds, UTC, as Ollama's created_at and modified_at.
std::string rfc3339(std::chrono::system_clock::time_point t = std::chrono::system_clock::now());

// The model's chat template; a model without one is a 400 naming messages.
const ChatTemplate& chat_template_of(const ModelLease& lease);

std::int64_t unix_now();  // seconds since the epoch, as OpenAI's "created" fields count

// A finished generation's part of its access-log line.
std::string log_fields(const Completion& c);

// Waits for a request's next events. Whole and streamed replies notice a departed client the
// same way: `gone()` is asked at least every 50 ms, between events too (tokens keep arriving
// while nobody may be left to read them), and a client that is gone cancels the request.
class ClientWatch {
  public:
    // False once the final event was returned.
    template <typename Gone>
    bool next(RequestHandle& handle, EngineEvent& event, Gone&& gone) {
        for (;;) {
            const auto got = handle.next_for(event, look_every);
            if (got == RequestHandle::Wait::closed) return false;
            if (const auto now = std::chrono::steady_clock::now(); now >= next_look_) {
                if (gone()) handle.cancel();
                next_look_ = now + look_every;
            }
            if (got == RequestHandle::Wait::event) return true;
        }
    }

  private:
    static constexpr auto look_every = std::chrono::milliseconds(50);
    std::chrono::steady_clock::time_point next_look_ =
        std::chrono::steady_clock::now() + look_every;
};

// Fields a non-streamed generation leaves for the access-log line of the request this thread
// is answering (httplib runs a request's handler and its logger on one thread).
std::string& pending_log_fields();

}  // namespace llamapp::detail
