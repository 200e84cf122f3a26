#include "runtime/llm/kv_block_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"

namespace tessera::runtime {
namespace {

std::vector<int32_t> iota_tokens(int n, int first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(KvBlockManager, AllocatesEveryBlockOnceThenRunsOut) {
  KvBlockManager m(4, 16, true);
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(m.allocate());
  EXPECT_EQ(m.allocate(), -1);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(m.available(), 0);
  m.release(2);
  EXPECT_EQ(m.available(), 1);
  EXPECT_EQ(m.allocate(), 2);
  EXPECT_THROW(m.release(-1), Error);
}

TEST(KvBlockManager, DoubleReleaseIsAnError) {
  KvBlockManager m(2, 4, false);
  const int32_t b = m.allocate();
  m.release(b);
  EXPECT_THROW(m.release(b), Error);
}

TEST(KvBlockManager, PublishedChainIsMatchedAndReferenced) {
  KvBlockManager m(8, 4, true);
  const auto toks = iota_tokens(10);
  const int32_t b0 = m.allocate(), b1 = m.allocate();
  m.publish(b0, -1, std::span(toks).subspan(0, 4));
  m.publish(b1, b0, std::span(toks).subspan(4, 4));
  EXPECT_EQ(m.cached(), 2);
  auto hit = m.match_prefix(toks, 8);
  EXPECT_EQ(hit, (std::vector<int32_t>{b0, b1}));
  // max_blocks bounds the match.
  auto one = m.match_prefix(toks, 1);
  EXPECT_EQ(one, (std::vector<int32_t>{b0}));
  // Three references on b0 now: released three times before it becomes evictable.
  m.release_all(hit);
  m.release_all(one);
  EXPECT_EQ(m.available(), 6);
  m.release(b0);
  m.release(b1);
  EXPECT_EQ(m.available(), 8);
  EXPECT_EQ(m.cached(), 2);  // unreferenced but still cached
  EXPECT_EQ(m.match_prefix(toks, 8).size(), 2u);
}

TEST(KvBlockManager, EqualTokensAfterADifferentPrefixDoNotMatch) {
  KvBlockManager m(8, 4, true);
  const std::vector<int32_t> a = {1, 2, 3, 4, 9, 9, 9, 9}, b = {5, 6, 7, 8, 9, 9, 9, 9};
  const int32_t a0 = m.allocate(), a1 = m.allocate();
  m.publish(a0, -1, std::span(a).subspan(0, 4));
  m.publish(a1, a0, std::span(a).subspan(4, 4));
  EXPECT_TRUE(m.match_prefix(b, 2).empty());
  // A different first block that is also cached: its child is not a's second block.
  const int32_t b0 = m.allocate();
  m.publish(b0, -1, std::span(b).subspan(0, 4));
  auto hit = m.match_prefix(b, 2);
  EXPECT_EQ(hit, (std::vector<int32_t>{b0}));
}

TEST(KvBlockManager, EvictsLeastRecentlyReleasedAndForgetsItsChildren) {
  KvBlockManager m(3, 2, true);
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6};
  const int32_t b0 = m.allocate(), b1 = m.allocate(), b2 = m.allocate();
  m.publish(b0, -1, std::span(t).subspan(0, 2));
  m.publish(b1, b0, std::span(t).subspan(2, 2));
  m.publish(b2, b1, std::span(t).subspan(4, 2));
  m.release(b0);  // released first: evicted first
  m.release(b1);
  m.release(b2);
  const int32_t fresh = m.allocate();
  EXPECT_EQ(fresh, b0);
  // b0 now holds other data: b1 and b2 must not be reachable through it.
  m.publish(fresh, -1, std::span(t).subspan(0, 2));  // even with the same tokens again
  auto hit = m.match_prefix(t, 3);
  EXPECT_EQ(hit, (std::vector<int32_t>{fresh}));
}

TEST(KvBlockManager, DuplicatePublishKeepsTheFirst) {
  KvBlockManager m(4, 2, true);
  const std::vector<int32_t> t = {7, 8};
  const int32_t x = m.allocate(), y = m.allocate();
  m.publish(x, -1, t);
  m.publish(y, -1, t);
  EXPECT_EQ(m.cached(), 1);
  m.release(y);  // not cached: straight back to the free list
  EXPECT_EQ(m.match_prefix(t, 1), (std::vector<int32_t>{x}));
}

TEST(KvBlockManager, CachingOffNeverMatches) {
  KvBlockManager m(4, 2, false);
  const std::vector<int32_t> t = {7, 8};
  const int32_t x = m.allocate();
  m.publish(x, -1, t);
  EXPECT_TRUE(m.match_prefix(t, 1).empty());
  EXPECT_EQ(m.cached(), 0);
}

}  // namespace
}  // namespace tessera::runtime
