// Convenience header: the whole public API.
#pragma once

#include "llamapp/backend.hpp"
#include "llamapp/cancellation.hpp"
#include "llamapp/chat.hpp"
#include "llamapp/context.hpp"
#include "llamapp/embedding.hpp"
#include "llamapp/error.hpp"
#include "llamapp/fingerprint.hpp"
#include "llamapp/generation.hpp"
#include "llamapp/grammar.hpp"
#include "llamapp/log.hpp"
#include "llamapp/metrics.hpp"
#include "llamapp/model.hpp"
#include "llamapp/sampling.hpp"
#include "llamapp/tokenizer.hpp"
