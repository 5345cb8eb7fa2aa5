#pragma once
// A structure-aware mutator for GGUF files (libFuzzer's LLVMFuzzerCustomMutator).
// Byte-level mutation of a GGUF almost always breaks the header or a length
// and stops at the first check; this one reads the input as header, metadata
// records, tensor records and data section, changes one thing in the
// structure (a count, a type id, a string or array length, a dimension, an
// offset, the alignment, a known key's value, a record added, dropped or
// duplicated), and writes a file whose other parts are still consistent, so
// the reader and the loaders behind it see deep inputs. Input it cannot read
// is mutated as plain bytes.
#include <cstddef>
#include <cstdint>

namespace tally::fuzz {

// Mutates data[0, size) in place (capacity max_size); returns the new size.
size_t mutate_gguf(uint8_t* data, size_t size, size_t max_size, unsigned int seed);

}  // namespace tally::fuzz
