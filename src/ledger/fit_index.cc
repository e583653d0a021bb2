#include "ledger/fit_index.h"

#include <algorithm>
#include <array>
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

std::int32_t Saturate(std::int64_t v) {
  return static_cast<std::int32_t>(
      std::clamp<std::int64_t>(v, std::numeric_limits<std::int32_t>::min(),
                               std::numeric_limits<std::int32_t>::max()));
}

}  // namespace

FitIndex::Packed FitIndex::Pack(const FitAttrs& a) {
  // Bits 31..63 fold into bit 31 on both sides of every comparison.
  std::uint32_t mask = static_cast<std::uint32_t>(a.model_mask & 0x7FFFFFFFu);
  if ((a.model_mask >> 31) != 0) mask |= 0x80000000u;
  return Packed{Saturate(a.compute_free), Saturate(a.cpu_free),
                Saturate(a.host_memory_free), mask};
}

FitAttrs FitIndex::Unpack(const Packed& p) {
  return FitAttrs{p.compute_free, p.cpu_free, p.host_memory_free, p.model_mask};
}

void FitIndex::Pull(Slot t) {
  Entry& e = pool_[t];
  Packed agg = e.attrs;
  std::uint32_t size = 1;
  for (Slot c : {e.left, e.right}) {
    if (c == kNil) continue;
    const Entry& child = pool_[c];
    agg.compute_free = std::max(agg.compute_free, child.agg.compute_free);
    agg.cpu_free = std::max(agg.cpu_free, child.agg.cpu_free);
    agg.host_memory_free =
        std::max(agg.host_memory_free, child.agg.host_memory_free);
    agg.model_mask |= child.agg.model_mask;
    size += child.size;
  }
  e.agg = agg;
  e.size = size;
}

void FitIndex::Insert(Root& root, Slot slot, const FitKey& key,
                      const FitAttrs& attrs) {
  assert(key.rank <= std::numeric_limits<std::uint32_t>::max());
  assert(key.id <= std::numeric_limits<std::uint32_t>::max());
  if (slot >= pool_.size()) {
    pool_.resize(static_cast<std::size_t>(slot) + 1);
    in_tree_.resize(static_cast<std::size_t>(slot) + 1, 0);
  }
  assert(!in_tree_[slot]);
  Entry& e = pool_[slot];
  e.primary = key.primary;
  e.rank = static_cast<std::uint32_t>(key.rank);
  e.id = static_cast<std::uint32_t>(key.id);
  e.attrs = Pack(attrs);
  e.agg = e.attrs;
  e.priority = PriorityOf(slot);
  e.size = 1;
  e.left = e.right = kNil;
  in_tree_[slot] = 1;
  root = InsertAt(root, slot);
}

FitIndex::Slot FitIndex::InsertAt(Slot t, Slot slot) {
  if (t == kNil) return slot;
  Entry& cur = pool_[t];
  // The new entry joins this subtree: fold it into the aggregate on the way
  // down, so only rotations (expected O(1) per insert) need a full Pull,
  // which reads the off-path child as well.
  const Packed& added = pool_[slot].attrs;
  cur.agg.compute_free = std::max(cur.agg.compute_free, added.compute_free);
  cur.agg.cpu_free = std::max(cur.agg.cpu_free, added.cpu_free);
  cur.agg.host_memory_free =
      std::max(cur.agg.host_memory_free, added.host_memory_free);
  cur.agg.model_mask |= added.model_mask;
  ++cur.size;
  if (pool_[slot].KeyLess(cur)) {
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
  root = EraseAt(root, slot);
  Entry& e = pool_[slot];
  e.left = e.right = kNil;
  in_tree_[slot] = 0;
}

FitIndex::Slot FitIndex::EraseAt(Slot t, Slot slot) {
  assert(t != kNil);
  if (t == slot) return Merge(pool_[t].left, pool_[t].right);
  Entry& cur = pool_[t];
  const bool go_left = pool_[slot].KeyLess(cur);
  // Pull below reads the off-path child as well: ask for it now, so that in
  // a tree larger than the caches its miss overlaps the rest of the descent
  // instead of adding one miss per level on the way back up.
  if (const Slot other = go_left ? cur.right : cur.left; other != kNil) {
    __builtin_prefetch(&pool_[other]);
  }
  if (go_left) {
    cur.left = EraseAt(cur.left, slot);
  } else {
    cur.right = EraseAt(cur.right, slot);
  }
  Pull(t);
  return t;
}

void FitIndex::SetAttrs(Root root, Slot slot, const FitAttrs& attrs) {
  assert(Contains(slot));
  // Walk down to the entry, remembering the path, then fix aggregates
  // bottom-up and stop at the first subtree whose aggregate did not change:
  // nothing above it can change either (sizes are unaffected).
  std::array<Slot, 256> path;
  std::size_t depth = 0;
  pool_[slot].attrs = Pack(attrs);
  for (Slot t = root; t != kNil;) {
    if (depth == path.size()) {  // pathological depth: recursive fallback
      [[maybe_unused]] bool found = RefreshPath(root, slot);
      assert(found);
      return;
    }
    path[depth++] = t;
    if (t == slot) break;
    t = pool_[slot].KeyLess(pool_[t]) ? pool_[t].left : pool_[t].right;
  }
  assert(depth > 0 && path[depth - 1] == slot);
  while (depth > 0) {
    const Slot t = path[--depth];
    const Packed before = pool_[t].agg;
    Pull(t);
    if (t != slot && pool_[t].agg == before) break;
  }
}

bool FitIndex::RefreshPath(Slot t, Slot slot) {
  if (t == kNil) return false;
  bool found = true;
  if (t != slot) {
    found = RefreshPath(
        pool_[slot].KeyLess(pool_[t]) ? pool_[t].left : pool_[t].right, slot);
  }
  Pull(t);
  return found;
}

FitIndex::Slot FitIndex::Find(Slot t, std::int64_t min_primary,
                              const Packed& need, AcceptFn accept,
                              const void* ctx) const {
  // Walk right past keys below the bound without recursion.
  while (t != kNil) {
    const Entry& e = pool_[t];
    if (!e.agg.Covers(need)) return kNil;
    if (e.primary >= min_primary) break;
    t = e.right;
  }
  if (t == kNil) return kNil;
  const Entry& e = pool_[t];
  if (Slot found = Find(e.left, min_primary, need, accept, ctx);
      found != kNil) {
    return found;
  }
  if (e.attrs.Covers(need) && accept(ctx, t)) return t;
  return Find(e.right, min_primary, need, accept, ctx);
}

}  // namespace hf::ledger
