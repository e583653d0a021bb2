#include "ledger/fit_index.h"

#include <algorithm>
#include <cassert>

namespace hf::ledger {
namespace {

std::uint32_t PriorityOf(std::uint32_t slot) {
  // splitmix64 finaliser: a fixed pseudo-random heap priority per slot, so
  // the treap's shape is independent of insertion order.
  std::uint64_t z = slot + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return static_cast<std::uint32_t>(z ^ (z >> 31));
}

FitAttrs Combine(const FitAttrs& a, const FitAttrs& b) {
  return FitAttrs{std::max(a.compute_free, b.compute_free),
                  std::max(a.cpu_free, b.cpu_free),
                  std::max(a.host_memory_free, b.host_memory_free),
                  a.model_mask | b.model_mask};
}

}  // namespace

void FitIndex::Pull(Slot t) {
  Entry& e = pool_[t];
  e.agg = e.attrs;
  e.size = 1;
  if (e.left != kNil) {
    e.agg = Combine(e.agg, pool_[e.left].agg);
    e.size += pool_[e.left].size;
  }
  if (e.right != kNil) {
    e.agg = Combine(e.agg, pool_[e.right].agg);
    e.size += pool_[e.right].size;
  }
}

void FitIndex::Insert(Root& root, Slot slot, const FitKey& key,
                      const FitAttrs& attrs) {
  if (slot >= pool_.size()) pool_.resize(static_cast<std::size_t>(slot) + 1);
  Entry& e = pool_[slot];
  assert(!e.in_tree);
  e.key = key;
  e.attrs = attrs;
  e.agg = attrs;
  e.priority = PriorityOf(slot);
  e.size = 1;
  e.left = e.right = kNil;
  e.in_tree = true;
  root = InsertAt(root, slot);
}

FitIndex::Slot FitIndex::InsertAt(Slot t, Slot slot) {
  if (t == kNil) return slot;
  Entry& cur = pool_[t];
  if (pool_[slot].key < cur.key) {
    cur.left = InsertAt(cur.left, slot);
    if (pool_[cur.left].priority > cur.priority) {  // rotate right
      Slot l = cur.left;
      cur.left = pool_[l].right;
      Pull(t);
      pool_[l].right = t;
      Pull(l);
      return l;
    }
  } else {
    cur.right = InsertAt(cur.right, slot);
    if (pool_[cur.right].priority > cur.priority) {  // rotate left
      Slot r = cur.right;
      cur.right = pool_[r].left;
      Pull(t);
      pool_[r].left = t;
      Pull(r);
      return r;
    }
  }
  Pull(t);
  return t;
}

FitIndex::Slot FitIndex::Merge(Slot a, Slot b) {
  if (a == kNil) return b;
  if (b == kNil) return a;
  if (pool_[a].priority > pool_[b].priority) {
    pool_[a].right = Merge(pool_[a].right, b);
    Pull(a);
    return a;
  }
  pool_[b].left = Merge(a, pool_[b].left);
  Pull(b);
  return b;
}

void FitIndex::Erase(Root& root, Slot slot) {
  assert(Contains(slot));
  const FitKey key = pool_[slot].key;
  root = EraseAt(root, key);
  Entry& e = pool_[slot];
  e.in_tree = false;
  e.left = e.right = kNil;
}

FitIndex::Slot FitIndex::EraseAt(Slot t, const FitKey& key) {
  assert(t != kNil);
  Entry& cur = pool_[t];
  if (key == cur.key) return Merge(cur.left, cur.right);
  if (key < cur.key) {
    cur.left = EraseAt(cur.left, key);
  } else {
    cur.right = EraseAt(cur.right, key);
  }
  Pull(t);
  return t;
}

void FitIndex::SetAttrs(Root root, Slot slot, const FitAttrs& attrs) {
  assert(Contains(slot));
  pool_[slot].attrs = attrs;
  [[maybe_unused]] bool found = RefreshPath(root, pool_[slot].key);
  assert(found);
}

bool FitIndex::RefreshPath(Slot t, const FitKey& key) {
  if (t == kNil) return false;
  Entry& cur = pool_[t];
  bool found = true;
  if (key < cur.key) {
    found = RefreshPath(cur.left, key);
  } else if (cur.key < key) {
    found = RefreshPath(cur.right, key);
  }
  Pull(t);
  return found;
}

FitIndex::Slot FitIndex::FindFirst(
    Root root, std::int64_t min_primary, const FitAttrs& need,
    const std::function<bool(Slot)>& accept) const {
  return Find(root, min_primary, need, accept);
}

FitIndex::Slot FitIndex::Find(Slot t, std::int64_t min_primary,
                              const FitAttrs& need,
                              const std::function<bool(Slot)>& accept) const {
  // Walk right past keys below the bound without recursion.
  while (t != kNil) {
    const Entry& e = pool_[t];
    if (!e.agg.Covers(need)) return kNil;
    if (e.key.primary >= min_primary) break;
    t = e.right;
  }
  if (t == kNil) return kNil;
  const Entry& e = pool_[t];
  if (Slot found = Find(e.left, min_primary, need, accept); found != kNil) {
    return found;
  }
  if (e.attrs.Covers(need) && accept(t)) return t;
  return Find(e.right, min_primary, need, accept);
}

}  // namespace hf::ledger
