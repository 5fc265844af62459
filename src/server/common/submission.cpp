// What every protocol's generation shares: the model's template, submitting to the engine, the
// access-log fields of a finished generation.
#include <fmt/core.h>

#include <chrono>

#include "llamapp/backend.hpp"
#include "server/common/server_state.hpp"

namespace llamapp::detail {

namespace {

// The request field an error from submitting names: the prompt for a prompt too long; for chat
// the field when the error does (messages[2].role, tools[0].name), tools for a grammar or schema
// that cannot be combined with tools, messages for a template that fails; else its context.
std::string error_param(const Error& e, bool chat) {
    if (e.code == ErrorCode::context_overflow) return chat ? "messages" : "prompt";
    if (!chat) return {};
    const std::string& where = e.context;
    if (where.starts_with("messages") || where.starts_with("tool")) return where;
    if (where == "grammar" || where == "json_schema") return "tools";
    if (e.code == ErrorCode::template_error) return "messages";
    return {};
}

}  // namespace

nlohmann::json devices_json() {
    nlohmann::json out = nlohmann::json::array();
    for (const DeviceInfo& d : list_devices())
        out.push_back({{"name", d.name},
                       {"type", to_string(d.type)},
                       {"backend", d.backend},
                       {"description", d.description},
                       {"memory_total", d.memory_total},
                       {"memory_free", d.memory_free}});
    return out;
}

std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

const ChatTemplate& chat_template_of(const ModelLease& lease) {
    if (const ChatTemplate* t = lease.chat_template()) return *t;
    throw HttpException{
        http_error(Error{ErrorCode::template_error, lease.chat_template_error(), {}}, "messages",
                   "no_chat_template")};
}

std::string log_fields(const Completion& c) {
    const Generation& g = c.generation;
    return fmt::format(
        "finish={} prompt_tokens={} cached_tokens={} completion_tokens={} draft_tokens={} "
        "draft_accepted={} queue_ms={:.1f} ttft_ms={:.1f} total_ms={:.1f}{}",
        to_string(g.finish_reason), g.usage.prompt_tokens, g.usage.cached_tokens,
        g.usage.completion_tokens, c.draft_tokens, c.draft_accepted, c.queue_ms, g.timings.ttft_ms,
        g.timings.total_ms, g.error ? " error=" + std::string(to_string(g.error->code)) : "");
}

ChatSubmission ServerState::submit(const ServedModel& m, GenerationRequest& g, bool chat) const {
    g.engine.options.timeout = options.request_timeout;
    g.engine.max_prompt_tokens = static_cast<std::size_t>(m.max_prompt_tokens);
    Engine& engine = m.lease.engine();
    if (chat) {
        auto submitted = engine.submit_chat(chat_template_of(m.lease), g.messages,
                                            std::move(g.engine), g.render);
        if (!submitted)
            throw HttpException{
                http_error(submitted.error(), error_param(submitted.error(), true))};
        return std::move(*submitted);
    }
    auto submitted = g.prompt_text.empty() ? engine.submit(std::move(g.engine))
                                           : engine.submit(g.prompt_text, std::move(g.engine));
    if (!submitted)
        throw HttpException{http_error(submitted.error(), error_param(submitted.error(), false))};
    return {std::move(*submitted), ChatPrompt{}};
}

}  // namespace llamapp::detail
