// Internal: the wire format of a streamed reply, one per protocol's stream.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "llamapp/engine.hpp"
#include "server/http/http_error.hpp"

namespace llamapp::detail {

// One Server-Sent Event without a name.
inline std::string sse_data(const nlohmann::json& data) {
    return "data: " + dump(data) + "\n\n";
}

// The wire format of one streamed reply: what each engine event becomes on the connection.
// Used by one connection thread at a time.
class StreamFormat {
  public:
    virtual ~StreamFormat() = default;
    virtual const char* content_type() const { return "text/event-stream"; }
    // A piece of the reply; `so_far` is set when the request asked for progress.
    virtual std::string piece(const StreamPiece& piece, const std::optional<Progress>& so_far) = 0;
    // Progress while the prompt is computed (EngineRequest::report_progress).
    virtual std::string prompt_progress(const Progress&) { return {}; }
    // The final events, or the error that ended the generation.
    virtual std::string last(const Completion& done) = 0;
};

}  // namespace llamapp::detail
