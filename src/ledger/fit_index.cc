#include "ledger/fit_index.h"

#include <algorithm>
#include <cassert>
#include <cstddef>

namespace hf::ledger {
namespace {

std::int32_t Saturate(std::int64_t v) {
  return static_cast<std::int32_t>(
      std::clamp<std::int64_t>(v, std::numeric_limits<std::int32_t>::min(),
                               std::numeric_limits<std::int32_t>::max()));
}

// Key order: primary, then rank and id (packed as rank << 32 | id). As one
// unsigned 128-bit number (primary with its sign bit flipped above, rank and
// id below) the order is a single compare with borrow, so a scan over a
// node's keys costs a few instructions a key and no branches.
bool KeyLess(std::int64_t ap, std::uint64_t ar, std::int64_t bp,
             std::uint64_t br) {
  constexpr std::uint64_t kSign = std::uint64_t{1} << 63;
  using Wide = unsigned __int128;
  const Wide a = (Wide{static_cast<std::uint64_t>(ap) ^ kSign} << 64) | ar;
  const Wide b = (Wide{static_cast<std::uint64_t>(bp) ^ kSign} << 64) | br;
  return a < b;
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

FitIndex::Packed FitIndex::AggregateOf(const Node& n) {
  // Over the node's positions only, each field a loop over its own array.
  Packed agg{std::numeric_limits<std::int32_t>::min(),
             std::numeric_limits<std::int32_t>::min(),
             std::numeric_limits<std::int32_t>::min(), 0};
  const int count = static_cast<int>(n.count);
  for (int i = 0; i < count; ++i) {
    agg.compute_free = std::max(agg.compute_free, n.compute[i]);
  }
  for (int i = 0; i < count; ++i) {
    agg.cpu_free = std::max(agg.cpu_free, n.cpu[i]);
  }
  for (int i = 0; i < count; ++i) {
    agg.host_memory_free = std::max(agg.host_memory_free, n.host[i]);
  }
  for (int i = 0; i < count; ++i) agg.model_mask |= n.mask[i];
  return agg;
}

FitIndex::Packed FitIndex::AttrsAt(const Node& n, int i) {
  return Packed{n.compute[i], n.cpu[i], n.host[i], n.mask[i]};
}

void FitIndex::PutAttrs(Node& n, int i, const Packed& p) {
  n.compute[i] = p.compute_free;
  n.cpu[i] = p.cpu_free;
  n.host[i] = p.host_memory_free;
  n.mask[i] = p.model_mask;
}

void FitIndex::Copy(const Node& from, int i, Node& to, int j) {
  to.primary[j] = from.primary[i];
  to.rank_id[j] = from.rank_id[i];
  to.compute[j] = from.compute[i];
  to.cpu[j] = from.cpu[i];
  to.host[j] = from.host[i];
  to.mask[j] = from.mask[i];
  to.ref[j] = from.ref[i];
}

void FitIndex::Shift(Node& n, int from, int to, int len) {
  // Moves positions [from, from + len) to [to, to + len) within one node,
  // element by element: for the few positions of a node, a library memmove
  // per array (what std::copy of them compiles to) costs more in calls than
  // the moves themselves (measured: Best-Fit's place + release at 1,000
  // GPUs, where the index is in cache, is that much slower with it).
  if (len <= 0 || from == to) return;
  const auto move = [&](auto* a) {
    if (to < from) {
      for (int k = 0; k < len; ++k) a[to + k] = a[from + k];
    } else {
      for (int k = len - 1; k >= 0; --k) a[to + k] = a[from + k];
    }
  };
  move(n.primary);
  move(n.rank_id);
  move(n.ref);
  move(n.compute);
  move(n.cpu);
  move(n.host);
  move(n.mask);
}

void FitIndex::PrefetchSearch(const Node& n) {
  // A node is a run of adjacent lines: ask for all a descent reads at once
  // (header, keys, refs), so a cold node costs about one miss, not one per
  // array; the attribute lines only where they will be read, so the misses
  // in flight are the ones the descent waits for.
  const char* p = reinterpret_cast<const char*>(&n);
  for (std::size_t off = 0; off < offsetof(Node, compute); off += 64) {
    __builtin_prefetch(p + off);
  }
}

void FitIndex::PrefetchAttrs(const Node& n) {
  const char* p = reinterpret_cast<const char*>(&n);
  for (std::size_t off = offsetof(Node, compute) & ~std::size_t{63};
       off < sizeof(Node); off += 64) {
    __builtin_prefetch(p + off);
  }
}

std::uint32_t FitIndex::AllocNode(bool leaf) {
  std::uint32_t n = 0;
  if (!free_nodes_.empty()) {
    n = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    n = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& node = nodes_[n];
  node.count = 0;
  node.leaf = leaf ? 1 : 0;
  node.total = 0;
  return n;
}

void FitIndex::FreeNode(std::uint32_t n) { free_nodes_.push_back(n); }

int FitIndex::Descend(Slot root, const Entry& e, PathStep* path) const {
  // Records, for each inner node from the root down, the child whose range
  // holds e's key; the last step is the leaf and the entry's position in it
  // (or where it would go). Returns the number of steps.
  const std::int64_t p = e.primary;
  const std::uint64_t r = RankId(e);
  int depth = 0;
  std::uint32_t t = root;
  for (;;) {
    const Node& n = nodes_[t];
    const int count = static_cast<int>(n.count);
    // Keys below e's (leaf) or not above it (inner), counted without a
    // branch per key: where a sorted run of 16 ends is not predictable.
    int below = 0;
    if (n.leaf != 0) {
      PrefetchAttrs(n);  // an insert or erase shifts them, SetAttrs writes
      for (int j = 0; j < count; ++j) {
        below += static_cast<int>(KeyLess(n.primary[j], n.rank_id[j], p, r));
      }
      path[depth++] = PathStep{t, below};
      return depth;
    }
    for (int j = 0; j < count; ++j) {
      below += static_cast<int>(!KeyLess(p, r, n.primary[j], n.rank_id[j]));
    }
    // The last child whose smallest key is not above e's (child 0 if none).
    const int i = std::max(below - 1, 0);
    path[depth++] = PathStep{t, i};
    t = n.ref[i];
    PrefetchSearch(nodes_[t]);
  }
}

void FitIndex::Insert(Root& root, Slot slot, const FitKey& key,
                      const FitAttrs& attrs) {
  assert(key.rank <= std::numeric_limits<std::uint32_t>::max());
  assert(key.id <= std::numeric_limits<std::uint32_t>::max());
  if (slot >= entries_.size()) {
    entries_.resize(static_cast<std::size_t>(slot) + 1);
    in_tree_.resize(static_cast<std::size_t>(slot) + 1, 0);
  }
  assert(!in_tree_[slot]);
  Entry& e = entries_[slot];
  e.primary = key.primary;
  e.rank = static_cast<std::uint32_t>(key.rank);
  e.id = static_cast<std::uint32_t>(key.id);
  e.attrs = Pack(attrs);
  in_tree_[slot] = 1;
  const Entry entry = e;  // nodes_ may grow below
  if (root == kNil) {
    root = AllocNode(/*leaf=*/true);
    Node& n = nodes_[root];
    n.primary[0] = entry.primary;
    n.rank_id[0] = RankId(entry);
    PutAttrs(n, 0, entry.attrs);
    n.ref[0] = slot;
    n.count = 1;
    n.total = 1;
    return;
  }

  PathStep path[kMaxDepth];
  const int depth = Descend(root, entry, path);
  ++nodes_[root].total;
  // The new entry joins every subtree on its path: fold it into their
  // aggregates, and into the smallest key where it comes first. Splits below
  // do not change what an inner node holds, only how it is divided.
  for (int d = 0; d + 1 < depth; ++d) {
    Node& n = nodes_[path[d].node];
    const int i = path[d].index;
    if (KeyLess(entry.primary, RankId(entry), n.primary[i], n.rank_id[i])) {
      n.primary[i] = entry.primary;
      n.rank_id[i] = RankId(entry);
    }
    n.compute[i] = std::max(n.compute[i], entry.attrs.compute_free);
    n.cpu[i] = std::max(n.cpu[i], entry.attrs.cpu_free);
    n.host[i] = std::max(n.host[i], entry.attrs.host_memory_free);
    n.mask[i] |= entry.attrs.model_mask;
  }

  // Put (key, attrs, ref) at position `pos` of node `t`; a full node splits
  // in two and its new right half goes into the parent the same way.
  std::int64_t put_primary = entry.primary;
  std::uint64_t put_rank_id = RankId(entry);
  Packed put_attrs = entry.attrs;
  std::uint32_t put_ref = slot;
  for (int d = depth - 1;; --d) {
    const std::uint32_t t = path[d].node;
    const int pos = d == depth - 1 ? path[d].index : path[d].index + 1;
    const auto place = [&](Node& n, int at) {
      Shift(n, at, at + 1, static_cast<int>(n.count) - at);
      n.primary[at] = put_primary;
      n.rank_id[at] = put_rank_id;
      PutAttrs(n, at, put_attrs);
      n.ref[at] = put_ref;
      ++n.count;
    };
    if (nodes_[t].count < kFanout) {
      place(nodes_[t], pos);
      return;
    }
    const std::uint32_t right = AllocNode(nodes_[t].leaf != 0);
    Node& l = nodes_[t];  // after AllocNode: nodes_ may have moved
    Node& r = nodes_[right];
    constexpr int kHalf = kFanout / 2;
    for (int i = kHalf; i < kFanout; ++i) Copy(l, i, r, i - kHalf);
    l.count = kHalf;
    r.count = kFanout - kHalf;
    if (pos <= kHalf) {
      place(l, pos);
    } else {
      place(r, pos - kHalf);
    }
    if (d == 0) {  // the root split: a new root above the two halves
      const std::uint32_t top = AllocNode(/*leaf=*/false);
      Node& n = nodes_[top];
      const Node& a = nodes_[t];
      const Node& b = nodes_[right];
      n.primary[0] = a.primary[0];
      n.rank_id[0] = a.rank_id[0];
      PutAttrs(n, 0, AggregateOf(a));
      n.ref[0] = t;
      n.primary[1] = b.primary[0];
      n.rank_id[1] = b.rank_id[0];
      PutAttrs(n, 1, AggregateOf(b));
      n.ref[1] = right;
      n.count = 2;
      n.total = a.total;
      root = top;
      return;
    }
    // The parent's entry for the left half now covers less than it did.
    Node& parent = nodes_[path[d - 1].node];
    PutAttrs(parent, path[d - 1].index, AggregateOf(l));
    put_primary = r.primary[0];
    put_rank_id = r.rank_id[0];
    put_attrs = AggregateOf(r);
    put_ref = right;
  }
}

void FitIndex::RefreshChild(std::uint32_t parent, int i) {
  Node& p = nodes_[parent];
  const Node& c = nodes_[p.ref[i]];
  p.primary[i] = c.primary[0];
  p.rank_id[i] = c.rank_id[0];
  PutAttrs(p, i, AggregateOf(c));
}

void FitIndex::Rebalance(std::uint32_t parent, int i) {
  // Child i of `parent` fell below kMinFill: merge it with a neighbour when
  // both fit in one node, else even the two out.
  const int li = i > 0 ? i - 1 : i;
  const int ri = li + 1;
  const std::uint32_t ln = nodes_[parent].ref[li];
  const std::uint32_t rn = nodes_[parent].ref[ri];
  Node& l = nodes_[ln];
  Node& r = nodes_[rn];
  const int lc = static_cast<int>(l.count);
  const int rc = static_cast<int>(r.count);
  if (lc + rc <= kFanout) {
    for (int k = 0; k < rc; ++k) Copy(r, k, l, lc + k);
    l.count = static_cast<std::uint32_t>(lc + rc);
    FreeNode(rn);
    Node& p = nodes_[parent];
    Shift(p, ri + 1, ri, static_cast<int>(p.count) - ri - 1);
    --p.count;
    RefreshChild(parent, li);
    return;
  }
  const int want = (lc + rc) / 2;  // entries left keeps
  if (lc > want) {
    const int move = lc - want;
    Shift(r, 0, move, rc);
    for (int k = 0; k < move; ++k) Copy(l, want + k, r, k);
  } else {
    const int move = want - lc;
    for (int k = 0; k < move; ++k) Copy(r, k, l, lc + k);
    Shift(r, move, 0, rc - move);
  }
  l.count = static_cast<std::uint32_t>(want);
  r.count = static_cast<std::uint32_t>(lc + rc - want);
  RefreshChild(parent, li);
  RefreshChild(parent, ri);
}

void FitIndex::Erase(Root& root, Slot slot) {
  assert(Contains(slot));
  PathStep path[kMaxDepth];
  const int depth = Descend(root, entries_[slot], path);
  in_tree_[slot] = 0;
  const std::uint32_t total = nodes_[root].total - 1;
  {
    Node& leaf = nodes_[path[depth - 1].node];
    const int pos = path[depth - 1].index;
    assert(pos < static_cast<int>(leaf.count) && leaf.ref[pos] == slot);
    Shift(leaf, pos + 1, pos, static_cast<int>(leaf.count) - pos - 1);
    --leaf.count;
  }
  // Bottom-up: each parent's smallest key and aggregate for the child below
  // it, rebalancing a child that fell below kMinFill. Where neither changed
  // and nothing merged, nothing above can change (only the root keeps the
  // size).
  for (int d = depth - 2; d >= 0; --d) {
    const std::uint32_t parent = path[d].node;
    const int i = path[d].index;
    const Node& child = nodes_[nodes_[parent].ref[i]];
    if (static_cast<int>(child.count) < kMinFill && nodes_[parent].count >= 2) {
      Rebalance(parent, i);
      continue;
    }
    Node& p = nodes_[parent];
    const Packed agg = AggregateOf(child);
    if (p.primary[i] == child.primary[0] && p.rank_id[i] == child.rank_id[0] &&
        AttrsAt(p, i) == agg) {
      break;
    }
    p.primary[i] = child.primary[0];
    p.rank_id[i] = child.rank_id[0];
    PutAttrs(p, i, agg);
  }
  // A root left with one child hands the tree to it; an empty root leaf
  // leaves the tree empty.
  while (nodes_[root].leaf == 0 && nodes_[root].count == 1) {
    const std::uint32_t child = nodes_[root].ref[0];
    FreeNode(root);
    root = child;
  }
  if (nodes_[root].count == 0) {
    FreeNode(root);
    root = kNil;
    return;
  }
  nodes_[root].total = total;
}

void FitIndex::SetAttrs(Root root, Slot slot, const FitAttrs& attrs) {
  assert(Contains(slot));
  Entry& e = entries_[slot];
  e.attrs = Pack(attrs);
  PathStep path[kMaxDepth];
  const int depth = Descend(root, e, path);
  Node& leaf = nodes_[path[depth - 1].node];
  assert(leaf.ref[path[depth - 1].index] == slot);
  PutAttrs(leaf, path[depth - 1].index, e.attrs);
  // Fix aggregates bottom-up and stop at the first that did not change:
  // nothing above it can change either.
  for (int d = depth - 2; d >= 0; --d) {
    Node& p = nodes_[path[d].node];
    const int i = path[d].index;
    const Packed agg = AggregateOf(nodes_[p.ref[i]]);
    if (AttrsAt(p, i) == agg) break;
    PutAttrs(p, i, agg);
  }
}

FitIndex::Slot FitIndex::Find(std::uint32_t t, std::int64_t min_primary,
                              const Packed& need, AcceptFn accept,
                              const void* ctx) const {
  const Node& n = nodes_[t];
  const int count = static_cast<int>(n.count);
  int i = 0;
  if (n.leaf != 0) {
    while (i < count && n.primary[i] < min_primary) ++i;
  } else {
    // Child i holds keys below child i + 1's smallest: skip the children
    // whose every key is below the bound.
    while (i + 1 < count && n.primary[i + 1] < min_primary) ++i;
  }
  for (; i < count; ++i) {
    if (!AttrsAt(n, i).Covers(need)) continue;
    if (n.leaf != 0) {
      if (accept(ctx, n.ref[i])) return n.ref[i];
    } else if (const Slot found =
                   Find(n.ref[i], min_primary, need, accept, ctx);
               found != kNil) {
      return found;
    }
  }
  return kNil;
}

}  // namespace hf::ledger
