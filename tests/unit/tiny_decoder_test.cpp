// Forward-pass checks on a tiny synthetic llama (tiny_model.h): tally's logits
// against a naive double-precision reference written here, and the cache's
// invariants (causality, chunking, truncation, continuity, threads). Fast and
// model-free, so they also run under the sanitizers.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "runtime/generator.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "runtime/session.h"
#include "tiny_model.h"

namespace tally {
namespace {

using test::TinySpec;

// ---------------------------------------------------------------------------
// The naive reference: plain loops in double over the weights as the test
// itself decodes them. Written the Hugging Face way (RoPE angles from
// base^(-2i/head_dim), K/V heads repeated to the query head count), so it
// shares no code and no layout decisions with the engine.

using Mat = std::vector<double>;  // row-major (rows, cols)

struct RefWeights {
  std::map<std::string, Mat> w;
  const Mat& operator[](const std::string& name) const { return w.at(name); }
};

RefWeights ref_weights(const TinySpec& s) {
  RefWeights r;
  for (const auto& [name, t] : test::tiny_tensors(s)) r.w[name] = test::dequantize_tiny(t);
  return r;
}

// y = W x, W (rows, cols).
std::vector<double> matvec(const Mat& W, const std::vector<double>& x, size_t rows) {
  const size_t cols = x.size();
  std::vector<double> y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) y[r] += W[r * cols + c] * x[c];
  return y;
}

std::vector<double> rms_norm_ref(const std::vector<double>& x, const Mat& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// Rotates pairs (2i, 2i+1) of every head by pos * base^(-2i/head_dim)
// (pairs (i, i + head_dim/2) with half_split: the wrong layout for GGUF llama).
void rope_ref(std::vector<double>& v, int64_t n_heads, int64_t hd, int64_t pos, double base, bool half_split) {
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double theta = static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / hd);
      double& a = v[h * hd + (half_split ? i : 2 * i)];
      double& b = v[h * hd + (half_split ? i + hd / 2 : 2 * i + 1)];
      const double x0 = a, x1 = b;
      a = x0 * std::cos(theta) - x1 * std::sin(theta);
      b = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
}

// What an input of a matrix product becomes in tally: 8 bits per 32-value
// block, d = amax / 127, q = round(x / d) (computed in float, as tally does).
std::vector<double> q8_round(const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(static_cast<float>(x[i])));
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    for (size_t i = b; i < b + 32; ++i) y[i] = static_cast<double>(d) * std::nearbyint(static_cast<float>(x[i]) * id);
  }
  return y;
}

struct RefOptions {
  bool causal = true;
  bool q8_inputs = false;  // every matrix product sees its input rounded like tally's activations
  bool f16_kv = false;     // K (after RoPE) and V rounded to fp16, like an F16 cache
  // Deliberate mistakes, to show the comparison would catch them:
  bool half_split_rope = false;  // pairs (i, i + head_dim/2) instead of (2i, 2i+1)
  bool interleaved_kv = false;   // query head h reads kv head h % n_kv_head instead of h / group
};

