// The protocols' request parsers over arbitrary bytes: the body's JSON, then the route's parser
// and validator. A bad request must be an HttpException (a 4xx), never a crash, a hang or another
// exception. The first byte picks the route.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/common/generation_request.hpp"
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
    try {
        if (data[0] % 6 == 5) {  // an Ollama template override, not JSON
            (void)render_go_template(body, "system text", "prompt text", "suffix text");
            return 0;
        }
        const nlohmann::json j = parse_body(body);
        switch (data[0] % 6) {
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
