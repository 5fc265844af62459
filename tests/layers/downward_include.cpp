// The control for upward_include.cpp: with the same flags, a header of a layer below the engine
// (core) and one of its own are found.
#include "core/sequence_memory.hpp"
#include "engine/scheduler.hpp"