// Logits (n, n_vocab) of every position of `tokens`; exact with the default options.
std::vector<std::vector<double>> reference_logits(const TinySpec& s, const std::vector<int32_t>& tokens,
                                                  const RefOptions& o = {}) {
  const bool causal = o.causal;
  auto in = [&o](const std::vector<double>& x) { return o.q8_inputs ? q8_round(x) : x; };
  const RefWeights W = ref_weights(s);
  const size_t n = tokens.size(), E = s.n_embd, hd = s.head_dim, H = s.n_head, Hkv = s.n_kv_head;
  const size_t Q = H * hd, KV = Hkv * hd, F = s.n_ff, V = s.n_vocab;
  const size_t n_rep = H / Hkv;
  const double eps = s.rms_eps;

  std::vector<std::vector<double>> x(n);
  for (size_t t = 0; t < n; ++t) {
    const Mat& emb = W["token_embd.weight"];
    x[t].assign(emb.begin() + tokens[t] * E, emb.begin() + (tokens[t] + 1) * E);
  }
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    // q, k, v for every position, RoPE applied.
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const auto xn = in(rms_norm_ref(x[t], W[b + "attn_norm.weight"], eps));
      q[t] = matvec(W[b + "attn_q.weight"], xn, Q);
      k[t] = matvec(W[b + "attn_k.weight"], xn, KV);
      v[t] = matvec(W[b + "attn_v.weight"], xn, KV);
      rope_ref(q[t], H, hd, static_cast<int64_t>(t), s.rope_base, o.half_split_rope);
      rope_ref(k[t], Hkv, hd, static_cast<int64_t>(t), s.rope_base, o.half_split_rope);
      if (o.f16_kv)
        for (size_t i = 0; i < KV; ++i) {
          k[t][i] = f16_to_f32(f32_to_f16(static_cast<float>(k[t][i])));
          v[t][i] = f16_to_f32(f32_to_f16(static_cast<float>(v[t][i])));
        }
    }
    // repeat_kv: (n_kv_head, ...) -> (n_kv_head, n_rep, ...) -> (n_head, ...): head h reads kv head h / n_rep.
    std::vector<std::vector<double>> k_rep(n, std::vector<double>(Q)), v_rep(n, std::vector<double>(Q));
    for (size_t t = 0; t < n; ++t)
      for (size_t g = 0; g < Hkv; ++g)
        for (size_t r = 0; r < n_rep; ++r)
          for (size_t d = 0; d < hd; ++d) {
            const size_t h = o.interleaved_kv ? r * Hkv + g : g * n_rep + r;
            k_rep[t][h * hd + d] = k[t][g * hd + d];
            v_rep[t][h * hd + d] = v[t][g * hd + d];
          }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> attn(Q, 0.0);
      const size_t n_keys = causal ? t + 1 : n;
      for (size_t h = 0; h < H; ++h) {
        std::vector<double> sc(n_keys);
        double mx = -INFINITY;
        for (size_t j = 0; j < n_keys; ++j) {
          double dot = 0;
          for (size_t d = 0; d < hd; ++d) dot += q[t][h * hd + d] * k_rep[j][h * hd + d];
          sc[j] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& e : sc) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j < n_keys; ++j)
          for (size_t d = 0; d < hd; ++d) attn[h * hd + d] += sc[j] / sum * v_rep[j][h * hd + d];
      }
      const auto o = matvec(W[b + "attn_output.weight"], in(attn), E);
      for (size_t i = 0; i < E; ++i) x[t][i] += o[i];
    }
    for (size_t t = 0; t < n; ++t) {
      const auto xn = in(rms_norm_ref(x[t], W[b + "ffn_norm.weight"], eps));
      auto g = matvec(W[b + "ffn_gate.weight"], xn, F);
      const auto u = matvec(W[b + "ffn_up.weight"], xn, F);
      for (size_t i = 0; i < F; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const auto d = matvec(W[b + "ffn_down.weight"], in(g), E);
      for (size_t i = 0; i < E; ++i) x[t][i] += d[i];
    }
  }
  const Mat& out = s.tied ? W["token_embd.weight"] : W["output.weight"];
  std::vector<std::vector<double>> logits(n);
  for (size_t t = 0; t < n; ++t) logits[t] = matvec(out, in(rms_norm_ref(x[t], W["output_norm.weight"], eps)), V);
  return logits;
}

// ---------------------------------------------------------------------------
// Running tally.

SessionOptions opts(int64_t n_batch = 512, DType cache = DType::F32, int threads = 1, int64_t n_ctx = 128) {
  SessionOptions o;
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  o.n_threads = threads;
  o.cache_type = cache;
  o.block_size = 8;  // several blocks even for short sequences
  o.kv_budget = 64ull << 20;
  o.all_logits = true;
  return o;
}

// Appends `tokens` and returns the logits rows it produced, (n, n_vocab) flat.
std::vector<float> append_all(Session& s, const std::vector<int32_t>& tokens) {
  std::vector<float> rows;
  const int64_t V = s.model().config().n_vocab;
  s.append(tokens, [&](int64_t, const float* l, int64_t r) { rows.insert(rows.end(), l, l + r * V); });
  return rows;
}

std::vector<float> run(const Model& m, const std::vector<int32_t>& tokens, const SessionOptions& o = opts(),
                       bool causal = true) {
  Session s(m, o);
  ForwardHooks mask;
  mask.attention = causal ? AttentionMode::Causal : AttentionMode::Unmasked;
  s.set_hooks(&mask);
  return append_all(s, tokens);
}

// Counts what the forward passes computed.
struct Counter : ForwardHooks {
  uint64_t tokens = 0, scores = 0;
  void computed(int64_t n, uint64_t sc) override {
    tokens += static_cast<uint64_t>(n);
    scores += sc;
  }
};

