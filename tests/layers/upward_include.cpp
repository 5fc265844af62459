// Compiled by the layers.* tests with the engine layer's include path. The engine sits below the
// model manager, so the manager's internal header must not be found.
#include "manager/manager_state.hpp"
