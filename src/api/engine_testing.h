// Test access to the Engine's internals (not part of the public API).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "models/causal_lm.h"
#include "tessera/engine.h"

namespace tessera {

struct EngineTestAccess {
  using WrapModel =
      std::function<std::unique_ptr<models::CausalLm>(std::unique_ptr<models::CausalLm>)>;
  // Engine::load, with the loaded model then replaced by wrap(model): e.g. a model that records
  // its calls or runs them later. The KV cache stays the one the loaded model made.
  static Expected<std::unique_ptr<Engine>> load_wrapped(const std::string& path,
                                                        const EngineOptions& opt,
                                                        const WrapModel& wrap);
};

}  // namespace tessera
