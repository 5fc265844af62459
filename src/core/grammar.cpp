#include "llamapp/grammar.hpp"

#include <exception>
#include <optional>
#include <string>

#include "core/log_internal.hpp"
#include "json-schema-to-grammar.h"
#include "json.h"
#include "llama.h"
#include "llamapp/backend.hpp"

namespace llamapp {

namespace {

// llama.cpp's converter only warns about a "pattern" it cannot translate and then accepts any
// string. Constrained output must fail closed, so such schemas are rejected here.
std::optional<std::string> untranslatable_pattern(const common_json& node) {
    if (node.is_object()) {
        for (auto it = node.begin(); it != node.end(); ++it) {
            if (it.key() == "pattern" && it.value().is_string()) {
                const std::string p = it.value().get<std::string>();
                if (p.empty() || p.front() != '^' || p.back() != '$') return p;
            }
            if (auto bad = untranslatable_pattern(it.value())) return bad;
        }
    } else if (node.is_array()) {
        for (const auto& item : node) {
            if (auto bad = untranslatable_pattern(item)) return bad;
        }
    }
    return std::nullopt;
}

}  // namespace

Result<std::string> json_schema_to_gbnf(std::string_view schema_json) {
    ensure_backend();
    const std::string text(schema_json);
    common_json schema = common_json::parse_no_throw(text);
    if (schema.is_discarded()) {
        return fail(ErrorCode::invalid_json_schema, "JSON schema is not valid JSON", "json_schema");
    }
    if (!schema.is_object() && !schema.is_boolean()) {
        return fail(ErrorCode::invalid_json_schema, "JSON schema must be an object or a boolean",
                    "json_schema");
    }
    if (auto bad = untranslatable_pattern(schema)) {
        return fail(ErrorCode::invalid_json_schema,
                    "patterns must be anchored with ^ and $ to be enforced", "pattern=" + *bad);
    }
    try {
        std::string gbnf = json_schema_to_grammar(schema, /*force_gbnf=*/true);
        if (gbnf.empty()) {
            return fail(ErrorCode::invalid_json_schema, "JSON schema produced an empty grammar",
                        "json_schema");
        }
        return gbnf;
    } catch (const std::exception& e) {
        std::string what = e.what();
        while (!what.empty() && what.back() == '\n') what.pop_back();
        return fail(ErrorCode::invalid_json_schema, what, "json_schema");
    }
}

Result<void> validate_gbnf(std::string_view grammar) {
    ensure_backend();
    if (grammar.empty()) return fail(ErrorCode::invalid_grammar, "grammar is empty", "grammar");
    if (grammar.starts_with("%llguidance")) {
        // common_sampler aborts the process on this prefix when llguidance is not compiled in.
        return fail(ErrorCode::invalid_grammar, "llguidance grammars are not supported", "grammar");
    }
    const std::string text(grammar);
    detail::LogCapture capture;
    llama_sampler* sampler = nullptr;
    try {
        sampler = llama_sampler_init_grammar(nullptr, text.c_str(), "root");
    } catch (const std::exception& e) {
        return fail(ErrorCode::invalid_grammar, std::string("grammar does not parse: ") + e.what(),
                    "grammar");
    }
    if (!sampler) {
        std::string why = capture.errors();
        while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
        return fail(ErrorCode::invalid_grammar,
                    why.empty() ? "grammar does not parse" : "grammar does not parse: " + why,
                    "grammar");
    }
    llama_sampler_free(sampler);
    return {};
}

}  // namespace llamapp
