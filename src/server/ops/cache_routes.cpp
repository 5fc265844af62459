// The KV store's operations for operators: GET /cache (what each tier holds), POST /cache/clear
// and POST /cache/prune. Behind the API key like every route but health.
#include "server/ops/operator_routes.hpp"

namespace llamapp::detail {

using json = nlohmann::json;

namespace {

json stats_json(const KvStoreStats& s) {
    json tiers = json::array();
    for (const KvTierStats& t : s.tiers) {
        tiers.push_back({{"name", t.name},
                         {"entries", t.entries},
                         {"bytes", t.bytes},
                         {"capacity_bytes", t.capacity},
                         {"hits", t.hits},
                         {"saves", t.saves},
                         {"evictions", t.evictions},
                         {"corrupt_files", t.corrupt_files}});
    }
    return {{"tiers", std::move(tiers)},
            {"misses", s.misses},
            {"dropped_saves", s.dropped_saves},
            {"restore_failures", s.restore_failures},
            {"pending_saves", s.pending_saves}};
}

}  // namespace

void OperatorRoutes::add_cache_routes(Routes& routes) {
    ProtocolRoutes on(routes, *this);
    auto with_store = [this](auto&& act) {
        return [this, act](const httplib::Request& req, httplib::Response& res) {
            if (!state_.store) {
                throw HttpException{http_error(
                    Error{ErrorCode::not_found,
                          "this server runs without a KV store (--cache-ram 0 and no --cache-disk)",
                          {}},
                    "", "no_cache")};
            }
            res.set_content(dump(act(req)), "application/json");
        };
    };
    on.get("/cache", with_store([this](const httplib::Request&) {
               return stats_json(state_.store->stats());
           }));
    on.post("/cache/clear", with_store([this](const httplib::Request&) {
                return json{{"removed", state_.store->clear()}};
            }));
    on.post("/cache/prune", with_store([this](const httplib::Request& req) {
                const json body = parse_body(req.body);
                const json* v = optional_field(body, "unused_for_seconds");
                if (!v)
                    throw HttpException{invalid("unused_for_seconds",
                                                "'unused_for_seconds' is required",
                                                "missing_required_parameter")};
                if (!v->is_number_unsigned())
                    throw HttpException{invalid("unused_for_seconds",
                                                "'unused_for_seconds' must be an integer >= 0")};
                // Beyond a million years prunes nothing either way.
                const auto seconds = std::min<std::uint64_t>(v->get<std::uint64_t>(), 1ull << 45);
                return json{{"removed", state_.store->prune(std::chrono::seconds{seconds})}};
            }));
}

}  // namespace llamapp::detail
