// Ownership of paged KV-cache blocks: a free list, per-block reference counts and the automatic
// prefix cache (docs/design/serving.md, "Paged KV cache").
//
//   KvBlockManager m(/*n_blocks=*/1024, /*block_size=*/16, /*prefix_caching=*/true);
//   auto shared = m.match_prefix(prompt, max_blocks);  // cached full blocks, now referenced
//   int32_t b = m.allocate();                          // -1 when none is left
//   m.publish(b, parent, block_tokens);                // a full block others may reuse
//   m.release(b);
//
// Prefix cache: a full block is identified by its tokens and its parent (the block before it in
// the sequence, by id and allocation generation), so a match implies the whole token prefix is
// equal. The hash only narrows the search; every candidate is compared exactly, so a hash
// collision can never share a wrong block. Cached blocks nobody references stay cached and are
// evicted least-recently-released first when a fresh block is needed.
//
// Not thread-safe: owned by the engine loop thread.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace tessera::runtime {

class KvBlockManager {
 public:
  KvBlockManager(int64_t n_blocks, int64_t block_size, bool prefix_caching);

  int64_t block_size() const { return block_size_; }
  int64_t total() const { return static_cast<int64_t>(blocks_.size()); }
  // Blocks allocate() can hand out now: never-used or freed ones plus unreferenced cached ones.
  int64_t available() const {
    return static_cast<int64_t>(free_.size() + evictable_.size());
  }
  int64_t referenced() const { return total() - available(); }
  int64_t cached() const { return static_cast<int64_t>(index_.size()); }

  // A block with reference count 1, or -1 when none is available.
  int32_t allocate();
  // Drops one reference; at zero the block becomes evictable (if cached) or free.
  void release(int32_t block);
  void release_all(std::span<const int32_t> blocks);

  // The longest run of cached full blocks equal to tokens[0 .. k * block_size), k <= max_blocks.
  // Each returned block gains a reference.
  std::vector<int32_t> match_prefix(std::span<const int32_t> tokens, int64_t max_blocks);
  // Offers `block` (full, holding `tokens`, after `parent` or -1 for the first block) to the
  // prefix cache. No effect when caching is off, the block is already cached, or an equal block
  // is (the caller keeps its private copy).
  void publish(int32_t block, int32_t parent, std::span<const int32_t> tokens);

 private:
  struct Block {
    int32_t refs = 0;
    uint32_t generation = 0;  // bumped whenever the block is handed out fresh
    bool cached = false;
    int32_t parent = -1;
    uint32_t parent_generation = 0;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;          // when cached
    std::list<int32_t>::iterator lru_it;  // when cached and unreferenced
  };
  uint64_t key(int32_t parent, uint32_t parent_generation, std::span<const int32_t> tokens) const;
  int32_t find(int32_t parent, std::span<const int32_t> tokens) const;
  void uncache(int32_t block);

  int64_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;     // unreferenced, not cached
  std::list<int32_t> evictable_;  // unreferenced, cached; front = least recently released
  std::unordered_multimap<uint64_t, int32_t> index_;  // key -> cached block
};

}  // namespace tessera::runtime
