// A models directory: one model per GGUF file, and one per subdirectory holding a model.
#include <algorithm>
#include <charconv>
#include <regex>

#include "llamapp/model_manager.hpp"

namespace llamapp {

namespace fs = std::filesystem;

namespace {

// "name-00001-of-00003.gguf": a part of a split set (llama.cpp's gguf-split naming).
const std::regex& split_part() {
    static const std::regex re(R"((.+)-(\d{5})-of-(\d{5})\.gguf)", std::regex::icase);
    return re;
}

bool is_gguf(const fs::path& p) {
    std::string ext = p.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    return ext == ".gguf";
}

bool is_projector(const fs::path& p) {
    return p.filename().string().rfind("mmproj", 0) == 0;
}

// An id requests can use: characters outside the allowed set become '-'.
std::string id_from(std::string name) {
    for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
            c = '-';
    return name.substr(0, 128);
}

// The model files of a folder: whole GGUFs and the first part of each split set. A set whose
// first part is missing is named by that missing part, so that it is listed as failed.
std::vector<std::pair<std::string, fs::path>> models_in(const fs::path& dir) {
    std::vector<std::pair<std::string, fs::path>> out;
    std::error_code ec;
    for (const auto& item : fs::directory_iterator(dir, ec)) {
        const fs::path& p = item.path();
        if (!item.is_regular_file(ec) || !is_gguf(p) || is_projector(p)) continue;
        const std::string file = p.filename().string();
        std::smatch m;
        if (!std::regex_match(file, m, split_part())) {
            out.emplace_back(p.stem().string(), p);
            continue;
        }
        const fs::path first = dir / (m[1].str() + "-00001-of-" + m[3].str() + ".gguf");
        if (m[2].str() == "00001" || !fs::exists(first, ec)) {
            if (std::none_of(out.begin(), out.end(),
                             [&](const auto& e) { return e.second == first; }))
                out.emplace_back(m[1].str(), first);
        }
    }
    return out;
}

}  // namespace

// Go's duration syntax, as Ollama reads it: a sign, then numbers each with a unit ("1h30m",
// "0.5s", "250ms"); a bare number is seconds. Read by hand, without a regex: text comes from
// clients, and a regex over a long digit run recurses once per digit.
Result<std::chrono::milliseconds> parse_keep_alive(std::string_view text) {
    const std::string s(text.substr(0, 64));
    auto bad = [&] {
        return fail(ErrorCode::invalid_argument,
                    "a keep-alive is seconds, or numbers with units ns, us, ms, s, m or h "
                    "(\"5m\", \"1h30m\"); negative: forever",
                    s);
    };
    if (text.empty() || text.size() > 32) return bad();
    static constexpr std::pair<std::string_view, double> units[] = {
        {"ns", 1e-6}, {"us", 1e-3}, {"\u00b5s", 1e-3}, {"ms", 1},
        {"s", 1e3},   {"m", 60e3},  {"h", 3600e3}};
    std::string_view rest = text;
    const bool negative = rest.front() == '-';
    if (negative || rest.front() == '+') rest.remove_prefix(1);
    double total_ms = 0;
    bool bare = false;  // a number without a unit: seconds, and nothing may follow
    while (!rest.empty() && !bare) {
        double value = 0;
        const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value,
                                               std::chars_format::fixed);
        if (ec != std::errc{} || !(value >= 0)) return bad();
        rest.remove_prefix(static_cast<std::size_t>(end - rest.data()));
        double unit_ms = 1e3;
        bare = true;
        for (const auto& [name, ms] : units)
            if (rest.starts_with(name) && !(name == "m" && rest.starts_with("ms"))) {
                unit_ms = ms;
                rest.remove_prefix(name.size());
                bare = false;
                break;
            }
        if (bare && total_ms > 0) return bad();  // "1h30" is not a duration
        total_ms += value * unit_ms;
    }
    if (!rest.empty()) return bad();
    if (negative) return std::chrono::milliseconds{-1};
    if (total_ms > 1e13) return fail(ErrorCode::invalid_argument, "too long a keep-alive", s);
    return std::chrono::milliseconds(static_cast<long long>(total_ms));
}

Result<std::vector<ModelSpec>> scan_models_dir(const fs::path& dir, const ModelSpec& defaults) {
    std::error_code ec;
    if (!fs::exists(dir, ec)) return fail(ErrorCode::file_not_found, "no such directory", dir);
    if (!fs::is_directory(dir, ec))
        return fail(ErrorCode::invalid_argument, "not a directory", dir.string());
    std::vector<ModelSpec> specs;
    auto add = [&](std::string id, fs::path path) {
        ModelSpec s = defaults;
        s.id = id_from(std::move(id));
        s.path = std::move(path);
        s.source = "models-dir";
        specs.push_back(std::move(s));
    };
    for (auto& [name, path] : models_in(dir)) add(name, path);
    for (const auto& item : fs::directory_iterator(dir, ec)) {
        if (!item.is_directory(ec)) continue;
        auto inside = models_in(item.path());
        if (inside.size() == 1) add(item.path().filename().string(), inside.front().second);
    }
    if (ec) return fail(ErrorCode::io_error, "cannot read the directory: " + ec.message(), dir);
    std::sort(specs.begin(), specs.end(),
              [](const ModelSpec& a, const ModelSpec& b) { return a.id < b.id; });
    return specs;
}

}  // namespace llamapp
