// How every generating route waits for its reply: whole, or streamed in the route's own format.
#include "server/common/server_state.hpp"

namespace llamapp::detail {

namespace {

// The provider's state; it lives as long as httplib keeps the provider.
struct ReplyStream {
    ReplyStream(ModelLease l, std::vector<RequestHandle> h, InFlight c,
                std::unique_ptr<StreamFormat> f)
        : lease(std::move(l)), handles(std::move(h)), counted(std::move(c)), format(std::move(f)) {}
    ReplyStream(const ReplyStream&) = delete;
    ReplyStream& operator=(const ReplyStream&) = delete;
    ~ReplyStream() {
        if (log_line) access_log(method, path, 200, bytes, id, fields);
    }

    ModelLease lease;                    // first: released after the handles
    std::vector<RequestHandle> handles;  // one per choice, streamed in order
    std::size_t current = 0;
    bool failed = false;  // a choice ended in an error: the stream ends with it
    InFlight counted;
    std::unique_ptr<StreamFormat> format;
    ClientWatch watch;
    // The access-log line, written when the stream ends however it ends.
    bool log_line = false;
    std::string method, path, id;
    std::size_t bytes = 0;
    std::string fields = "finish=disconnected";
};

}  // namespace

void ServerState::stream_reply(const httplib::Request& req, httplib::Response& res,
                               ModelLease lease, RequestHandle handle, InFlight counted,
                               const std::string& id, std::unique_ptr<StreamFormat> format,
                               std::vector<RequestHandle> more) const {
    more.insert(more.begin(), std::move(handle));
    auto s = std::make_shared<ReplyStream>(std::move(lease), std::move(more), std::move(counted),
                                           std::move(format));
    s->log_line = true;
    s->method = req.method;
    s->path = req.path;
    s->id = id;
    res.set_header("Cache-Control", "no-cache");
    const char* content_type = s->format->content_type();
    res.set_chunked_content_provider(content_type, [s](std::size_t, httplib::DataSink& sink) {
        EngineEvent event;
        RequestHandle& streaming = s->handles[s->current];
        if (!s->watch.next(streaming, event, [&] { return !sink.is_writable(); })) {
            if (++s->current == s->handles.size() || s->failed) sink.done();
            return true;
        }
        std::string out;
        if (event.prompt_progress()) {
            out = s->format->prompt_progress(*event.progress);
        } else if (!event.final()) {
            out = s->format->piece(event.piece, event.progress);
        } else {
            s->fields = log_fields(*event.completion);
            s->failed = event.completion->generation.error.has_value();
            out = s->format->last(*event.completion);
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
            for (RequestHandle& h : s->handles) h.cancel();  // the client went away
            return false;
        }
        s->bytes += out.size();
        return true;
    });
}

Completion ServerState::await_whole(const httplib::Request& req, RequestHandle& handle) {
    EngineEvent event;
    std::optional<Completion> done;
    ClientWatch watch;
    while (watch.next(handle, event, [&] { return req.is_connection_closed(); }))
        if (event.final()) done = std::move(event.completion);
    pending_log_fields() = log_fields(*done);
    if (done->generation.error) throw HttpException{http_error(*done->generation.error)};
    return std::move(*done);
}

}  // namespace llamapp::detail