// A forward pass over a cache of its own, to ask the cache for what a Session
// never asks: a write that does not start at the sequence's length.
struct DirectPass {
  ThreadPool pool{2};
  KvCache cache;
  Forward forward;
  KvCache::SeqId seq;
  DirectPass(const Model& m, int64_t n_ctx)
      : cache({m.config().n_layer, m.config().n_kv_head, m.config().head_dim},
              KvCacheOptions{n_ctx, 8, DType::F32, 64u << 20}),
        forward(m, pool, n_ctx, n_ctx, 1),
        seq(cache.create_sequence()) {}
  void eval(std::span<const int32_t> tokens, int64_t start) { forward.eval(cache, seq, tokens, start, LogitsMode::Last); }
};

std::vector<int32_t> some_tokens(size_t n, int32_t n_vocab, int32_t mul = 7, int32_t add = 3) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = static_cast<int32_t>((mul * static_cast<int64_t>(i * i) + add * static_cast<int64_t>(i) + 1) % n_vocab);
  return t;
}

// |a - b|, or infinity when either is NaN (std::max would silently skip a NaN).
double abs_diff(double a, double b) {
  const double d = std::fabs(a - b);
  return std::isnan(d) ? INFINITY : d;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, abs_diff(v, 0.0));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b, size_t n = SIZE_MAX) {
  n = std::min({n, a.size(), b.size()});
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, abs_diff(a[i], b[i]));
  return m;
}

// Tally quantizes every matmul input to 8 bits per 32-value block (|error| <=
// amax/254 per value), so its logits differ from the exact ones by about a
// percent of their scale: measured max |diff| / max |logit| is 0.009 to 0.015
// over the configurations here; the bound leaves 2x headroom.
constexpr double kRefTolerance = 0.03;
// Against the reference that rounds its matmul inputs the same way only
// float-vs-double rounding is left: measured <= 2.3e-7. The bound still
// allows a few activations to land on the neighbouring 8-bit step (about
// 1.5e-3 each) where another compiler or instruction set rounds a last bit
// differently; a wrong RoPE pairing costs 0.1, wrong kv grouping 1.
constexpr double kQ8RefTolerance = 5e-3;

struct RefDiff {
  double exact = 0, q8 = 0;  // max |diff| / max |logit| against each reference
};

// Compares tally's logits with the exact and the q8-input references at every position.
RefDiff compare_with_reference(const TinySpec& spec, size_t n_tokens, bool causal = true,
                               DType cache = DType::F32, const std::string& label = "") {
  const auto tm = test::make_tiny_model(spec);
  const auto tokens = some_tokens(n_tokens, static_cast<int32_t>(spec.n_vocab));
  const auto got = run(*tm->model, tokens, opts(512, cache), causal);
  const size_t V = spec.n_vocab;
  EXPECT_EQ(got.size(), n_tokens * V);
  RefDiff r;
  for (bool q8 : {false, true}) {
    RefOptions ro;
    ro.causal = causal;
    ro.q8_inputs = q8;
    ro.f16_kv = cache == DType::F16;
    const auto want = reference_logits(spec, tokens, ro);
    double worst = 0, scale = 0;
    for (size_t t = 0; t < n_tokens; ++t)
      for (size_t i = 0; i < V; ++i) {
        worst = std::max(worst, abs_diff(got[t * V + i], want[t][i]));
        scale = std::max(scale, std::fabs(want[t][i]));
      }
    EXPECT_GT(scale, 0.5) << "degenerate logits";
    EXPECT_LE(worst, (q8 ? kQ8RefTolerance : kRefTolerance) * scale)
        << (q8 ? "q8-input" : "exact") << " reference: max |diff| " << worst << " vs max |logit| " << scale;
    (q8 ? r.q8 : r.exact) = worst / scale;
  }
  // In the XML report (--gtest_output=xml): the measured differences the bounds are set from.
  ::testing::Test::RecordProperty("rel_diff_exact" + label, fmt::format("{:.2e}", r.exact));
  ::testing::Test::RecordProperty("rel_diff_q8_inputs" + label, fmt::format("{:.2e}", r.q8));
  return r;
}

// ---------------------------------------------------------------------------

TEST(TinyDecoder, MatchesNaiveReferenceGqaF32) {
  TinySpec s;
  compare_with_reference(s, 24);
}

TEST(TinyDecoder, MatchesNaiveReferenceQ8_0) {
  TinySpec s;
  s.matrix_type = DType::Q8_0;
  compare_with_reference(s, 24);
}

TEST(TinyDecoder, MatchesNaiveReferenceTiedOutput) {
  TinySpec s;
  s.tied = true;
  s.seed = 5;
  compare_with_reference(s, 16);
}

