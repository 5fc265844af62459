#include "chat_saves.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace llamapp::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* format_name = "llamapp-chat";

json message_json(const ChatMessage& m) {
    json out = {{"role", m.role}, {"content", m.content}};
    if (!m.reasoning_content.empty()) out["reasoning_content"] = m.reasoning_content;
    return out;
}

bool is_name(const std::string& name) {
    if (name.empty() || name.size() > 100 || name.front() == '.') return false;
    for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
            return false;
    return true;
}

}  // namespace

Result<fs::path> chat_file(const fs::path& dir, const std::string& name) {
    if (name.find('/') != name.npos) return fs::path(name);
    if (!is_name(name))
        return fail(
            ErrorCode::invalid_argument,
            "a conversation's name is letters, digits, '.', '_' and '-' (or a path with '/')",
            name);
    return dir / (name + ".json");
}

Result<void> write_chat(const fs::path& path, const SavedChat& chat) {
    json messages = json::array();
    for (const ChatMessage& m : chat.messages) messages.push_back(message_json(m));
    const json out = {{"format", format_name},
                      {"version", 1},
                      {"model", chat.model},
                      {"messages", std::move(messages)},
                      {"tokens", chat.tokens}};
    std::error_code ec;
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
    const fs::path temporary = path.string() + ".partial";
    {
        std::ofstream file(temporary, std::ios::trunc);
        file << out.dump(1) << "\n";
        if (!file.flush())
            return fail(ErrorCode::io_error, "cannot write the conversation", temporary.string());
    }
    fs::rename(temporary, path, ec);
    if (ec)
        return fail(ErrorCode::io_error, "cannot write the conversation: " + ec.message(),
                    path.string());
    return {};
}

Result<SavedChat> read_chat(const fs::path& path) {
    std::ifstream file(path);
    if (!file) {
        std::error_code ec;
        if (!fs::exists(path, ec))
            return fail(ErrorCode::file_not_found, "no conversation is saved by that name",
                        path.string());
        return fail(ErrorCode::io_error, "cannot read the conversation", path.string());
    }
    std::stringstream text;
    text << file.rdbuf();
    const json in = json::parse(text.str(), nullptr, false);
    const auto refuse = [&] {
        return fail(ErrorCode::invalid_argument, "not a conversation saved by llamapp",
                    path.string());
    };
    if (!in.is_object() || in.value("format", "") != format_name || !in.contains("messages") ||
        !in["messages"].is_array())
        return refuse();
    SavedChat chat;
    chat.model = in.value("model", "");
    for (const json& m : in["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
            !m.contains("content") || !m["content"].is_string())
            return refuse();
        chat.messages.push_back({.role = m["role"].get<std::string>(),
                                 .content = m["content"].get<std::string>(),
                                 .reasoning_content = m.value("reasoning_content", "")});
    }
    if (in.contains("tokens")) {
        if (!in["tokens"].is_array()) return refuse();
        for (const json& t : in["tokens"]) {
            if (!t.is_number_integer()) return refuse();
            chat.tokens.push_back(t.get<Token>());
        }
    }
    return chat;
}

}  // namespace llamapp::cli
