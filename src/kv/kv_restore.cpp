#include "kv/kv_restore.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <system_error>

#include "core/sha256.h"

namespace tally {

KvRestore::KvRestore(std::vector<Block> blocks, uint64_t block_bytes)
    : blocks_(std::move(blocks)),
      block_bytes_(block_bytes),
      n_layer_(blocks_.empty() ? 0 : static_cast<int64_t>(blocks_.front().k.size())),
      passed_(blocks_.size(), 1) {
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error&) {  // no thread to be had: the reads happen here, before the step
    run();
  }
}

KvRestore::~KvRestore() {
  if (thread_.joinable()) thread_.join();
}

void KvRestore::wait_layer(int64_t layer) const {
  const int64_t need = std::min(layer + 1, n_layer_);
  for (int64_t r = ready_.load(std::memory_order_acquire); r < need; r = ready_.load(std::memory_order_acquire))
    ready_.wait(r, std::memory_order_acquire);
}

const std::vector<char>& KvRestore::finish() {
  if (thread_.joinable()) thread_.join();
  return passed_;
}

void KvRestore::run() {
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t bb = block_bytes_;
  try {
    std::vector<std::unique_ptr<Sha256>> sums;
    for (Block& b : blocks_) {
      sums.push_back(std::make_unique<Sha256>());
      sums.back()->update(b.file.head.data(), b.file.head.size());
    }
    for (int64_t l = 0; l < n_layer_; ++l) {
      for (size_t i = 0; i < blocks_.size(); ++i) {
        Block& b = blocks_[i];
        const uint64_t at = b.file.head.size() + static_cast<uint64_t>(l) * 2 * bb;
        const size_t li = static_cast<size_t>(l);
        if (!passed_[i] || !b.file.read(at, b.k[li], bb) || !b.file.read(at + bb, b.v[li], bb)) {
          passed_[i] = 0;
          continue;
        }
        sums[i]->update(b.k[li], bb);
        sums[i]->update(b.v[li], bb);
      }
      ready_.store(l + 1, std::memory_order_release);
      ready_.notify_all();
    }
    for (size_t i = 0; i < blocks_.size(); ++i) {
      uint8_t stored[32];
      if (!passed_[i] || !blocks_[i].file.read(blocks_[i].file.size - 32, stored, 32)) {
        passed_[i] = 0;
        continue;
      }
      const BlockDigest sum = sums[i]->digest();
      passed_[i] = std::memcmp(stored, sum.data(), 32) == 0;
    }
  } catch (...) {  // a digest that cannot start: nothing read counts
    std::fill(passed_.begin(), passed_.end(), 0);
  }
  // Whatever happened, no waiter is left waiting.
  ready_.store(n_layer_, std::memory_order_release);
  ready_.notify_all();
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tally
