// The subset of Go's text/template that Ollama's prompt templates use around one prompt.
#include "server/protocols/ollama/go_template.hpp"

#include <fmt/core.h>

#include <vector>

#include "server/common/generation_request.hpp"

namespace llamapp::detail {

namespace {

std::string trimmed(std::string_view s) {
    const auto first = s.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return {};
    return std::string(s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1));
}

}  // namespace

std::string render_go_template(const std::string& tmpl, const std::string& system,
                               const std::string& prompt, const std::string& suffix) {
    auto value = [&](const std::string& field) -> const std::string* {
        if (field == ".System") return &system;
        if (field == ".Prompt") return &prompt;
        if (field == ".Suffix") return &suffix;
        return nullptr;
    };
    struct Branch {
        bool outer;  // whether the enclosing text is written
        bool taken;  // the if's condition
    };
    std::vector<Branch> open;
    bool writing = true;
    std::string out;
    std::size_t pos = 0;
    while (pos < tmpl.size()) {
        const std::size_t start = tmpl.find("{{", pos);
        std::string text = tmpl.substr(pos, start == std::string::npos ? start : start - pos);
        if (start == std::string::npos) {
            if (writing) out += text;
            break;
        }
        const std::size_t end = tmpl.find("}}", start);
        if (end == std::string::npos) reject_field("template", "an action is not closed by }}");
        std::string action = tmpl.substr(start + 2, end - start - 2);
        pos = end + 2;
        // {{- and -}} trim the white space of the template text beside the action, as Go's
        // templates do (never of a value filled in).
        if (action.starts_with("-")) {
            action.erase(0, 1);
            text.erase(text.find_last_not_of(" \t\r\n") + 1);
        }
        if (writing) out += text;
        if (action.ends_with("-")) {
            action.pop_back();
            pos = std::min(tmpl.size(), tmpl.find_first_not_of(" \t\r\n", pos));
        }
        action = trimmed(action);
        if (const std::string* v = value(action)) {
            if (writing) out += *v;
        } else if (action == ".Response") {
            if (writing) return out;  // the reply is what comes here
        } else if (action.starts_with("if ") && value(trimmed(action.substr(3)))) {
            const bool taken = !value(trimmed(action.substr(3)))->empty();
            open.push_back({writing, taken});
            writing = writing && taken;
        } else if (action == "else" && !open.empty()) {
            writing = open.back().outer && !open.back().taken;
        } else if (action == "end" && !open.empty()) {
            writing = open.back().outer;
            open.pop_back();
        } else {
            reject_field("template",
                         fmt::format("'{{{{{}}}}}' is not supported: a template override may use "
                                     ".System, .Prompt, .Suffix, .Response and if/else/end",
                                     tmpl.substr(start + 2, end - start - 2)));
        }
    }
    if (!open.empty()) reject_field("template", "an {{ if }} has no {{ end }}");
    return out;
}

}  // namespace llamapp::detail
