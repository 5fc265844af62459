// The commands that talk to a running `llamapp serve` (ps, stop, show) find it with serve's own
// flags and variables (LLAMA_ARG_HOST, LLAMA_ARG_PORT, LLAMA_API_KEY): a shell that started the
// server reaches it without repeating them.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>

#include "llamapp/error.hpp"

namespace llamapp::cli {

struct ServerAddress {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
};

void add_server_flags(CLI::App& cmd, ServerAddress& address);

// The server's JSON answer to GET `path`, or to POST `path` with `body`. Errors: io_error when
// no server answers; a refusal keeps the server's message, typed by its status (404 not_found,
// 401 unauthorized, 409 busy, 400
// invalid_argument, others io_error).
Result<nlohmann::json> ask_server(const ServerAddress& address, const std::string& path,
                                  const nlohmann::json* body = nullptr);

}  // namespace llamapp::cli
