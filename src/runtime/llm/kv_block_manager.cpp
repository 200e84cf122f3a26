#include "runtime/llm/kv_block_manager.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tessera::runtime {

KvBlockManager::KvBlockManager(int64_t n_blocks, int64_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching) {
  TESSERA_CHECK_ARG(n_blocks >= 1 && n_blocks <= (int64_t{1} << 30) && block_size >= 1,
                    "KV block manager: bad block count or size");
  blocks_.resize(static_cast<size_t>(n_blocks));
  free_.reserve(blocks_.size());
  // Low ids are handed out first (pop from the back).
  for (int64_t i = n_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

uint64_t KvBlockManager::key(int32_t parent, uint32_t parent_generation,
                             std::span<const int32_t> tokens) const {
  // splitmix64-style mixing; exactness comes from the comparison in find(), not from here.
  auto mix = [](uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
  };
  uint64_t h = mix(static_cast<uint64_t>(static_cast<int64_t>(parent)), parent_generation);
  for (int32_t t : tokens) h = mix(h, static_cast<uint32_t>(t));
  return h;
}

int32_t KvBlockManager::find(int32_t parent, std::span<const int32_t> tokens) const {
  const uint32_t pgen = parent >= 0 ? blocks_[parent].generation : 0;
  auto [lo, hi] = index_.equal_range(key(parent, pgen, tokens));
  for (auto it = lo; it != hi; ++it) {
    const Block& b = blocks_[it->second];
    if (b.parent == parent && b.parent_generation == pgen &&
        std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end()))
      return it->second;
  }
  return -1;
}

void KvBlockManager::uncache(int32_t id) {
  Block& b = blocks_[id];
  auto [lo, hi] = index_.equal_range(b.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == id) {
      index_.erase(it);
      break;
    }
  }
  b.cached = false;
  b.tokens.clear();
  b.tokens.shrink_to_fit();
}

int32_t KvBlockManager::allocate() {
  int32_t id = -1;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    id = evictable_.front();
    evictable_.pop_front();
    uncache(id);
  } else {
    return -1;
  }
  Block& b = blocks_[id];
  b.refs = 1;
  ++b.generation;  // children cached under the old contents can no longer match
  return id;
}

void KvBlockManager::release(int32_t id) {
  TESSERA_CHECK_ARG(id >= 0 && id < total() && blocks_[id].refs > 0,
                    "KV block manager: release of a block that is not referenced");
  Block& b = blocks_[id];
  if (--b.refs > 0) return;
  if (b.cached) {
    b.lru_it = evictable_.insert(evictable_.end(), id);
  } else {
    free_.push_back(id);
  }
}

void KvBlockManager::release_all(std::span<const int32_t> ids) {
  for (int32_t id : ids) release(id);
}

std::vector<int32_t> KvBlockManager::match_prefix(std::span<const int32_t> tokens,
                                                  int64_t max_blocks) {
  std::vector<int32_t> out;
  if (!prefix_caching_) return out;
  const int64_t n_full = std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
  int32_t parent = -1;
  for (int64_t i = 0; i < n_full; ++i) {
    const int32_t id = find(parent, tokens.subspan(i * block_size_, block_size_));
    if (id < 0) break;
    Block& b = blocks_[id];
    if (b.refs++ == 0) evictable_.erase(b.lru_it);
    out.push_back(id);
    parent = id;
  }
  return out;
}

void KvBlockManager::publish(int32_t id, int32_t parent, std::span<const int32_t> tokens) {
  TESSERA_CHECK_ARG(id >= 0 && id < total() && blocks_[id].refs > 0 &&
                        static_cast<int64_t>(tokens.size()) == block_size_ &&
                        parent < total(),
                    "KV block manager: bad publish");
  if (!prefix_caching_ || blocks_[id].cached || find(parent, tokens) >= 0) return;
  Block& b = blocks_[id];
  b.cached = true;
  b.parent = parent;
  b.parent_generation = parent >= 0 ? blocks_[parent].generation : 0;
  b.tokens.assign(tokens.begin(), tokens.end());
  b.hash = key(parent, b.parent_generation, tokens);
  index_.emplace(b.hash, id);
}

}  // namespace tessera::runtime
