// Internal: the protocols a server speaks, in the order their routes are registered.
#pragma once

#include <memory>
#include <vector>

#include "server/common/server_state.hpp"
#include "server/http/protocol.hpp"

namespace llamapp::detail {

std::vector<std::unique_ptr<Protocol>> make_protocols(ServerState& state);

}  // namespace llamapp::detail
