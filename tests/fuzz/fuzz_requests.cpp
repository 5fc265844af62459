// The protocols' request parsers over arbitrary bytes: the body's JSON, then the route's parser
// and validator. A bad request must be an HttpException (a 4xx), never a crash, a hang or another
// exception. The first byte picks the route; two more pick what comes before a route: a request's
// head (its limits, line ends and Content-Length) and a model name a client gives (an Ollama copy
// may only make a plain name, never a path or a hub reference).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "llamapp/model_ref.hpp"
#include "server/common/generation_request.hpp"
#include "server/http/connection.hpp"
#include "server/http/http_error.hpp"
#include "server/protocols/anthropic/anthropic.hpp"
#include "server/protocols/ollama/go_template.hpp"
#include "server/protocols/ollama/ollama.hpp"
#include "server/protocols/responses/response_store.hpp"
#include "server/protocols/responses/responses.hpp"

using namespace llamapp;
using namespace llamapp::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
    RequestLimits limits;
    limits.max_tokens = 512;
    limits.vocab_size = 32000;
    const RequestDefaults defaults;
    static ResponseStore stored({.max_responses = 4, .max_bytes = 1 << 16, .max_age = {}});
    if (data[0] % 8 == 6) {
        ConnectionLimits small;
        small.max_request_line = 64;
        small.max_header_line = 64;
        small.max_headers = 4;
        small.max_head_bytes = 256;
        for (const ConnectionLimits& l : {ConnectionLimits{}, small})
            if (scan_head(body, l) == HeadScan::complete) (void)announced_length(body);
        return 0;
    }
    if (data[0] % 8 == 7) {
        auto ref = parse_model_ref(body);
        if (ref && ref->kind == ModelRefKind::name &&
            (ref->name.find('/') != std::string::npos || ref->name.starts_with('.')))
            std::abort();  // a path or a hub reference taken for a plain name
        return 0;
    }
    try {
        if (data[0] % 8 == 5) {  // an Ollama template override, not JSON
            (void)render_go_template(body, "system text", "prompt text", "suffix text");
            return 0;
        }
        const nlohmann::json j = parse_body(body);
        switch (data[0] % 8) {
            case 0:
                (void)parse_chat(j, limits, defaults);
                break;
            case 1:
                (void)parse_completion(j, limits, defaults);
                break;
            case 2:
                (void)parse_messages(j, limits, defaults);
                break;
            case 3:
                (void)parse_responses(j, limits, defaults, stored);
                break;
            case 4:  // the Ollama fields read without a model (the rest becomes an OpenAI body)
                (void)ollama_keep_alive(j);
                break;
        }
    } catch (const HttpException&) {
        // a 4xx: what a bad request gets
    }
    return 0;
}
