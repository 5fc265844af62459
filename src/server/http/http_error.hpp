// Internal: errors as the HTTP layer carries them, and the one table that maps llamapp's codes to
// HTTP status.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "llamapp/error.hpp"

namespace llamapp::detail {

struct HttpError {
    int status = 400;
    std::string type = "invalid_request_error";
    std::string code;   // machine-readable, e.g. "invalid_value"
    std::string param;  // the request field at fault, if any
    std::string message;

    // OpenAI's shape, which llama-server's and llamapp's own routes share; a protocol with
    // another shape writes its own (Protocol::error_body).
    nlohmann::json body() const;
};

// Model output can hold partial UTF-8 (a log-prob's token piece): replaced, never thrown on.
inline std::string dump(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpError invalid(std::string param, std::string message, std::string code = "invalid_value");
// The one table from llamapp's ErrorCode to HTTP status and OpenAI error type. `param` names the
// request field at fault (default: the error's context); `code` a more specific wire code than
// the ErrorCode's name (e.g. "model_not_found" for not_found).
HttpError http_error(const Error& error, std::string param = {}, std::string code = {});
// What the HTTP layer refuses before a request reaches llamapp, where no ErrorCode applies: an
// unknown route, a body over the limit, bad framing, a missing API key.
HttpError protocol_error(int status, std::string code, std::string message);

// 503 shutting_down: the server drains and takes no new work.
HttpError draining_error();

// Thrown inside request handlers and turned into a response at the top; never escapes them.
struct HttpException {
    HttpError error;
};

}  // namespace llamapp::detail
