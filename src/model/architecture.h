#pragma once
// What differs between decoder architectures that tally runs, as data: the
// forward pass reads these properties instead of branching on names.
#include <string>
#include <string_view>

#include "kernels/ops.h"

namespace tally {

struct Architecture {
  std::string_view name;     // general.architecture, also the metadata key prefix
  RopePairing rope_pairing;  // llama: adjacent (rows permuted by the converter)
};

// Throws tally::Error naming the architecture and the supported ones.
const Architecture& architecture_for(std::string_view name);

}  // namespace tally
