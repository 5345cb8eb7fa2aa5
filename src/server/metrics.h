#pragma once
// The server's counters and histograms, written in Prometheus' text format
// (GET /metrics). Thread-safe: HTTP threads and the engine thread record.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_disk.h"

namespace tally::server {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // The Prometheus lines of metric `name`: _bucket{le=...}, _sum, _count.
  std::string text(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, then +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What the scheduler reports about its state at one moment.
struct EngineGauges {
  int64_t queue_depth = 0, running_requests = 0, running_sequences = 0;
  int64_t blocks_free = 0, blocks_used = 0, blocks_cached = 0;
  uint64_t prefix_hit_tokens = 0, prefix_lookups = 0, evictions = 0, preemptions = 0;
  bool disk_tier = false;  // serve --cache-dir: the tally_kv_disk_* series
  KvDiskStats disk;
};

// Label values are bounded and escaped: request() takes the route that
// answered (server/http.h's Router: one of the server's own paths, or
// "other" for every path it does not serve), so a scanner's paths can neither
// grow /metrics nor forge lines.
class Metrics {
 public:
  Metrics();
  // `route`: a route of the server, or "other".
  void request(const std::string& route, int status);
  void tokens(int64_t prompt, int64_t completion);
  // Speculation: guesses a step verified for a sequence, and kept.
  void speculation(int64_t drafted, int64_t accepted);
  void ttft(double seconds);
  void inter_token(double seconds);
  std::string text(const EngineGauges& g) const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  uint64_t drafted_ = 0, accepted_ = 0;
  Histogram ttft_, itl_;
};

// A label value in Prometheus' text format: backslash, double quote and
// newline escaped (\\, \", \n).
std::string escape_label_value(std::string_view v);

}  // namespace tally::server
