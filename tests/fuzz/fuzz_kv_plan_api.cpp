// libFuzzer target for the body of POST /v1/kv-plan (server/kv_plan_api.cpp),
// parsed as the server parses it: any bytes must give a plan or an ApiError
// with status 400 and a bounded one-line message; no other exception (the
// server would answer 500), and a plan has the three layouts, each sized for
// every context asked. Planned against a shape without a window and one with
// (the sliding-window branch), both with known weights.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_checks.h"
#include "server/api_error.h"
#include "server/kv_plan_api.h"
#include "server/requests.h"

namespace {

constexpr const char* kTarget = "fuzz_kv_plan_api";

tally::ModelShape model(int64_t window, int64_t window_layers) {
  tally::ModelShape s;
  s.source = "fuzz";
  s.n_layer = 18;
  s.n_head = 4;
  s.n_kv_head = 1;
  s.head_dim = 256;
  s.window = window;
  if (window > 0) {  // the first window_layers layers slide (which ones does not change the bytes)
    s.window_layers.assign(static_cast<size_t>(s.n_layer), false);
    for (int64_t l = 0; l < window_layers && l < s.n_layer; ++l) s.window_layers[static_cast<size_t>(l)] = true;
  }
  s.parameters = 268098176;
  s.weights_bytes = 246587392;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json body;
  try {
    body = tally::server::parse_body(text);
  } catch (const tally::server::ApiError& e) {
    if (e.status != 400) tally_fuzz::violated(kTarget, "parse_body status", e.what());
    return 0;
  }
  for (const tally::ModelShape& m : {model(0, 0), model(512, 15)}) {
    try {
      const nlohmann::json plan = tally::server::kv_plan_response(body, m);
      const auto& layouts = plan.at("layouts");
      if (layouts.size() != 3) tally_fuzz::violated(kTarget, "three layouts", text);
      const size_t contexts = body.contains("tokens") ? body["tokens"].size() : 3;
      for (const auto& l : layouts)
        if (l.at("totals").size() != contexts) tally_fuzz::violated(kTarget, "a total per context", text);
      if (plan.at("shape_from") == "model" && plan.at("weights_bytes").is_null())
        tally_fuzz::violated(kTarget, "the model's weights", text);
    } catch (const tally::server::ApiError& e) {
      if (e.status != 400) tally_fuzz::violated(kTarget, "status", e.what());
      tally_fuzz::check_message(kTarget, tally::Error(e.what()));
    }
  }
  return 0;
}
