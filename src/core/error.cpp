#include "llamapp/error.hpp"

namespace llamapp {

std::string_view to_string(ErrorCode code) {
    switch (code) {
        case ErrorCode::invalid_argument:
            return "invalid_argument";
        case ErrorCode::file_not_found:
            return "file_not_found";
        case ErrorCode::is_directory:
            return "is_directory";
        case ErrorCode::invalid_model_file:
            return "invalid_model_file";
        case ErrorCode::unsupported_model:
            return "unsupported_model";
        case ErrorCode::out_of_memory:
            return "out_of_memory";
        case ErrorCode::load_cancelled:
            return "load_cancelled";
        case ErrorCode::context_overflow:
            return "context_overflow";
        case ErrorCode::invalid_grammar:
            return "invalid_grammar";
        case ErrorCode::invalid_json_schema:
            return "invalid_json_schema";
        case ErrorCode::template_error:
            return "template_error";
        case ErrorCode::decode_failed:
            return "decode_failed";
        case ErrorCode::cancelled:
            return "cancelled";
        case ErrorCode::timeout:
            return "timeout";
        case ErrorCode::io_error:
            return "io_error";
        case ErrorCode::unsupported_operation:
            return "unsupported_operation";
        case ErrorCode::internal:
            return "internal";
        case ErrorCode::queue_full:
            return "queue_full";
        case ErrorCode::not_found:
            return "not_found";
        case ErrorCode::already_exists:
            return "already_exists";
        case ErrorCode::busy:
            return "busy";
        case ErrorCode::shutting_down:
            return "shutting_down";
        case ErrorCode::insufficient_memory:
            return "insufficient_memory";
        case ErrorCode::model_unavailable:
            return "model_unavailable";
        case ErrorCode::unauthorized:
            return "unauthorized";
        case ErrorCode::rate_limited:
            return "rate_limited";
        case ErrorCode::network_error:
            return "network_error";
        case ErrorCode::checksum_mismatch:
            return "checksum_mismatch";
        case ErrorCode::device_lost:
            return "device_lost";
    }
    return "unknown";
}

std::string Error::describe() const {
    if (context.empty()) return message;
    return message + " (" + context + ")";
}

}  // namespace llamapp
