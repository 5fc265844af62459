// llama-server's slot actions, POST /slots/{id}?action=save|restore|erase, over the KV store. A
// save puts the slot's state into the store as an entry like any other (later prompts that share
// its prefix restore it too) and writes a small file under --slot-save-path that names it: the
// model's fingerprint and the tokens. A restore reads the file and loads the stored entry that
// holds all of those tokens, so an entry the store has since extended or moved still serves.
#include <fmt/core.h>

#include <unistd.h>
#include <atomic>
#include <charconv>
#include <fstream>
#include <sstream>

#include "kvstore/entry_file.hpp"
#include "server/protocols/native/native.hpp"

namespace llamapp::detail {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* slot_file_format = "llamapp slot 1";

// A plain name inside the directory: no separators, no parent, no hidden or temporary files, and
// not a name the KV store would take for one of its entries (the directory may be its tier).
bool valid_filename(const std::string& name) {
    if (name.empty() || name.size() > 255 || name.front() == '.') return false;
    if (fs::path(name).extension() == entry_extension) return false;
    for (const unsigned char c : name)
        if (c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == ':') return false;
    return true;
}

std::string filename_of(const httplib::Request& req) {
    const json body = parse_body(req.body);
    const json* v = optional_field(body, "filename");
    if (!v)
        throw HttpException{
            invalid("filename", "'filename' is required", "missing_required_parameter")};
    if (!v->is_string() || !valid_filename(v->get<std::string>()))
        throw HttpException{invalid("filename", "Invalid filename")};
    return v->get<std::string>();
}

[[noreturn]] void throw_error(const Error& e) {
    throw HttpException{http_error(e)};
}

std::string fingerprint_of(const Model& model) {
    auto f = model.fingerprint();
    if (!f) throw_error(f.error());
    return *f;
}

// Written beside, then renamed: a reader never sees half a file. Each write has a temporary
// name of its own: two saves to one name at once each publish a whole file, the later one wins.
void write_slot_file(const fs::path& path, const json& content) {
    static std::atomic<std::uint64_t> writes{0};
    const fs::path tmp = path.parent_path() / fmt::format(".{}.tmp.{}.{}", path.filename().string(),
                                                          ::getpid(), writes.fetch_add(1));
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << dump(content);
        if (!out.flush())
            throw_error({ErrorCode::io_error, "cannot write the slot file", path.string()});
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) {
        fs::remove(tmp, ec);
        throw_error({ErrorCode::io_error, "cannot write the slot file", path.string()});
    }
}

// The tokens a slot file names, checked against the model that restores them.
std::vector<Token> read_slot_file(const fs::path& path, const std::string& fingerprint) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw_error({ErrorCode::not_found, "no such slot file", path.filename().string()});
    std::ostringstream text;
    text << in.rdbuf();
    const json file = json::parse(text.str(), nullptr, false);
    const auto not_ours = [&] {
        throw HttpException{invalid(
            "filename", fmt::format("Unable to restore slot: {} is not a slot file llamapp wrote",
                                    path.filename().string()))};
    };
    if (!file.is_object() || file.value("format", "") != slot_file_format) not_ours();
    const json* model = optional_field(file, "model");
    const json* tokens = optional_field(file, "tokens");
    if (!model || !model->is_string() || !tokens || !tokens->is_array()) not_ours();
    if (model->get<std::string>() != fingerprint)
        throw HttpException{
            invalid("filename", "Unable to restore slot: the file was saved by another model")};
    std::vector<Token> out;
    out.reserve(tokens->size());
    for (const json& t : *tokens) {
        if (!t.is_number_integer()) not_ours();
        out.push_back(t.get<Token>());
    }
    return out;
}

}  // namespace

void NativeProtocol::slot_action(const httplib::Request& req, httplib::Response& res) const {
    if (state_.options.slot_save_path.empty())
        throw HttpException{protocol_error(501, "not_supported_error",
                                           "This server does not support slots action. Start "
                                           "it with `--slot-save-path`")};
    int id = -1;
    const std::string id_text = req.path_params.at("id_slot");
    auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (ec != std::errc{} || end != id_text.data() + id_text.size())
        throw HttpException{invalid("id_slot", "Invalid slot ID")};
    const std::string action = req.get_param_value("action");
    if (action != "save" && action != "restore" && action != "erase")
        throw HttpException{invalid("action", "Invalid action")};

    json selector = json::object();
    if (req.has_param("model")) selector["model"] = req.get_param_value("model");
    const ServedModel m = state_.serve(selector, ServerState::Need::generate);
    Engine& engine = m.lease.engine();
    json out;
    if (action == "erase") {
        auto erased = engine.erase_slot(id);
        if (!erased) throw_error(erased.error());
        out = {{"id_slot", id}, {"n_erased", *erased}};
    } else {
        const std::string name = filename_of(req);
        const fs::path path = state_.options.slot_save_path / name;
        const std::string fingerprint = fingerprint_of(m.lease.model());
        if (action == "save") {
            auto saved = engine.save_slot(id);
            if (!saved) throw_error(saved.error());
            write_slot_file(
                path,
                {{"format", slot_file_format}, {"model", fingerprint}, {"tokens", saved->tokens}});
            out = {{"id_slot", id},
                   {"filename", name},
                   {"n_saved", saved->tokens.size()},
                   {"n_written", saved->bytes},
                   {"timings", {{"save_ms", saved->ms}}}};
        } else {
            const std::vector<Token> tokens = read_slot_file(path, fingerprint);
            auto restored = engine.restore_slot(id, tokens);
            if (!restored) throw_error(restored.error());
            out = {{"id_slot", id},
                   {"filename", name},
                   {"n_restored", restored->tokens.size()},
                   {"n_read", restored->bytes},
                   {"timings", {{"restore_ms", restored->ms}}}};
        }
    }
    res.set_content(dump(out), "application/json");
}

}  // namespace llamapp::detail
