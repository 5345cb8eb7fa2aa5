// Constrained decoding's cost, on the held schemas (bench/schemas/held.json)
// and a model's vocabulary (qwen2.5-coder's 151,936 logits for the figures in
// the docs):
//  1. per schema, the compile time (the mask cache over the vocabulary);
//  2. the mask per token: each schema's prompt is decoded greedily under the
//     schema and every step's mask (grammar::State::mask on the step's
//     logits, on this thread alone) is timed: median and p99 over all steps;
//  3. decode tokens/s of the same greedy runs with and without the schema
//     (runtime/generator's loop, which masks inside the generation step).
// Prints one line per part; --json prints an object.
//
// usage: grammar_mask MODEL.gguf [--schemas bench/schemas/held.json] [--tokens 96] [--threads N] [--json]
// build: cmake --build build/release --target grammar_mask
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "runtime/generation.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

int run(int argc, char** argv) {
  if (argc < 2) tally::fail("usage: grammar_mask MODEL.gguf [--schemas FILE] [--tokens N] [--threads N] [--json]");
  std::string model_path = argv[1], schemas_path = std::string(TALLY_SOURCE_DIR) + "/bench/schemas/held.json";
  int64_t tokens = 96;
  int threads = 0;
  bool as_json = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) tally::fail("{} needs a value", a);
      return argv[++i];
    };
    if (a == "--schemas")
      schemas_path = value();
    else if (a == "--tokens")
      tokens = std::stoll(value());
    else if (a == "--threads")
      threads = std::stoi(value());
    else if (a == "--json")
      as_json = true;
    else
      tally::fail("unknown option {}", a);
  }
  std::ifstream in(schemas_path);
  if (!in) tally::fail("cannot open {}", schemas_path);
  const nlohmann::ordered_json held = nlohmann::ordered_json::parse(in)["schemas"];

  const auto model = tally::Model::load(model_path);
  const tally::Tokenizer tok = tally::Tokenizer::from_gguf(model->file());
  const int32_t n_logits = static_cast<int32_t>(model->config().n_vocab);
  auto t0 = Clock::now();
  const tally::grammar::Vocabulary vocab = tally::grammar_vocabulary(tok, n_logits);
  const double vocab_ms = ms(t0, Clock::now());

  tally::SessionOptions so;
  so.n_ctx = 2048;
  so.n_threads = threads;
  std::vector<double> compile_ms, mask_ms;
  int64_t with_tokens = 0, without_tokens = 0;
  double with_ms = 0, without_ms = 0;
  std::vector<float> masked(static_cast<size_t>(n_logits));
  for (const nlohmann::ordered_json& c : held) {
    t0 = Clock::now();
    const tally::grammar::Constraint constraint = tally::grammar::Constraint::json_schema(vocab, c["schema"]);
    compile_ms.push_back(ms(t0, Clock::now()));
    const std::vector<int32_t> prompt =
        tok.encode(c["prompt"].get<std::string>() + "\nAnswer with JSON only.\n", true, false);

    // 2. The mask of every step of a greedy decode under the schema.
    {
      tally::Session s(*model, so);
      std::span<const float> logits = s.append(prompt);
      tally::grammar::State state(constraint);
      for (int64_t i = 0; i < tokens && !state.finished(); ++i) {
        std::copy(logits.begin(), logits.end(), masked.begin());
        const auto a = Clock::now();
        state.mask(masked);
        mask_ms.push_back(ms(a, Clock::now()));
        const int32_t next = static_cast<int32_t>(std::max_element(masked.begin(), masked.end()) - masked.begin());
        if (!state.accept(next)) tally::fail("{}: the grammar refused its own mask's token {}", c["name"].get<std::string>(), next);
        if (state.finished()) break;
        logits = s.append(std::span<const int32_t>(&next, 1));
      }
    }
    // 3. Decode speed with and without the schema (no end token: the same number of steps where the grammar allows).
    for (bool constrained : {false, true}) {
      tally::Session s(*model, so);
      tally::GenerateOptions g;
      g.max_tokens = tokens;
      g.sampling.temperature = 0;
      if (constrained) g.constraint = constraint;
      const tally::GenerateResult r = tally::generate(s, prompt, g, {}, &tok);
      (constrained ? with_tokens : without_tokens) += r.decoded_tokens();
      (constrained ? with_ms : without_ms) += r.decode_ms;
    }
  }
  const double with_tps = with_ms > 0 ? static_cast<double>(with_tokens) * 1000 / with_ms : 0;
  const double without_tps = without_ms > 0 ? static_cast<double>(without_tokens) * 1000 / without_ms : 0;
  if (as_json) {
    fmt::print("{}\n", nlohmann::json{{"model", model_path},
                                      {"n_logits", n_logits},
                                      {"schemas", held.size()},
                                      {"vocabulary_ms", vocab_ms},
                                      {"compile_ms", {{"median", quantile(compile_ms, 0.5)}, {"max", quantile(compile_ms, 1.0)}}},
                                      {"mask_ms", {{"steps", mask_ms.size()}, {"median", quantile(mask_ms, 0.5)}, {"p99", quantile(mask_ms, 0.99)}}},
                                      {"decode_tps", {{"without", without_tps}, {"with", with_tps}}}}
                           .dump(1));
    return 0;
  }
  fmt::print("{}: {} logits, {} schemas; vocabulary built in {:.0f} ms\n", model_path, n_logits, held.size(), vocab_ms);
  fmt::print("compile: median {:.1f} ms, max {:.1f} ms\n", quantile(compile_ms, 0.5), quantile(compile_ms, 1.0));
  fmt::print("mask per token (one thread): median {:.3f} ms, p99 {:.3f} ms over {} steps\n", quantile(mask_ms, 0.5),
             quantile(mask_ms, 0.99), mask_ms.size());
  fmt::print("decode: {:.1f} tok/s without a schema, {:.1f} tok/s with ({:.0f}%)\n", without_tps, with_tps,
             without_tps > 0 ? 100 * with_tps / without_tps : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "grammar_mask: {}\n", e.what());
    return 1;
  }
}
