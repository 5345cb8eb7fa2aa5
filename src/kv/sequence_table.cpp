#include "kv/sequence_table.h"

#include <utility>

#include "core/error.h"

namespace tally {

KvSeqId SequenceTable::create() {
  size_t i = 0;
  while (i < entries_.size() && entries_[i].live) ++i;
  if (i == entries_.size()) entries_.emplace_back();
  Entry& e = entries_[i];
  const uint32_t gen = e.gen + 1;
  e = Entry{};
  e.live = true;
  e.gen = gen;
  return {static_cast<int32_t>(i), gen};
}

const KvSequence& SequenceTable::get(KvSeqId id) const {
  if (id.index < 0 || id.index >= static_cast<int32_t>(entries_.size()))
    fail("KV cache has no sequence {}", id.index);
  const Entry& e = entries_[static_cast<size_t>(id.index)];
  if (!e.live || e.gen != id.gen)
    fail("KV cache sequence {} (generation {}) was freed; its id is no longer valid", id.index, id.gen);
  return e.seq;
}

KvSequence& SequenceTable::get(KvSeqId id) { return const_cast<KvSequence&>(std::as_const(*this).get(id)); }

void SequenceTable::free(KvSeqId id) {
  get(id);
  Entry& e = entries_[static_cast<size_t>(id.index)];
  const uint32_t gen = e.gen;
  e = Entry{};
  e.gen = gen;  // kept: the entry's next sequence gets gen + 1, and this id stays refused
}

}  // namespace tally
