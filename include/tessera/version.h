// Library version and build description.
#pragma once

namespace tessera {

const char* version();
// e.g. "tessera 0.1.0 (cpu: avx2 fma f16c, cuda: yes)"
const char* build_description();

}  // namespace tessera
