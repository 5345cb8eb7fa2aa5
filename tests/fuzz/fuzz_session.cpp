// libFuzzer target for the saved-session reader (`--load-session`, chat's
// /load). Each input is read twice: as a whole file, and as a file without its
// checksum (the target appends the right one), so mutations of the header
// and the sizes reach the checks behind the checksum. Any input must give
// data whose sizes agree with its header, or a tally::Error whose message is
// one bounded line.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_checks.h"
#include "io/session_file.h"

namespace {

constexpr const char* kTarget = "fuzz_session";

[[noreturn]] void violated(const char* what, const std::string& detail) {
  tally_fuzz::violated(kTarget, what, detail);
}

void check(const uint8_t* data, size_t size) {
  try {
    const tally::SessionData d = tally::parse_session_file(data, size, "fuzz.tallykv");
    const tally::SessionHeader& h = d.header;
    if (d.tokens.size() != h.n_tokens) violated("token count", std::to_string(d.tokens.size()));
    if (d.kv.size() != 2ull * h.n_layer * h.n_tokens * h.vector_bytes()) violated("kv size", std::to_string(d.kv.size()));
    if (h.meta.size() > size) violated("meta larger than the file", std::to_string(h.meta.size()));
    if (h.n_tokens && h.n_layer) {  // the last vector is inside what was read
      volatile uint8_t last = d.v(h.n_layer - 1, h.n_tokens - 1)[h.vector_bytes() - 1];
      (void)last;
    }
  } catch (const tally::Error& e) {
    tally_fuzz::check_message(kTarget, e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(data, size);
  std::vector<uint8_t> sealed(data, data + size);
  const uint64_t sum = tally::fnv1a64(data, size);
  sealed.resize(size + 8);
  std::memcpy(sealed.data() + size, &sum, 8);
  check(sealed.data(), sealed.size());
  return 0;
}
