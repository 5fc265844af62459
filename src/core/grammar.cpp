#include "llamapp/grammar.hpp"

#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "core/grammar_internal.hpp"
#include "core/log_internal.hpp"
#include "json-schema-to-grammar.h"
#include "json.h"
#include "llama.h"
#include "llamapp/backend.hpp"

namespace llamapp {

namespace {

// Deeper nesting than this is refused before llama.cpp's recursive parsers see it (they have
// no depth limit and would overflow the stack).
constexpr int max_schema_depth = 64;
constexpr int max_grammar_depth = 256;

struct SchemaScan {
    std::vector<std::string> patterns;
    bool too_deep = false;
};

void scan_schema(const common_json& node, int depth, SchemaScan& scan) {
    if (depth > max_schema_depth) {
        scan.too_deep = true;
        return;
    }
    if (node.is_object()) {
        for (auto it = node.begin(); it != node.end(); ++it) {
            if (it.key() == "pattern" && it.value().is_string()) {
                scan.patterns.push_back(it.value().get<std::string>());
            }
            scan_schema(it.value(), depth + 1, scan);
        }
    } else if (node.is_array()) {
        for (const auto& item : node) scan_schema(item, depth + 1, scan);
    }
}

std::string string_grammar(const std::string& pattern) {
    common_json schema = common_json::parse("{\"type\":\"string\"}");
    if (!pattern.empty()) schema["pattern"] = pattern;
    return json_schema_to_grammar(schema, /*force_gbnf=*/true);
}

// llama.cpp's converter only warns about a "pattern" it cannot translate and then accepts any
// string. Constrained output must fail closed: a pattern whose grammar is the unconstrained
// string grammar is rejected.
std::optional<std::string> untranslatable_pattern(const std::vector<std::string>& patterns) {
    if (patterns.empty()) return std::nullopt;
    const std::string any_string = string_grammar("");
    for (const auto& p : patterns) {
        if (p.empty() || p.front() != '^' || p.back() != '$') return p;
        if (string_grammar(p) == any_string) return p;
    }
    return std::nullopt;
}

// Calls `visit` for every character of a GBNF grammar that is outside string literals,
// character classes and comments.
template <typename Visit>
void scan_gbnf(std::string_view g, Visit visit) {
    for (std::size_t i = 0; i < g.size(); ++i) {
        const char c = g[i];
        if (c == '"' || c == '[') {
            const char close = c == '"' ? '"' : ']';
            for (++i; i < g.size() && g[i] != close; ++i) {
                if (g[i] == '\\') ++i;
            }
        } else if (c == '#') {
            while (i < g.size() && g[i] != '\n') ++i;
        } else {
            visit(g, i);
        }
    }
}

int grammar_nesting(std::string_view g) {
    int depth = 0, deepest = 0;
    scan_gbnf(g, [&](std::string_view text, std::size_t i) {
        if (text[i] == '(') deepest = std::max(deepest, ++depth);
        if (text[i] == ')') --depth;
    });
    return deepest;
}

// The first repetition `{m,n}` whose upper bound is below its lower one (or that holds a
// comment). llama.cpp's parser
// counts the optional copies as n - m in an unsigned type and loops for ever on it, growing its
// rules (found by tests/fuzz/fuzz_grammar).
std::optional<std::string> inverted_repetition(std::string_view g) {
    std::optional<std::string> found;
    scan_gbnf(g, [&](std::string_view text, std::size_t i) {
        if (found || text[i] != '{') return;
        const std::size_t close = text.find('}', i);
        if (close == std::string_view::npos) return;
        // llama.cpp's parser skips blanks (and comments) between the numbers.
        std::string inside;
        for (const char c : text.substr(i + 1, close - i - 1))
            if (c != ' ' && c != '\t' && c != '\r' && c != '\n') inside += c;
        if (inside.find('#') != std::string::npos) {
            found = std::string(text.substr(i, close - i + 1));  // not worth parsing: refused
            return;
        }
        const std::size_t comma = inside.find(',');
        if (comma == std::string_view::npos || comma + 1 == inside.size()) return;
        const auto number = [](std::string_view digits) {
            long long v = 0;
            for (const char c : digits) {
                if (c < '0' || c > '9' || v > 1'000'000'000) return -1LL;
                v = v * 10 + (c - '0');
            }
            return digits.empty() ? -1LL : v;
        };
        const long long lo = number(std::string_view(inside).substr(0, comma));
        const long long hi = number(std::string_view(inside).substr(comma + 1));
        if (lo >= 0 && hi >= 0 && hi < lo) found = std::string(text.substr(i, close - i + 1));
    });
    return found;
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
    SchemaScan scan;
    scan_schema(schema, 0, scan);
    if (scan.too_deep) {
        return fail(ErrorCode::invalid_json_schema, "JSON schema nests too deeply",
                    "limit=" + std::to_string(max_schema_depth));
    }
    try {
        if (auto bad = untranslatable_pattern(scan.patterns)) {
            return fail(ErrorCode::invalid_json_schema,
                        "pattern cannot be enforced by a grammar (it must be anchored with ^ and $ "
                        "and use only the regex features llama.cpp's converter supports)",
                        "pattern=" + *bad);
        }
        std::string gbnf = json_schema_to_grammar(schema, /*force_gbnf=*/true);
        if (gbnf.empty()) {
            return fail(ErrorCode::invalid_json_schema, "JSON schema produced an empty grammar",
                        "json_schema");
        }
        // The converter copies some patterns through unchecked (an empty class "[]"); what it
        // makes must parse, or the schema is refused here rather than when a sampler is built
        // (found by tests/fuzz/fuzz_grammar).
        if (auto ok = validate_gbnf(gbnf); !ok) {
            return fail(ErrorCode::invalid_json_schema,
                        "JSON schema cannot be made a grammar: " + ok.error().message,
                        "json_schema");
        }
        return gbnf;
    } catch (const std::exception& e) {
        std::string what = e.what();
        while (!what.empty() && what.back() == '\n') what.pop_back();
        return fail(ErrorCode::invalid_json_schema, what, "json_schema");
    }
}

namespace detail {

std::vector<long long> gbnf_token_references(std::string_view grammar) {
    std::vector<long long> ids;
    scan_gbnf(grammar, [&](std::string_view g, std::size_t i) {
        // Token references look like <[123]> (and !<[123]> for negation).
        if (g.compare(i, 2, "<[") != 0) return;
        long long id = 0;
        std::size_t k = i + 2;
        bool digits = false;
        for (; k < g.size() && g[k] >= '0' && g[k] <= '9' && id < (1ll << 40); ++k, digits = true) {
            id = id * 10 + (g[k] - '0');
        }
        if (digits) ids.push_back(id);
    });
    return ids;
}

}  // namespace detail

Result<void> validate_gbnf(std::string_view grammar) {
    ensure_backend();
    if (grammar.empty()) return fail(ErrorCode::invalid_grammar, "grammar is empty", "grammar");
    if (grammar_nesting(grammar) > max_grammar_depth) {
        return fail(ErrorCode::invalid_grammar, "grammar nests too deeply",
                    "limit=" + std::to_string(max_grammar_depth));
    }
    if (auto bad = inverted_repetition(grammar)) {
        return fail(ErrorCode::invalid_grammar,
                    "a repetition's upper bound is below its lower bound: " + *bad, "grammar");
    }
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
