// Internal: the access log, one structured line per request.
#pragma once

#include <cstddef>
#include <string>

namespace llamapp::detail {

// A generation adds its fields (finish, tokens, timings) through pending_log_fields(); a
// streamed reply, whose body goes out after httplib's logger has run, writes its own line when
// the stream ends.
void access_log(const std::string& method, const std::string& path, int status, std::size_t bytes,
                const std::string& id, const std::string& fields);
// Fields a non-streamed generation leaves for the access-log line of the request this thread
// is answering (httplib runs a request's handler and its logger on one thread).
std::string& pending_log_fields();

}  // namespace llamapp::detail
