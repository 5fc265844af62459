// A models directory: one model per GGUF file, and one per subdirectory holding a model.
#include <algorithm>
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

Result<std::chrono::milliseconds> parse_keep_alive(std::string_view text) {
    const std::string s(text);
    static const std::regex re(R"((-?\d+(?:\.\d+)?)(ms|s|m|h)?)");
    std::smatch m;
    if (!std::regex_match(s, m, re))
        return fail(ErrorCode::invalid_argument,
                    "a keep-alive is seconds or a number with ms, s, m or h (negative: forever)",
                    s);
    const double value = std::stod(m[1].str());
    if (value < 0) return std::chrono::milliseconds{-1};
    const std::string unit = m[2].str();
    const double ms = unit == "ms" ? 1 : unit == "m" ? 60e3 : unit == "h" ? 3600e3 : 1e3;
    if (value * ms > 1e13) return fail(ErrorCode::invalid_argument, "too long a keep-alive", s);
    return std::chrono::milliseconds(static_cast<long long>(value * ms));
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