TEST(TinyDecoder, MhaGqaMqaMatchNaiveReference) {
  for (int64_t kv : {4, 2, 1}) {
    SCOPED_TRACE("n_kv_head " + std::to_string(kv));
    TinySpec s;
    s.n_kv_head = kv;
    s.seed = 10 + kv;
    compare_with_reference(s, 20, true, DType::F32, "_kv" + std::to_string(kv));
  }
  // Eight query heads of 8 dims over two kv heads: groups of four.
  TinySpec s;
  s.n_head = 8;
  s.n_kv_head = 2;
  s.head_dim = 8;
  s.seed = 21;
  SCOPED_TRACE("8 heads, 2 kv heads");
  compare_with_reference(s, 20, true, DType::F32, "_8x2");
}

// The comparison catches real mistakes: a reference with the other RoPE
// pairing, interleaved kv heads or no causal mask is far outside both bounds.
TEST(TinyDecoder, ReferenceComparisonCatchesMistakes) {
  TinySpec spec;
  const auto tm = test::make_tiny_model(spec);
  const auto tokens = some_tokens(20, 50);
  const auto got = run(*tm->model, tokens);
  auto rel_diff = [&](RefOptions o) {
    const auto want = reference_logits(spec, tokens, o);
    double worst = 0, scale = 0;
    for (size_t t = 0; t < tokens.size(); ++t)
      for (size_t i = 0; i < 50; ++i) {
        worst = std::max(worst, abs_diff(got[t * 50 + i], want[t][i]));
        scale = std::max(scale, std::fabs(want[t][i]));
      }
    return worst / scale;
  };
  RefOptions rope, group, mask;
  rope.half_split_rope = true;
  group.interleaved_kv = true;
  mask.causal = false;
  for (auto [what, o] : {std::pair{"half_split_rope", rope}, {"interleaved_kv_heads", group}, {"no_mask", mask}}) {
    const double exact = rel_diff(o);
    o.q8_inputs = true;
    const double q8 = rel_diff(o);
    RecordProperty(std::string("rel_diff_") + what, fmt::format("{:.3f} / {:.3f}", exact, q8));
    EXPECT_GT(exact, 3 * kRefTolerance) << what;
    EXPECT_GT(q8, 10 * kQ8RefTolerance) << what;
  }
}

TEST(TinyDecoder, UnmaskedMatchesUnmaskedReference) {
  compare_with_reference(TinySpec{}, 12, /*causal=*/false);
}

// The equalities below are bit-exact, not approximate: every (row, token) dot
// product runs the same kernel whatever the chunk (kernels/matmul.h), and each
// query's attention reads the same keys in the same order.
TEST(TinyDecoder, CausalRowsIgnoreLaterTokens) {
  const auto tm = test::make_tiny_model();
  const auto toks = some_tokens(13, 50);
  const std::vector<int32_t> prefix(toks.begin(), toks.end() - 1);
  const auto a = run(*tm->model, prefix), b = run(*tm->model, toks);
  ASSERT_EQ(b.size(), a.size() + 50);
  EXPECT_EQ(max_diff(a, b, a.size()), 0.0);
}

TEST(TinyDecoder, UnmaskedRowsSeeLaterTokens) {
  const auto tm = test::make_tiny_model();
  const auto toks = some_tokens(13, 50);
  const std::vector<int32_t> prefix(toks.begin(), toks.end() - 1);
  const auto a = run(*tm->model, prefix, opts(), false), b = run(*tm->model, toks, opts(), false);
  ASSERT_EQ(b.size(), a.size() + 50);
  // Without the mask every earlier row attends to the new token too.
  EXPECT_GT(max_diff(a, b, a.size()), 1e-3);
  for (size_t t = 0; t < prefix.size(); ++t) {
    const std::vector<float> ra(a.begin() + t * 50, a.begin() + (t + 1) * 50);
    const std::vector<float> rb(b.begin() + t * 50, b.begin() + (t + 1) * 50);
    EXPECT_GT(max_diff(ra, rb), 1e-4) << "row " << t << " did not see the added token";
  }
}

TEST(TinyDecoder, ChunkedPrefillEqualsOneShot) {
  const auto tm = test::make_tiny_model();
  const auto toks = some_tokens(23, 50);
  const auto one = run(*tm->model, toks);
  for (int64_t b : {1, 3, 7}) {
    const auto chunked = run(*tm->model, toks, opts(b));
    ASSERT_EQ(chunked.size(), one.size());
    EXPECT_EQ(max_diff(one, chunked), 0.0) << "n_batch " << b;
  }
}

