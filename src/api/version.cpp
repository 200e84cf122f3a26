#include "tessera/version.h"

#include <string>

#include "backend/cpu/cpu_features.h"

namespace tessera {

const char* version() { return "0.1.0"; }

const char* build_description() {
  static const std::string s = std::string("tessera ") + version() + " (cpu: " +
                               cpu_features_string() + ", cuda: " +
#ifdef TESSERA_HAVE_CUDA
                               "yes"
#else
                               "no"
#endif
                               + ")";
  return s.c_str();
}

}  // namespace tessera
