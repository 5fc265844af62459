// Model references: the parsing rules of model_ref.hpp.
#include "llamapp/model_ref.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>

#include "hub/hub_internal.hpp"

namespace llamapp {

namespace {

constexpr std::size_t max_repo_part = 96;  // the hub's limit for an owner or a repository name
constexpr std::size_t max_file_part = 255;
constexpr std::size_t max_word = 128;

bool word_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

bool ends_with_gguf(std::string_view s) {
    constexpr std::string_view ext = ".gguf";
    if (s.size() < ext.size()) return false;
    return std::equal(
        ext.begin(), ext.end(), s.end() - static_cast<std::ptrdiff_t>(ext.size()),
        [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
}

// The hub's rule for an owner or a repository name: letters, digits, '.', '_', '-'; no "--" or
// ".."; neither '.' nor '-' first or last; at most 96 characters.
Result<void> check_repo_part(std::string_view part, std::string_view what) {
    const bool ok = !part.empty() && part.size() <= max_repo_part &&
                    std::all_of(part.begin(), part.end(), word_char) &&
                    part.find("--") == std::string_view::npos &&
                    part.find("..") == std::string_view::npos && part.front() != '.' &&
                    part.front() != '-' && part.back() != '.' && part.back() != '-';
    if (ok) return {};
    return fail(ErrorCode::invalid_argument,
                fmt::format("a hub {} is 1 to {} letters, digits, '.', '_' or '-', without "
                            "'--' or '..' and not starting or ending with '.' or '-'",
                            what, max_repo_part),
                std::string(part));
}

// A file inside a repository: relative, '/'-separated, no empty, "." or ".." component, no
// backslash or control character, so that it cannot name anything outside the cache.
Result<void> check_repo_file(std::string_view file) {
    const auto bad = [&](std::string_view why) {
        return fail(ErrorCode::invalid_argument, fmt::format("a hub file path {}", why),
                    std::string(file));
    };
    if (file.front() == '/') return bad("is relative to its repository");
    for (char c : file) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\' || c == ':')
            return bad("has no control characters, '\\' or ':'");
    }
    std::size_t start = 0;
    while (start <= file.size()) {
        const std::size_t end = std::min(file.find('/', start), file.size());
        const std::string_view part = file.substr(start, end - start);
        if (part.empty() || part == "." || part == "..")
            return bad("has no empty, '.' or '..' component");
        if (part.size() > max_file_part) return bad("has components of at most 255 characters");
        start = end + 1;
    }
    return {};
}

Result<ModelRef> parse_hub(std::string_view text) {
    const std::size_t colon = text.find(':');
    const std::string_view repo = text.substr(0, colon);
    const std::size_t slash = repo.find('/');
    if (slash == std::string_view::npos || repo.find('/', slash + 1) != std::string_view::npos)
        return fail(ErrorCode::invalid_argument, "a hub reference is owner/name[:file-or-quant]",
                    std::string(text));
    if (auto ok = check_repo_part(repo.substr(0, slash), "owner"); !ok)
        return std::unexpected(ok.error());
    if (auto ok = check_repo_part(repo.substr(slash + 1), "repository name"); !ok)
        return std::unexpected(ok.error());
    ModelRef ref;
    ref.kind = ModelRefKind::hub;
    ref.hub.repo = std::string(repo);
    if (colon == std::string_view::npos) return ref;
    const std::string_view what = text.substr(colon + 1);
    if (what == "latest") return ref;  // Ollama's implied tag: the repository's default choice
    if (what.empty())
        return fail(ErrorCode::invalid_argument, "nothing follows the ':' of a hub reference",
                    std::string(text));
    if (ends_with_gguf(what)) {
        if (auto ok = check_repo_file(what); !ok) return std::unexpected(ok.error());
        ref.hub.file = std::string(what);
    } else if (what.size() <= max_word && std::all_of(what.begin(), what.end(), word_char)) {
        ref.hub.quant = std::string(what);
    } else {
        return fail(ErrorCode::invalid_argument,
                    "a quantization tag is letters, digits, '.', '_' or '-' (e.g. Q4_K_M)",
                    std::string(what));
    }
    return ref;
}

Result<ModelRef> parse_name(std::string_view text) {
    const auto colons = std::count(text.begin(), text.end(), ':');
    const bool ok =
        text.size() <= max_word && word_char(text.front()) && text.back() != ':' && colons <= 1 &&
        std::all_of(text.begin(), text.end(), [](char c) { return word_char(c) || c == ':'; });
    if (!ok)
        return fail(ErrorCode::invalid_argument,
                    "a model name is letters, digits, '.', '_' or '-', with at most one ':tag'",
                    std::string(text));
    ModelRef ref;
    ref.kind = ModelRefKind::name;
    ref.name = std::string(text);
    return ref;
}

}  // namespace

std::string HubRef::to_string() const {
    if (!file.empty()) return repo + ":" + file;
    if (!quant.empty()) return repo + ":" + quant;
    return repo;
}

Result<ModelRef> parse_model_ref(std::string_view text) {
    if (text.empty()) return fail(ErrorCode::invalid_argument, "the model reference is empty");
    if (text.find('\0') != std::string_view::npos)
        return fail(ErrorCode::invalid_argument, "the model reference contains a NUL byte");
    // llama.cpp's and Ollama's spellings of the hub (Ollama's list shows "hf.co/owner/name").
    for (std::string_view scheme :
         {"hf://", "hf:", "hf.co/", "huggingface.co/", "https://huggingface.co/"}) {
        if (text.starts_with(scheme)) return parse_hub(text.substr(scheme.size()));
    }
    const bool path_like = text.front() == '/' || text.front() == '.' || text.front() == '~';
    if (path_like || (ends_with_gguf(text) && text.find(':') == std::string_view::npos)) {
        ModelRef ref;
        ref.kind = ModelRefKind::path;
        ref.path = std::filesystem::path(std::string(text));
        return ref;
    }
    if (text.find('/') != std::string_view::npos) return parse_hub(text);
    return parse_name(text);
}

bool hub_ref_names(const HubRef& asked, const HubRef& have, const std::filesystem::path& file) {
    if (detail::upper(asked.repo) != detail::upper(have.repo)) return false;
    const std::string path = file.generic_string();
    if (!asked.file.empty())
        return asked.file == have.file || (!path.empty() && path.ends_with("/" + asked.file));
    if (!asked.quant.empty())
        return detail::upper(asked.quant) == detail::upper(have.quant) ||
               (!path.empty() && detail::quant_of(path) == detail::upper(asked.quant));
    return have.file.empty() && have.quant.empty();
}

}  // namespace llamapp