// Past kAttentionChunk keys the attention is computed per chunk of keys and
// merged; with several threads a decode step spreads the chunks over them. A
// query's result still depends only on its keys: batch splits, token-by-token
// decode, thread counts and the dense form agree bit for bit, for both cache types.
TEST(TinyDecoder, ChunkedAttentionIsIndependentOfBatchingAndThreads) {
  const auto tm = test::make_tiny_model();
  const auto toks = some_tokens(2 * kAttentionChunk + 37, 50);
  const int64_t n_ctx = 1024;
  for (DType cache : {DType::F32, DType::F16}) {
    const auto one = run(*tm->model, toks, opts(512, cache, 1, n_ctx));
    for (int64_t b : {1, 3, 300}) {
      for (int th : {1, 2, 3}) {
        const auto other = run(*tm->model, toks, opts(b, cache, th, n_ctx));
        ASSERT_EQ(other.size(), one.size());
        EXPECT_EQ(max_diff(one, other), 0.0) << dtype_name(cache) << " n_batch " << b << ", " << th << " threads";
      }
    }
    // The dense form scores whole chunks past the visible keys and masks them.
    Session dense(*tm->model, opts(300, cache, 2, n_ctx));
    ForwardHooks masked_after;
    masked_after.attention = AttentionMode::DenseMasked;
    dense.set_hooks(&masked_after);
    EXPECT_EQ(max_diff(one, append_all(dense, toks)), 0.0) << dtype_name(cache) << " dense";
  }
}

TEST(TinyDecoder, F16CacheCloseToF32) {
  const auto tm = test::make_tiny_model();
  const auto toks = some_tokens(23, 50);
  const auto f32 = run(*tm->model, toks), f16 = run(*tm->model, toks, opts(512, DType::F16));
  // fp16 K/V (11 significant bits) nudge the attention output; where that
  // moves an activation across an 8-bit rounding step the logits move by the
  // quantization noise, so the bound is the reference one (measured 0.012).
  EXPECT_LE(max_diff(f32, f16), kRefTolerance * max_abs(f32));
  EXPECT_GT(max_diff(f32, f16), 0.0) << "the F16 cache was not used";
  // Against a reference that rounds K/V to fp16 too, the F16 cache is exact.
  compare_with_reference(TinySpec{}, 23, true, DType::F16);
}

TEST(TinyDecoder, CacheAndNoCacheGreedyAgree) {
  const auto tm = test::make_tiny_model();
  GenerateOptions g;
  g.max_tokens = 20;
  g.sampling.temperature = 0;
  const std::vector<int32_t> prompt = {3, 17, 42, 8, 29};
  Session a(*tm->model, opts()), b(*tm->model, opts());
  const auto with = generate(a, prompt, g);
  g.use_cache = false;
  const auto without = generate(b, prompt, g);
  ASSERT_EQ(with.tokens.size(), 20u);
  EXPECT_EQ(with.tokens, without.tokens);
  EXPECT_EQ(with.decode_steps, 19);
  EXPECT_GT(std::set<int32_t>(with.tokens.begin(), with.tokens.end()).size(), 2u) << "a degenerate continuation";
  EXPECT_EQ(a.tokens(), b.tokens());
}

TEST(TinyDecoder, TruncateAndRecomputeEqualsFresh) {
  const auto tm = test::make_tiny_model();
  const auto toks = some_tokens(16, 50);
  const std::vector<int32_t> edit = {9, 8, 7, 6, 5};
  Session s(*tm->model, opts(4));
  append_all(s, toks);
  s.truncate(10);
  EXPECT_EQ(s.length(), 10);
  EXPECT_EQ(s.cache().length(s.sequence()), 10);
  const auto& alloc = s.cache().allocator();
  EXPECT_EQ(alloc.total_blocks() - alloc.free_blocks(), 2) << "10 positions in blocks of 8";
  const auto rows = append_all(s, edit);

  std::vector<int32_t> fresh_toks(toks.begin(), toks.begin() + 10);
  fresh_toks.insert(fresh_toks.end(), edit.begin(), edit.end());
  const auto fresh = run(*tm->model, fresh_toks);
  ASSERT_EQ(rows.size(), edit.size() * 50);
  const std::vector<float> tail(fresh.end() - static_cast<ptrdiff_t>(rows.size()), fresh.end());
  EXPECT_EQ(max_diff(rows, tail), 0.0);
  EXPECT_EQ(s.tokens(), fresh_toks);
}

