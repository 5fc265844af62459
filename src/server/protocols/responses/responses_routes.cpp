// POST /v1/responses (and /responses), its input_tokens count, and GET / DELETE of a stored
// response: OpenAI's Responses shapes over the same chat submission as /v1/chat/completions.
#include <fmt/core.h>

#include <algorithm>
#include <random>

#include "llamapp/chat_stream.hpp"
#include "server/protocols/responses/responses.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

// Random, so that an id a client kept from before a restart never names another conversation.
std::string random_hex() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return fmt::format("{:016x}{:016x}", rng(), rng());
}

json usage_json(const Usage& u) {
    return {{"input_tokens", u.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
            {"output_tokens", u.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// What one response is, besides its output: the ids of its items derive from its own.
struct ResponseFrame {
    std::string id;  // resp_<hex>
    std::string model;
    std::int64_t created = 0;
    json echo;
    std::string previous_id;
    bool store = true;

    std::string suffix() const { return id.substr(5); }
    std::string reasoning_id() const { return "rs_" + suffix(); }
    std::string message_id() const { return "msg_" + suffix(); }
    std::string call_id(std::size_t i) const { return fmt::format("fc_{}_{}", suffix(), i); }

    // status: in_progress, completed, incomplete or failed.
    json object(const char* status, json output, const json& usage) const {
        json r = {{"id", id},
                  {"object", "response"},
                  {"created_at", created},
                  {"status", status},
                  {"error", nullptr},
                  {"incomplete_details", nullptr},
                  {"model", model},
                  {"output", std::move(output)},
                  {"previous_response_id", previous_id.empty() ? json(nullptr) : json(previous_id)},
                  {"store", store},
                  {"usage", usage}};
        if (std::string_view(status) == "incomplete")
            r["incomplete_details"] = {{"reason", "max_output_tokens"}};
        r.update(echo);
        return r;
    }
};

json text_part(const std::string& text) {
    return {{"type", "output_text"},
            {"text", text},
            {"annotations", json::array()},
            {"logprobs", json::array()}};
}

json reasoning_part(const std::string& text) {
    return {{"type", "reasoning_text"}, {"text", text}};
}

json reasoning_item(const std::string& id, const std::string& text, const char* status) {
    json content = json::array();
    if (!text.empty()) content.push_back(reasoning_part(text));
    return {{"type", "reasoning"},
            {"id", id},
            {"status", status},
            {"summary", json::array()},
            {"content", std::move(content)}};
}

json message_item(const std::string& id, const json& content, const char* status) {
    return {{"type", "message"},
            {"id", id},
            {"status", status},
            {"role", "assistant"},
            {"content", content}};
}

json call_item(const std::string& id, const ToolCall& call, const char* status) {
    return {{"type", "function_call"},     {"id", id},
            {"call_id", call.id},          {"name", call.name},
            {"arguments", call.arguments}, {"status", status}};
}

// A reply as output items: its reasoning, its text (also when it is empty and nothing else is
// there), then its calls.
json output_items(const ResponseFrame& f, const ChatMessage& m, const char* status) {
    json out = json::array();
    if (!m.reasoning_content.empty())
        out.push_back(reasoning_item(f.reasoning_id(), m.reasoning_content, status));
    if (!m.content.empty() || m.tool_calls.empty())
        out.push_back(message_item(f.message_id(), json::array({text_part(m.content)}), status));
    for (std::size_t i = 0; i < m.tool_calls.size(); ++i)
        out.push_back(call_item(f.call_id(i), m.tool_calls[i], status));
    return out;
}

const char* status_of(const Generation& g) {
    return g.finish_reason == FinishReason::length ? "incomplete" : "completed";
}

// Keeps a finished response for previous_response_id, when the request asked for it.
struct Keeper {
    ResponseStore* store = nullptr;  // null: store was false
    std::vector<ChatMessage> conversation;
    json input_items;

    void keep(const std::string& id, const json& response, ChatMessage reply) {
        if (!store) return;
        conversation.push_back(std::move(reply));
        store->put(id, {response, std::move(conversation), std::move(input_items)});
    }
};

// OpenAI's list of a response's input items: each with an id (the client's, or one derived from
// the response's), newest first unless order=asc, at most `limit` (1-100, default 20) after the
// item `after`.
json input_items_page(const std::string& response_id, const json& items,
                      const httplib::Request& req) {
    json all = json::array();
    for (std::size_t i = 0; i < items.size(); ++i) {
        json item =
            items[i].is_object() ? items[i] : json{{"type", "message"}, {"content", items[i]}};
        if (!item.contains("id")) item["id"] = fmt::format("in_{}_{}", response_id.substr(5), i);
        all.push_back(std::move(item));
    }
    const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
    if (order != "asc" && order != "desc") reject_field("order", "must be asc or desc");
    if (order == "desc") std::reverse(all.begin(), all.end());
    long long limit = 20;
    if (req.has_param("limit")) {
        const json n = json::parse(req.get_param_value("limit"), nullptr, false);
        limit = integer_field(n, "limit", 1, 100);
    }
    std::size_t from = 0;
    if (req.has_param("after")) {
        const std::string after = req.get_param_value("after");
        while (from < all.size() && all[from]["id"] != after) ++from;
        if (from == all.size()) reject_field("after", "no such item in this response");
        ++from;
    }
    json data = json::array();
    for (std::size_t i = from; i < all.size() && data.size() < static_cast<std::size_t>(limit); ++i)
        data.push_back(all[i]);
    const bool more = from + data.size() < all.size();
    return {{"object", "list"},
            {"data", data},
            {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
            {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
            {"has_more", more}};
}

// The Responses event stream: each output item is added, grows by deltas and is done before
// the next one opens (reasoning, then the message, then each call).
class ResponsesStream : public StreamFormat {
  public:
    ResponsesStream(ResponseFrame frame, const ChatPrompt& prompt, Keeper keeper,
                    StreamTelemetry telemetry)
        : frame_(std::move(frame)),
          parser_(prompt),
          keeper_(std::move(keeper)),
          telemetry_(telemetry) {}

    std::string piece(const StreamPiece& piece, const std::optional<Progress>& so_far) override {
        std::string out = start();
        so_far_ = so_far;  // the deltas of this piece carry its timings (timings_per_token)
        if (!piece.text.empty()) out += items(parser_.push(piece.text));
        so_far_.reset();
        return out;
    }

    // llama-server's return_progress: response.in_progress again, with the progress.
    std::string prompt_progress(const Progress& so_far) override {
        if (!telemetry_.return_progress) return {};
        std::string out = start();
        json data = {{"response", frame_.object("in_progress", json::array(), nullptr)}};
        telemetry_.add(data, so_far, true);
        return out + event("response.in_progress", std::move(data));
    }

    std::string last(const Completion& done) override {
        const Generation& g = done.generation;
        std::string out = start();
        if (g.error) {
            json failed = frame_.object("failed", json::array(), nullptr);
            failed["error"] = {{"code", http_error(*g.error).code}, {"message", g.error->message}};
            return out + event("response.failed", {{"response", failed}});
        }
        out += items(parser_.finish(g.finish_reason == FinishReason::stop));
        // As output_items() has it: a reply with neither text nor calls shows an empty message.
        if (!message_opened_ && parser_.message().tool_calls.empty()) out += open_message();
        out += close();
        const char* status = status_of(g);
        const ChatMessage& m = parser_.message();
        json response =
            frame_.object(status, output_items(frame_, m, "completed"), usage_json(g.usage));
        keeper_.keep(frame_.id, response, m);
        json data = {{"response", response}};
        if (telemetry_.any()) data["timings"] = timings_json(done);
        return out + event(g.finish_reason == FinishReason::length ? "response.incomplete"
                                                                   : "response.completed",
                           std::move(data));
    }

  private:
    enum class Open { none, reasoning, message, call };

    std::string event(const char* type, json data) {
        telemetry_.add(data, so_far_, false);
        data["type"] = type;
        data["sequence_number"] = sequence_++;
        return fmt::format("event: {}\ndata: {}\n\n", type, dump(data));
    }

    std::string start() {
        if (started_) return {};
        started_ = true;
        const json r = frame_.object("in_progress", json::array(), nullptr);
        std::string out = event("response.created", {{"response", r}});
        return out + event("response.in_progress", {{"response", r}});
    }

    std::string items(const ChatDelta& d) {
        std::string out;
        if (!d.reasoning_content.empty()) {
            if (open_ != Open::reasoning) out += open_reasoning();
            reasoning_ += d.reasoning_content;
            out += event("response.reasoning_text.delta", at(0, {{"delta", d.reasoning_content}}));
        }
        if (!d.content.empty()) {
            if (open_ != Open::message) out += open_message();
            text_ += d.content;
            out += event("response.output_text.delta",
                         at(0, {{"delta", d.content}, {"logprobs", json::array()}}));
        }
        for (const ChatDelta::ToolCallDelta& c : d.tool_calls) {
            if (!c.name.empty()) out += open_call(c.index, {c.id, c.name, ""});
            if (c.arguments.empty()) continue;
            call_.arguments += c.arguments;
            out += event("response.function_call_arguments.delta",
                         {{"item_id", item_id_},
                          {"output_index", output_index_ - 1},
                          {"delta", c.arguments}});
        }
        return out;
    }

    // An event's place: its item, and the content part within it.
    json at(int content_index, json fields) const {
        fields["item_id"] = item_id_;
        fields["output_index"] = output_index_ - 1;
        fields["content_index"] = content_index;
        return fields;
    }

    std::string added(Open kind, std::string item_id, const json& item) {
        std::string out = close();
        open_ = kind;
        item_id_ = std::move(item_id);
        out +=
            event("response.output_item.added", {{"output_index", output_index_}, {"item", item}});
        ++output_index_;
        return out;
    }

    std::string open_reasoning() {
        std::string out = added(Open::reasoning, frame_.reasoning_id(),
                                reasoning_item(frame_.reasoning_id(), "", "in_progress"));
        return out + event("response.content_part.added", at(0, {{"part", reasoning_part("")}}));
    }

    std::string open_message() {
        message_opened_ = true;
        std::string out = added(Open::message, frame_.message_id(),
                                message_item(frame_.message_id(), json::array(), "in_progress"));
        return out + event("response.content_part.added", at(0, {{"part", text_part("")}}));
    }

    std::string open_call(std::size_t index, ToolCall call) {
        call_ = std::move(call);
        return added(Open::call, frame_.call_id(index),
                     call_item(frame_.call_id(index), call_, "in_progress"));
    }

    std::string close() {
        std::string out;
        switch (open_) {
            case Open::none:
                return {};
            case Open::reasoning:
                out = event("response.reasoning_text.done", at(0, {{"text", reasoning_}}));
                out += event("response.content_part.done",
                             at(0, {{"part", reasoning_part(reasoning_)}}));
                out += done(reasoning_item(item_id_, reasoning_, "completed"));
                break;
            case Open::message:
                out = event("response.output_text.done",
                            at(0, {{"text", text_}, {"logprobs", json::array()}}));
                out += event("response.content_part.done", at(0, {{"part", text_part(text_)}}));
                out += done(message_item(item_id_, json::array({text_part(text_)}), "completed"));
                break;
            case Open::call:
                out = event("response.function_call_arguments.done",
                            {{"item_id", item_id_},
                             {"output_index", output_index_ - 1},
                             {"name", call_.name},
                             {"arguments", call_.arguments}});
                out += done(call_item(item_id_, call_, "completed"));
                break;
        }
        open_ = Open::none;
        return out;
    }

    std::string done(const json& item) {
        return event("response.output_item.done",
                     {{"output_index", output_index_ - 1}, {"item", item}});
    }

    ResponseFrame frame_;
    ChatStreamParser parser_;
    Keeper keeper_;
    StreamTelemetry telemetry_;
    std::optional<Progress> so_far_;  // of the piece being formatted
    bool started_ = false;
    bool message_opened_ = false;
    int sequence_ = 0;
    Open open_ = Open::none;
    int output_index_ = 0;  // of the next item
    std::string item_id_;   // of the open item
    std::string reasoning_, text_;
    ToolCall call_;
};

}  // namespace

void ResponsesProtocol::responses(const httplib::Request& req, httplib::Response& res) {
    InFlight counted(state_);
    state_.refuse_if_draining();
    const json body = parse_body(req.body);
    ServedModel served = state_.serve(body, ServerState::Need::generate);
    ResponsesRequest request =
        parse_responses(body, served.limits, served.lease.defaults(), stored_);
    GenerationRequest& g = request.generation;
    ChatSubmission submitted = state_.submit(served, g, true);
    ResponseFrame frame{"resp_" + random_hex(),       served.lease.id(), unix_now(), request.echo,
                        request.previous_response_id, request.store};
    Keeper keeper{request.store ? &stored_ : nullptr, std::move(request.conversation),
                  std::move(request.input_items)};
    res.set_header("X-Request-Id", frame.id);
    if (!g.stream) {
        const Completion done = ServerState::await_whole(req, submitted.handle);
        const Generation& gen = done.generation;
        const ChatMessage m = ChatTemplate::parse(gen.text, submitted.prompt,
                                                  gen.finish_reason == FinishReason::stop);
        json response = frame.object(status_of(gen), output_items(frame, m, "completed"),
                                     usage_json(gen.usage));
        keeper.keep(frame.id, response, m);
        res.set_content(dump(response), "application/json");
        return;
    }
    const std::string id = frame.id;
    auto format = std::make_unique<ResponsesStream>(std::move(frame), submitted.prompt,
                                                    std::move(keeper), g.telemetry);
    state_.stream_reply(req, res, std::move(served.lease), std::move(submitted.handle),
                        std::move(counted), id, std::move(format));
}

// {"object": "response.input_tokens", "input_tokens": n}: the prompt the body would take.
void ResponsesProtocol::count_response_tokens(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const ServedModel m = state_.serve(body, ServerState::Need::generate);
    const ResponsesRequest request = parse_responses(body, m.limits, m.lease.defaults(), stored_);
    const GenerationRequest& g = request.generation;
    auto prompt = chat_template_of(m.lease).render(g.messages, g.render);
    if (!prompt) throw HttpException{http_error(prompt.error(), "input")};
    res.set_content(
        dump(json{{"object", "response.input_tokens"}, {"input_tokens", prompt->tokens.size()}}),
        "application/json");
}

namespace {

HttpError response_not_found(const std::string& id) {
    return protocol_error(404, "response_not_found",
                          fmt::format("Response with id '{}' not found.", id));
}

}  // namespace

void ResponsesProtocol::register_routes(Routes& routes) {
    ProtocolRoutes on(routes, *this);
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    for (const char* path : {"/v1/responses", "/responses"})
        on.post(path, [this](Req req, Res res) { responses(req, res); });
    for (const char* path : {"/v1/responses/input_tokens", "/responses/input_tokens"})
        on.post(path, [this](Req req, Res res) { count_response_tokens(req, res); });
    for (const char* path :
         {R"(/v1/responses/([^/]+)/input_items)", R"(/responses/([^/]+)/input_items)"}) {
        on.get(path, [this](Req req, Res res) {
            const std::string id = req.matches[1];
            auto r = stored_.get(id);
            if (!r) throw HttpException{response_not_found(id)};
            res.set_content(dump(input_items_page(id, r->input_items, req)), "application/json");
        });
    }
    for (const char* path : {R"(/v1/responses/([^/]+))", R"(/responses/([^/]+))"}) {
        on.get(path, [this](Req req, Res res) {
            const std::string id = req.matches[1];
            auto r = stored_.get(id);
            if (!r) throw HttpException{response_not_found(id)};
            res.set_content(dump(r->response), "application/json");
        });
        on.del(path, [this](Req req, Res res) {
            const std::string id = req.matches[1];
            if (!stored_.erase(id)) throw HttpException{response_not_found(id)};
            res.set_content(dump(json{{"id", id}, {"object", "response"}, {"deleted", true}}),
                            "application/json");
        });
    }
}

}  // namespace llamapp::detail
