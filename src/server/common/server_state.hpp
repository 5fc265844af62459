// Internal: what every protocol's handlers share.
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
#include "server/common/generation_request.hpp"
#include "server/common/model_pulls.hpp"
#include "server/common/stream_format.hpp"
#include "server/http/access_log.hpp"
#include "server/http/http_error.hpp"

namespace llamapp::detail {

// A request's model: the lease keeps it loaded until the reply is sent.
struct ServedModel {
    ModelLease lease;
    Embedder* embedder = nullptr;  // the lease's, for embedding and rerank requests
    RequestLimits limits;
    int max_prompt_tokens = 0;
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

// The services every protocol's handlers share: the models, the KV store, the options, the
// pulls, and the counters drain() waits on. Routes and their handlers live in the protocols.
struct ServerState {
    ServerState(ModelManager& m, ServerOptions o)
        : models(m), store(m.kv_store()), options(std::move(o)), pulls(m, options.pulled_model) {}

    ModelManager& models;
    std::shared_ptr<KvStore> store;
    ServerOptions options;
    ModelPulls pulls;  // POST /models, /api/pull
    std::atomic<bool> draining{false};
    std::atomic<bool> loading{false};  // the models given at start are still loading
    std::atomic<int> in_flight{0};
    std::atomic<std::uint64_t> next_id{0};

    // Hands the request to the engine (chat: rendered and tokenized there); errors are thrown as
    // HttpException. A completion's ChatPrompt is empty.
    ChatSubmission submit(const ServedModel& m, GenerationRequest& g, bool chat) const;
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
    // The model the body's "model" names (absent: the default), loaded if it is not, and what
    // its requests may ask for. Throws HttpException: 404 model_not_found, 503 for a model that
    // failed or does not fit, 429 when too many wait for its load, 400 when it cannot `need`.
    enum class Need { generate, embed, rerank, tokens };
    // A server of one model (not a router) answers any name with it, as llama-server does, unless
    // options.accept_any_model is off. Ollama's clients manage models by name (a 404 is what
    // makes them pull), so its routes ask for the exact name.
    enum class Naming { any_for_one_model, exact };
    // `keep_alive` replaces the model's idle time from now on (Ollama's per-request keep_alive).
    ServedModel serve(const nlohmann::json& body, Need need,
                      Naming naming = Naming::any_for_one_model,
                      std::optional<std::chrono::milliseconds> keep_alive = std::nullopt) const;
    // Unloads and forgets a model pulled from the hub, and deletes its files (both DELETE routes).
    void forget_pulled(const ModelListing& m) const;
    // Refuses new work (503) while the server drains.
    void refuse_if_draining() const {
        if (draining) throw HttpException{draining_error()};
    }
};

inline InFlight::InFlight(ServerState& s) : s_(&s) {
    s_->in_flight.fetch_add(1);
}
inline InFlight::~InFlight() {
    if (s_) s_->in_flight.fetch_sub(1);
}

// A model lookup's error, naming the field "model"; an unknown model is model_not_found.
HttpError model_error(const Error& e);
// The model's chat template; a model without one is a 400 naming messages.
const ChatTemplate& chat_template_of(const ModelLease& lease);

std::int64_t unix_now();  // seconds since the epoch, as OpenAI's "created" fields count

// Every device (llamapp::list_devices()): name, type, backend, description, memory total and
// free, for /health and /props.
nlohmann::json devices_json();

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

}  // namespace llamapp::detail
