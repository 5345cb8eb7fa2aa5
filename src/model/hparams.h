#pragma once
// Reads "<arch>.<key>" metadata of a GGUF as the model readers need it:
// sizes positive and at most kMaxModelDim, floats positive and finite; every
// error names the file and the key. Holds references: lives within one read.
#include <cfloat>
#include <cmath>
#include <string>

#include "core/error.h"
#include "io/gguf.h"
#include "model/model_shape.h"

namespace tally {

class HParams {
 public:
  HParams(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string key(const char* k) const { return arch_ + "." + k; }
  bool has(const char* k) const { return f_.has(key(k)); }
  int64_t size(const char* k) const { return check(k, f_.get_u64(key(k))); }
  int64_t size(const char* k, int64_t fallback) const {
    return check(k, f_.get_u64(key(k), static_cast<uint64_t>(fallback)));
  }
  // A positive finite number that a float can hold (the forward pass computes in float).
  float positive_float(const char* k, double fallback) const {
    return has(k) ? positive_float(k) : static_cast<float>(fallback);
  }
  float positive_float(const char* k) const {
    if (!has(k)) fail("{}: missing metadata '{}'", f_.path(), key(k));
    const double v = f_.get_f64(key(k), 0);
    if (!std::isfinite(v) || v <= 0 || v > FLT_MAX || static_cast<float>(v) == 0.0f)
      fail("{}: metadata '{}' = {} must be a positive finite number", f_.path(), key(k), v);
    return static_cast<float>(v);
  }
  int64_t check(const char* k, uint64_t v) const {
    if (v == 0 || v > static_cast<uint64_t>(kMaxModelDim))
      fail("{}: metadata '{}' = {} is out of range (1 to {})", f_.path(), key(k), v, kMaxModelDim);
    return static_cast<int64_t>(v);
  }
  const GgufFile& file() const { return f_; }

 private:
  const GgufFile& f_;
  std::string arch_;
};

}  // namespace tally
