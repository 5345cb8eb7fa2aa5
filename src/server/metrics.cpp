#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace tally::server {

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::text(const std::string& name) const {
  std::string out;
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return out;
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

void Metrics::request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(m_);
  ++requests_[{route, status}];
}

void Metrics::tokens(int64_t prompt, int64_t completion) {
  std::lock_guard<std::mutex> lock(m_);
  prompt_tokens_ += static_cast<uint64_t>(prompt);
  completion_tokens_ += static_cast<uint64_t>(completion);
}

void Metrics::speculation(int64_t drafted, int64_t accepted) {
  std::lock_guard<std::mutex> lock(m_);
  drafted_ += static_cast<uint64_t>(drafted);
  accepted_ += static_cast<uint64_t>(accepted);
}

void Metrics::ttft(double seconds) {
  std::lock_guard<std::mutex> lock(m_);
  ttft_.observe(seconds);
}

void Metrics::inter_token(double seconds) {
  std::lock_guard<std::mutex> lock(m_);
  itl_.observe(seconds);
}

std::string Metrics::text(const EngineGauges& g) const {
  std::lock_guard<std::mutex> lock(m_);
  std::string out;
  out += "# HELP tally_requests_total HTTP requests answered, by endpoint and status.\n# TYPE tally_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += fmt::format("tally_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", escape_label_value(key.first),
                       key.second, n);
  out += fmt::format(
      "# HELP tally_prompt_tokens_total Prompt tokens of finished generations.\n# TYPE tally_prompt_tokens_total counter\n"
      "tally_prompt_tokens_total {}\n"
      "# HELP tally_completion_tokens_total Generated tokens.\n# TYPE tally_completion_tokens_total counter\n"
      "tally_completion_tokens_total {}\n"
      "# HELP tally_speculation_drafted_total Guesses verified by speculative decoding.\n"
      "# TYPE tally_speculation_drafted_total counter\ntally_speculation_drafted_total {}\n"
      "# HELP tally_speculation_accepted_total Guesses kept by speculative decoding.\n"
      "# TYPE tally_speculation_accepted_total counter\ntally_speculation_accepted_total {}\n",
      prompt_tokens_, completion_tokens_, drafted_, accepted_);
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
  };
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  gauge("tally_queue_depth", "Requests waiting for admission.", g.queue_depth);
  gauge("tally_running_requests", "Requests being generated.", g.running_requests);
  gauge("tally_running_sequences", "Sequences in the KV pool.", g.running_sequences);
  gauge("tally_kv_blocks_free", "KV blocks holding nothing.", g.blocks_free);
  gauge("tally_kv_blocks_used", "KV blocks held by a sequence.", g.blocks_used);
  gauge("tally_kv_blocks_cached", "KV blocks held by none, kept for the prefix cache.", g.blocks_cached);
  counter("tally_prefix_cache_lookups_total", "Prefix-cache lookups.", g.prefix_lookups);
  counter("tally_prefix_cache_hit_tokens_total", "Prompt tokens taken from the prefix cache.", g.prefix_hit_tokens);
  counter("tally_kv_evictions_total", "Cached KV blocks evicted for new content.", g.evictions);
  counter("tally_preemptions_total", "Sequences preempted for lack of KV blocks.", g.preemptions);
  if (g.disk_tier) {
    counter("tally_kv_disk_hits_total", "KV blocks loaded from the cache folder.", g.disk.hits);
    counter("tally_kv_disk_misses_total", "Prefix lookups that went on to the cache folder and ended there.",
            g.disk.misses);
    counter("tally_kv_disk_read_bytes_total", "Bytes of KV block files read.", g.disk.bytes_read);
    counter("tally_kv_disk_written_bytes_total", "Bytes of KV block files written.", g.disk.bytes_written);
    counter("tally_kv_disk_writes_total", "KV block files written.", g.disk.written);
    counter("tally_kv_disk_write_errors_total", "KV blocks that could not be written (a full or read-only disk).",
            g.disk.write_errors);
    counter("tally_kv_disk_evictions_total", "KV block files removed to keep the disk budget.", g.disk.evictions);
    counter("tally_kv_disk_corrupt_total", "KV block files that failed their checks (removed).", g.disk.corrupt);
    counter("tally_kv_disk_newer_total", "KV block files of a newer format (left alone).", g.disk.newer);
    out += fmt::format("# HELP tally_kv_disk_load_seconds_total Time spent reading and checking KV block files.\n"
                       "# TYPE tally_kv_disk_load_seconds_total counter\ntally_kv_disk_load_seconds_total {}\n",
                       g.disk.load_seconds);
    gauge("tally_kv_disk_files", "KV block files in the cache folder known to this server.", g.disk.files);
    gauge("tally_kv_disk_bytes", "Bytes of those files.", static_cast<int64_t>(g.disk.bytes));
  }
  out += "# HELP tally_time_to_first_token_seconds From a request's arrival to its first token.\n"
         "# TYPE tally_time_to_first_token_seconds histogram\n";
  out += ttft_.text("tally_time_to_first_token_seconds");
  out += "# HELP tally_inter_token_latency_seconds Between two tokens of one choice.\n"
         "# TYPE tally_inter_token_latency_seconds histogram\n";
  out += itl_.text("tally_inter_token_latency_seconds");
  return out;
}

}  // namespace tally::server
