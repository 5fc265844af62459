// Adding a protocol: a folder under protocols/ with a Protocol, and one line here.
#include "server/protocols/registry.hpp"

#include "server/ops/operator_routes.hpp"
#include "server/protocols/anthropic/anthropic.hpp"
#include "server/protocols/native/native.hpp"
#include "server/protocols/ollama/ollama.hpp"
#include "server/protocols/openai/openai.hpp"
#include "server/protocols/responses/responses.hpp"
#include "server/protocols/vertex/vertex.hpp"

namespace llamapp::detail {

std::vector<std::unique_ptr<Protocol>> make_protocols(ServerState& state) {
    std::vector<std::unique_ptr<Protocol>> out;
    out.push_back(std::make_unique<OperatorRoutes>(state));
    out.push_back(std::make_unique<OpenAiProtocol>(state));
    out.push_back(std::make_unique<NativeProtocol>(state));
    out.push_back(std::make_unique<AnthropicProtocol>(state));
    out.push_back(std::make_unique<ResponsesProtocol>(state));
    out.push_back(std::make_unique<OllamaProtocol>(state));
    out.push_back(std::make_unique<VertexProtocol>(state));  // last: it dispatches to the others
    return out;
}

}  // namespace llamapp::detail
