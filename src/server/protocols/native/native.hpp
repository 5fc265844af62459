// Internal: llama-server's own API: /completion and /infill, /tokenize and /detokenize,
// /apply-template, /props, /slots (and their save, restore and erase actions), /embedding and
// /rerank. Its errors take OpenAI's shape, as llama-server's do.
#pragma once

#include "server/common/server_state.hpp"
#include "server/http/protocol.hpp"

namespace llamapp::detail {

class NativeProtocol final : public Protocol {
  public:
    explicit NativeProtocol(ServerState& state) : state_(state) {}
    std::string_view name() const override { return "llama-server"; }
    void register_routes(Routes& routes) override;

  private:
    // /completion; `infill`: /infill, whose prompt is laid out around a gap in code.
    void completion(const httplib::Request& req, httplib::Response& res, bool infill);
    void tokenize(const httplib::Request& req, httplib::Response& res) const;
    void detokenize(const httplib::Request& req, httplib::Response& res) const;
    void apply_template(const httplib::Request& req, httplib::Response& res) const;
    void count_chat_tokens(const httplib::Request& req, httplib::Response& res) const;
    void props(const httplib::Request& req, httplib::Response& res) const;
    void slots(const httplib::Request& req, httplib::Response& res) const;
    // POST /slots/{id}?action= (slot_routes.cpp).
    void slot_action(const httplib::Request& req, httplib::Response& res) const;
    void embedding(const httplib::Request& req, httplib::Response& res);
    // /rerank and its aliases: documents scored against a query by a reranker (rerank.cpp).
    void rerank(const httplib::Request& req, httplib::Response& res);

    ServerState& state_;
};

}  // namespace llamapp::detail
