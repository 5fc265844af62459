// Structured output helpers: JSON Schema and GBNF grammars.
#pragma once

#include <string>
#include <string_view>

#include "llamapp/error.hpp"

namespace llamapp {

// Converts a JSON Schema (as JSON text) to a GBNF grammar with llama.cpp's converter.
// Errors: invalid_json_schema for malformed JSON or a schema the converter rejects.
[[nodiscard]] Result<std::string> json_schema_to_gbnf(std::string_view schema_json);

// Parses a GBNF grammar (root rule "root") without a model. Errors: invalid_grammar.
[[nodiscard]] Result<void> validate_gbnf(std::string_view grammar);

}  // namespace llamapp
