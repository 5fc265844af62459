// Internal GBNF inspection shared by grammar validation and the sampler.
#pragma once

#include <string_view>
#include <vector>

namespace llamapp::detail {

// Token ids referenced as <[id]> outside literals, to be range-checked against a vocabulary.
std::vector<long long> gbnf_token_references(std::string_view grammar);

}  // namespace llamapp::detail
