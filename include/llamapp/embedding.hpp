// Embedding options (the functions live on Context).
#pragma once

namespace llamapp {

enum class Normalization { l2, none };

struct EmbedOptions {
    Normalization normalize = Normalization::l2;
    bool add_special = true;
};

}  // namespace llamapp
