// The server's root. Ollama's clients probe it for "Ollama is running" (they send no
// Accept: text/html); a browser gets a page that says what this server is and where its APIs are.
#include <string_view>

#include "server/ops/operator_routes.hpp"

namespace llamapp::detail {

namespace {

bool wants_html(const httplib::Request& req) {
    return req.get_header_value("Accept").find("text/html") != std::string::npos;
}

constexpr std::string_view home_page = R"(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llamapp</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:44rem;margin:3rem auto;padding:0 1rem}
code{background:#f2f2f2;padding:0 .25rem}td{padding:.15rem 1rem .15rem 0}</style></head>
<body><h1>llamapp is running</h1>
<p>A local LLM server. Point any client of these APIs at this address:</p>
<table>
<tr><td>OpenAI</td><td><code>/v1/chat/completions</code>, <code>/v1/completions</code>,
<code>/v1/responses</code>, <code>/v1/embeddings</code></td></tr>
<tr><td>Anthropic</td><td><code>/v1/messages</code></td></tr>
<tr><td>Ollama</td><td><code>/api/chat</code>, <code>/api/generate</code>, <code>/api/tags</code></td></tr>
<tr><td>llama-server</td><td><code>/completion</code>, <code>/props</code>, <code>/slots</code></td></tr>
</table>
<p><a href="/v1/models">/v1/models</a> lists the models, <a href="/health">/health</a> says
whether the server is ready, <a href="/metrics">/metrics</a> has its Prometheus metrics.</p>
</body></html>
)";

}  // namespace

void OperatorRoutes::home(const httplib::Request& req, httplib::Response& res) const {
    if (wants_html(req))
        res.set_content(std::string(home_page), "text/html; charset=utf-8");
    else
        res.set_content("Ollama is running", "text/plain");
}

}  // namespace llamapp::detail
