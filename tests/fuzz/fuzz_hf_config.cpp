// libFuzzer target for the Hugging Face config.json reader behind
// `kv-plan --config`: any text must give a shape or a tally::Error whose
// message is one bounded line (never the whole value, however large or deep),
// and a shape it gives must plan without overflow or throw tally::Error.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "fuzz_checks.h"
#include "sizing/hf_config.h"
#include "sizing/kv_plan.h"

namespace {

constexpr const char* kTarget = "fuzz_hf_config";

[[noreturn]] void violated(const char* what, const std::string& detail) {
  tally_fuzz::violated(kTarget, what, detail);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool want_weights : {false, true}) {
    try {
      const tally::ModelShape s = tally::shape_from_hf_config_text(text, "fuzz.json", want_weights);
      if (s.n_layer <= 0 || s.n_head <= 0 || s.n_kv_head <= 0 || s.head_dim <= 0 || s.n_head % s.n_kv_head != 0)
        violated("shape invariant", text);
      if (want_weights && (!s.parameters || !s.weights_bytes)) violated("weights missing", text);
      tally::KvPlanRequest r;
      r.shape = s.kv();
      r.n_head = s.n_head;
      r.contexts = {1, 4096, uint64_t{1} << 40};
      r.weights_bytes = s.weights_bytes;
      r.budget_bytes = UINT64_MAX;
      try {
        const auto plans = tally::plan_kv(r);
        if (plans.size() != 3) violated("three layouts", text);
      } catch (const tally::Error& e) {
        tally_fuzz::check_message(kTarget, e);
      }
    } catch (const tally::Error& e) {
      tally_fuzz::check_message(kTarget, e);
      if (!want_weights) break;  // the shape alone failed: counting weights fails the same way
    }
  }
  return 0;
}
