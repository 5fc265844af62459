#include "server/http/http_error.hpp"

namespace llamapp::detail {

nlohmann::json HttpError::body() const {
    nlohmann::json e = {{"message", message}, {"type", type}};
    e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
    e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
    return {{"error", e}};
}

HttpError draining_error() {
    return http_error(Error{ErrorCode::shutting_down, "the server is shutting down", {}}, "",
                      "draining");
}

HttpError invalid(std::string param, std::string message, std::string code) {
    return {400, "invalid_request_error", std::move(code), std::move(param), std::move(message)};
}

HttpError protocol_error(int status, std::string code, std::string message) {
    const char* type = status == 401   ? "authentication_error"
                       : status == 404 ? "not_found_error"
                                       : "invalid_request_error";
    return {status, type, std::move(code), "", std::move(message)};
}

HttpError http_error(const Error& error, std::string param, std::string code) {
    HttpError h;
    h.message = error.describe();
    h.param = param.empty() ? error.context : std::move(param);
    h.code = std::string(to_string(error.code));
    switch (error.code) {
        case ErrorCode::invalid_argument:
        case ErrorCode::invalid_grammar:
        case ErrorCode::invalid_json_schema:
        case ErrorCode::template_error:
        case ErrorCode::unsupported_operation:
            h.status = 400;
            break;
        // 400 as OpenAI and llama-server answer it: OpenAI's code, llama-server's type.
        case ErrorCode::context_overflow:
            h.status = 400;
            h.type = "exceed_context_size_error";
            h.code = "context_length_exceeded";
            break;
        case ErrorCode::not_found:
        case ErrorCode::file_not_found:
            h.status = 404;
            h.type = "not_found_error";
            break;
        case ErrorCode::already_exists:
        case ErrorCode::busy:
            h.status = 409;
            break;
        case ErrorCode::queue_full:
            h.status = 429;
            h.type = "rate_limit_error";
            break;
        case ErrorCode::shutting_down:
        case ErrorCode::insufficient_memory:
        case ErrorCode::model_unavailable:
        case ErrorCode::device_lost:
            h.status = 503;
            h.type = "server_error";
            break;
        // The hub's answers: a fault upstream, never the client's own credentials.
        case ErrorCode::unauthorized:
        case ErrorCode::network_error:
        case ErrorCode::checksum_mismatch:
            h.status = 502;
            h.type = "server_error";
            break;
        case ErrorCode::rate_limited:
            h.status = 503;
            h.type = "server_error";
            break;
        case ErrorCode::timeout:
            h.status = 504;
            h.type = "timeout_error";
            break;
        case ErrorCode::cancelled:
            h.status = 499;  // the client went away; nobody reads this
            break;
        default:
            h.status = 500;
            h.type = "server_error";
            h.param.clear();
            break;
    }
    if (!code.empty()) h.code = std::move(code);
    return h;
}

}  // namespace llamapp::detail
