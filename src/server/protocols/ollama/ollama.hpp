// Internal: Ollama's API (/api/*) over the same engine requests as the OpenAI routes. A request
// is read by turning its body into the OpenAI body of the same meaning, so that one parser
// checks every protocol; errors name the Ollama field (options.temperature, not temperature).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "server/common/server_state.hpp"
#include "server/http/protocol.hpp"

namespace llamapp::detail {

// Ollama names models "name:tag" with ":latest" implied, and hub models "hf.co/owner/repo:tag".
// A model's Ollama name: its id with ":latest" added when the id has no tag, "hf.co/" before a
// hub model's. Every name listed resolves back to its model, and so do the id and aliases.
std::string ollama_name(const ModelListing& m);

// The fields /api/chat and /api/generate share besides the generation itself.
struct OllamaRequest {
    GenerationRequest g;
    bool chat = true;  // false: a raw or fill-in-the-middle prompt, submitted as a completion
};

// keep_alive as Ollama spells it: seconds as a number, or a duration string ("5m", "-1").
std::optional<std::chrono::milliseconds> ollama_keep_alive(const nlohmann::json& body);

// Ollama's body as OpenAI's: options flattened, format as response_format, think as
// enable_thinking or reasoning_effort, messages with tool calls given ids. `n_ctx` is the loaded
// context, which options.num_ctx may not exceed.
OllamaRequest parse_ollama_chat(const nlohmann::json& body, ServedModel& m, int n_ctx);
// prompt with system laid out by the model's chat template (or by a `template` override in
// Ollama's Go template syntax), raw prompts as they are, and suffix as fill-in-the-middle.
OllamaRequest parse_ollama_generate(const nlohmann::json& body, ServedModel& m, int n_ctx);

// RFC 3339 with nanoseconds, UTC, as Ollama's created_at and modified_at.
std::string rfc3339(std::chrono::system_clock::time_point t = std::chrono::system_clock::now());

class OllamaProtocol final : public Protocol {
  public:
    explicit OllamaProtocol(ServerState& state) : state_(state) {}
    std::string_view name() const override { return "ollama"; }
    // {"error": "message"}, the field named in the message.
    nlohmann::json error_body(const HttpError& e) const override;
    std::vector<std::string> path_prefixes() const override { return {"/api/"}; }
    void register_routes(Routes& routes) override;

  private:
    // The body with "model" (or "name") resolved to the manager's name; "name" keeps the name
    // the client gave.
    nlohmann::json body_of(const httplib::Request& req) const;
    // /api/chat, or /api/generate when not `chat`.
    void generate(const httplib::Request& req, httplib::Response& res, bool chat);
    // /api/embed, or the older /api/embeddings.
    void embed(const httplib::Request& req, httplib::Response& res, bool older);
    void tags(httplib::Response& res) const;
    void ps(httplib::Response& res) const;
    void show(const httplib::Request& req, httplib::Response& res) const;
    void pull(const httplib::Request& req, httplib::Response& res);
    void follow_pull(const httplib::Request& req, httplib::Response& res,
                     std::shared_ptr<PullListener> listener, const std::string& name,
                     bool stream) const;
    void remove(const httplib::Request& req, httplib::Response& res);
    void copy(const httplib::Request& req, httplib::Response& res);

    ServerState& state_;
};

}  // namespace llamapp::detail
