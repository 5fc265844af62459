// Internal: Ollama's prompt templates (Go's text/template syntax) for /api/generate's `template`.
#pragma once

#include <string>

namespace llamapp::detail {

// A template with .System, .Prompt, .Suffix and .Response, and if/else/end around them; text
// after .Response is cut, since the reply goes there. Throws HttpException (400, param
// "template") for anything else.
std::string render_go_template(const std::string& tmpl, const std::string& system,
                               const std::string& prompt, const std::string& suffix);

}  // namespace llamapp::detail
