// What `llamapp run` prints about a finished request, in its one-shot and chat modes.
#pragma once

#include <nlohmann/json.hpp>

#include "llamapp/llamapp.hpp"

namespace llamapp::cli {

// The text, tokens, usage, timings and cache use of a request, for --json.
nlohmann::json completion_json(const Completion& done);

// One line on stderr after the output: tokens, where the prompt's KV came from, speeds.
void print_summary(const Completion& done);

}  // namespace llamapp::cli
