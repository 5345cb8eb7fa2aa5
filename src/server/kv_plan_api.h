#pragma once
// POST /v1/kv-plan: `tally kv-plan` over HTTP. A request names a head layout
// (each of layers, heads, kv_heads, head_dim defaults to the loaded model's), a
// number format, contexts and a batch, and may give weight bytes and a memory
// budget; the answer holds, for the layout and its MHA and MQA variants, the
// bytes per token and per context, the crossover context (cache read per
// decode step = weights) and the longest context the budget holds. Untrusted
// input: every field is checked, a wrong one is a 400 naming it (ApiError).
#include <nlohmann/json.hpp>

#include "sizing/model_shape.h"

namespace tally::server {

// `model` is the loaded model's shape, read from its GGUF: the default of each
// shape field. When the request's shape is the model's, the model's sliding
// window applies and its tensors' bytes are the weights (unless the request
// gives weights_bytes); any other shape is sized with no window and weights
// known only when given.
nlohmann::json kv_plan_response(const nlohmann::json& body, const ModelShape& model);

}  // namespace tally::server
