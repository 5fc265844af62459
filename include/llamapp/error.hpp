// Errors: every fallible call in llamapp returns Result<T>; no exception crosses the public API.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace llamapp {

// Stable codes: their numeric values and names never change meaning once released.
enum class ErrorCode {
    invalid_argument = 1,  // an option or input value is out of range or malformed
    file_not_found,        // path does not exist
    is_directory,          // path names a directory where a file was expected
    invalid_model_file,    // not a GGUF file, or truncated / corrupt
    unsupported_model,     // a valid GGUF that llamapp cannot run (encoder-decoder, diffusion, ...)
    out_of_memory,         // allocation of weights, KV cache or compute buffers failed
    load_cancelled,        // the progress callback asked to stop loading
    context_overflow,      // prompt plus generation does not fit the context window
    invalid_grammar,       // GBNF grammar does not parse
    invalid_json_schema,   // JSON schema is malformed or cannot be converted
    template_error,        // chat template failed to parse or render
    decode_failed,         // llama_decode reported a failure
    cancelled,             // a cancellation token stopped the work
    timeout,               // a deadline or per-decode time budget expired
    io_error,              // reading or writing a file failed
    unsupported_operation,  // the operation is not valid for this model / context configuration
    internal,               // a bug: an invariant llamapp relies on did not hold
    queue_full,             // the engine's request queue is at its bound; retry later
    not_found,              // a named thing (session, request) does not exist
    already_exists,         // a named thing (session) exists already
    busy,                   // the target is in use (a session with a request in flight)
    shutting_down,          // the engine is stopping and accepts no more work
    insufficient_memory,    // a model would not fit the memory budget of a device
    model_unavailable,      // the model failed to load, or is being unloaded for good
    unauthorized,           // a remote service (the model hub) refused the credentials
    rate_limited,           // a remote service asked to retry later (context: seconds to wait)
    network_error,          // a remote service could not be reached or broke off
    checksum_mismatch,      // downloaded bytes differ from the digest the source published
    device_lost,            // a device the model is placed on (an RPC server) went away
};

// Stable snake_case name of a code, e.g. "file_not_found".
std::string_view to_string(ErrorCode code);

struct Error {
    ErrorCode code = ErrorCode::internal;
    std::string message;  // one human-readable sentence
    std::string context;  // what it is about: an option name, a path, a limit

    // "message (context)", or just the message when there is no context.
    std::string describe() const;
};

template <typename T>
using Result = std::expected<T, Error>;

// Shorthand to build the error side of a Result.
inline std::unexpected<Error> fail(ErrorCode code, std::string message, std::string context = {}) {
    return std::unexpected(Error{code, std::move(message), std::move(context)});
}

}  // namespace llamapp