TEST(TinyDecoder, WriteAtWrongStartIsRefused) {
  const auto tm = test::make_tiny_model();
  DirectPass d(*tm->model, 32);
  const auto six = some_tokens(6, 50);
  d.eval(six, 0);
  const int64_t free_before = d.cache.allocator().free_blocks();
  const int32_t tok = 4;
  for (int64_t start : {0, 5, 7, 20}) {
    try {
      d.eval(std::span<const int32_t>(&tok, 1), start);
      ADD_FAILURE() << "a write at " << start << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("broken continuity"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("start at 6"), std::string::npos) << e.what();
    }
    EXPECT_EQ(d.cache.length(d.seq), 6);
    EXPECT_EQ(d.cache.allocator().free_blocks(), free_before);
  }
  // The pass still continues correctly after the refusals.
  auto toks = six;
  toks.push_back(tok);
  d.eval(std::span<const int32_t>(&tok, 1), 6);
  const int64_t V = tm->model->config().n_vocab;
  const auto fresh = run(*tm->model, toks);
  EXPECT_EQ(max_diff(std::vector<float>(d.forward.logits(), d.forward.logits() + V),
                     std::vector<float>(fresh.end() - V, fresh.end())),
            0.0);
}

TEST(TinyDecoder, FullContextIsRefused) {
  const auto tm = test::make_tiny_model();
  Session s(*tm->model, opts(512, DType::F32, 1, 16));
  EXPECT_THROW(s.append(some_tokens(17, 50)), Error);
  EXPECT_EQ(s.length(), 0);
  EXPECT_EQ(s.cache().length(s.sequence()), 0);
  append_all(s, some_tokens(16, 50));
  EXPECT_EQ(s.length(), 16);
  try {
    s.append(std::vector<int32_t>{1});
    ADD_FAILURE() << "the 17th token was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.cache().length(s.sequence()), 16);
  // The cache itself refuses too, when asked directly.
  DirectPass d(*tm->model, 16);
  d.eval(some_tokens(16, 50), 0);
  const int32_t tok = 1;
  try {
    d.eval(std::span<const int32_t>(&tok, 1), 16);
    ADD_FAILURE() << "the cache accepted position 16 of 16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context full"), std::string::npos) << e.what();
  }
  EXPECT_EQ(d.cache.length(d.seq), 16);
}

TEST(TinyDecoder, ThreadCountsGiveIdenticalLogits) {
  TinySpec spec;
  spec.matrix_type = DType::Q8_0;
  const auto tm = test::make_tiny_model(spec);
  const auto toks = some_tokens(19, 50);
  const auto one = run(*tm->model, toks, opts(512, DType::F32, 1));
  for (int th : {2, 3}) {
    const auto many = run(*tm->model, toks, opts(512, DType::F32, th));
    EXPECT_EQ(one, many) << th << " threads";
  }
}

TEST(TinyDecoder, AttentionScoreCountIsCausal) {
  const auto tm = test::make_tiny_model();
  const auto& c = tm->model->config();
  Session s(*tm->model, opts(4));
  Counter count;
  s.set_hooks(&count);
  const int64_t n = 10, k = 5;
  s.append(some_tokens(n, 50));
  for (int32_t i = 0; i < k; ++i) s.append(std::vector<int32_t>{i});
  uint64_t causal = 0;
  for (int64_t p = 0; p < n + k; ++p) causal += static_cast<uint64_t>(p + 1);
  EXPECT_EQ(count.scores, static_cast<uint64_t>(c.n_head * c.n_layer) * causal);
  EXPECT_EQ(count.tokens, static_cast<uint64_t>(n + k));
}

// The textbook count: every (query, key) score of the chunk computed, then the
// later ones masked. Same logits as the causal pass, more scores.
TEST(TinyDecoder, DenseMaskedEqualsCausalWithSquareScoreCount) {
  const auto tm = test::make_tiny_model();
  const auto& c = tm->model->config();
  const auto toks = some_tokens(12, 50);
  Session s(*tm->model, opts());
  Counter count;
  count.attention = AttentionMode::DenseMasked;
  s.set_hooks(&count);
  const auto dense = append_all(s, toks);
  EXPECT_EQ(max_diff(dense, run(*tm->model, toks)), 0.0);
  EXPECT_EQ(count.scores, static_cast<uint64_t>(c.n_head * c.n_layer * 12 * 12));
}

}  // namespace
}  // namespace tally
