// FitIndex: ordered, augmented search trees over GPUs (or nodes) so Best-Fit
// placement finds its GPU without visiting the cluster.
//
// Each tree is a B+-tree ordered by FitKey (primary quantity, e.g. free
// memory; then a tie-break rank; then the id). Every entry carries FitAttrs
// (free compute, its node's free CPU and host memory, a model bit) and every
// inner node keeps, per child, the smallest key below it and the aggregate of
// the child's entries (maxima and the OR of model bits), so a search skips
// whole subtrees that cannot hold the request. The aggregates prune
// conservatively; the caller's exact predicate has the last word, so answers
// are exact.
//
// Why a B+-tree: the ledger changes a GPU's entry on every place and release
// (erase, then insert under its new key), and at 100,000 GPUs a binary tree is
// ~20 levels deep, most of them cold in the caches, one dependent miss per
// level. Here a node holds up to kFanout entries in arrays of their own (keys,
// each attribute, refs), so a change reads ~5 nodes, each a run of adjacent
// cache lines asked for at once, and the search within a node is in cache.
//
// Each entry's key and attributes are also kept per slot (a GPU's or node's
// dense id), so an entry sits in at most one tree at a time, erase and
// SetAttrs find it by key, and KeyOf / AttrsOf read no tree. Nodes come from
// one pool shared by all trees, reused through a free list, so no operation
// allocates once the pools have grown. A tree is just its root node, owned by
// the caller (kNil when empty). Attributes are stored saturated to 32 bits
// (model bits above 31 fold into bit 31) — both sides of every comparison are
// packed the same way, so packing can only weaken pruning, never hide a
// fitting entry.
//
// Cost: insert, erase and SetAttrs O(log n) (nodes are kept at least a
// quarter full, the root excepted); FindFirst O(log n) when a single
// attribute binds, more only when aggregates of different attributes pass in
// a subtree whose entries fail individually.
//
// Thread-safety: none; the owning Ledger serialises access.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace hf::ledger {

struct FitKey {
  std::int64_t primary = 0;  // e.g. free memory (MiB) or free GPU count
  std::uint64_t rank = 0;    // tie-break among equal primaries; < 2^32
  std::uint64_t id = 0;      // final tie-break; unique per entry; < 2^32

  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 false positive
  friend auto operator<=>(const FitKey&, const FitKey&) = default;
};

struct FitAttrs {
  std::int64_t compute_free = 0;
  std::int64_t cpu_free = 0;
  std::int64_t host_memory_free = 0;
  std::uint64_t model_mask = 0;

  friend bool operator==(const FitAttrs&, const FitAttrs&) = default;

  // True when these attributes (or an aggregate of them) can satisfy `need`.
  bool Covers(const FitAttrs& need) const {
    return compute_free >= need.compute_free && cpu_free >= need.cpu_free &&
           host_memory_free >= need.host_memory_free &&
           (model_mask & need.model_mask) != 0;
  }
};

class FitIndex {
 public:
  using Slot = std::uint32_t;
  static constexpr Slot kNil = std::numeric_limits<Slot>::max();
  using Root = std::uint32_t;  // a node of the pool; kNil = empty tree
  // Entries (leaf) or children (inner) per node: 16 keeps a node at ten cache
  // lines and a tree of 100,000 entries at about five levels.
  static constexpr int kFanout = 16;

  // Inserts `slot` (not in any tree) into `root`.
  // REQUIRES: key.rank and key.id < 2^32.
  void Insert(Root& root, Slot slot, const FitKey& key, const FitAttrs& attrs);
  // Removes `slot` from `root`. REQUIRES: slot is in root.
  void Erase(Root& root, Slot slot);
  // Replaces the attributes of `slot` (key unchanged) and fixes aggregates
  // on its path, bottom-up, stopping where nothing changes.
  // REQUIRES: slot is in root.
  void SetAttrs(Root root, Slot slot, const FitAttrs& attrs);

  bool Contains(Slot slot) const {
    return slot < in_tree_.size() && in_tree_[slot] != 0;
  }
  FitKey KeyOf(Slot slot) const {
    const Entry& e = entries_[slot];
    return FitKey{e.primary, e.rank, e.id};
  }
  // The stored attributes (as packed: saturated to 32 bits).
  FitAttrs AttrsOf(Slot slot) const { return Unpack(entries_[slot].attrs); }

  // The smallest-key entry with key.primary >= min_primary whose attributes
  // cover `need` and for which `accept(slot)` is true; kNil if none.
  // `accept` is any callable bool(Slot).
  template <typename Accept>
  Slot FindFirst(Root root, std::int64_t min_primary, const FitAttrs& need,
                 const Accept& accept) const {
    const auto call = [&accept](Slot slot) {
      return static_cast<bool>(accept(slot));
    };
    using Call = decltype(call);
    const auto thunk = [](const void* ctx, Slot slot) {
      return (*static_cast<const Call*>(ctx))(slot);
    };
    if (root == kNil) return kNil;
    return Find(root, min_primary, Pack(need), thunk, &call);
  }

  // Number of entries in the tree (O(1)).
  std::size_t SizeOf(Root root) const {
    return root == kNil ? 0 : nodes_[root].total;
  }

 private:
  struct Packed {
    std::int32_t compute_free = 0;
    std::int32_t cpu_free = 0;
    std::int32_t host_memory_free = 0;
    std::uint32_t model_mask = 0;

    friend bool operator==(const Packed&, const Packed&) = default;
    bool Covers(const Packed& need) const {
      return compute_free >= need.compute_free && cpu_free >= need.cpu_free &&
             host_memory_free >= need.host_memory_free &&
             (model_mask & need.model_mask) != 0;
    }
  };
  // What the index knows of a slot, wherever its entry sits in a tree.
  struct Entry {
    std::int64_t primary = 0;
    std::uint32_t rank = 0;
    std::uint32_t id = 0;
    Packed attrs;
  };

  // Below this a non-root node borrows from or merges with a sibling.
  static constexpr int kMinFill = kFanout / 4;
  // Depth bound: the root has >= 2 children, other nodes >= kMinFill, and
  // there are < 2^32 slots.
  static constexpr int kMaxDepth = 32;

  // One node. Position i holds, in a leaf, entry i (its key, attributes and
  // slot); in an inner node, child i (the smallest key below it, the
  // aggregate of its subtree and its node index). Each field in an array of
  // its own, so a search reads only the key lines.
  struct alignas(64) Node {
    // What a descent reads first: the header, keys and refs, in the node's
    // first six lines; the attribute arrays after them.
    std::uint32_t count;
    std::uint32_t leaf;    // 1 in a leaf
    std::uint32_t total;   // entries in the tree; kept in the root only
    std::uint32_t unused;  // pads the header to 16 bytes
    std::int64_t primary[kFanout];
    std::uint64_t rank_id[kFanout];  // rank << 32 | id
    std::uint32_t ref[kFanout];      // leaf: slot; inner: child node
    std::int32_t compute[kFanout];
    std::int32_t cpu[kFanout];
    std::int32_t host[kFanout];
    std::uint32_t mask[kFanout];
  };
  struct PathStep {
    std::uint32_t node;
    int index;
  };
  using AcceptFn = bool (*)(const void*, Slot);

  static Packed Pack(const FitAttrs& a);
  static FitAttrs Unpack(const Packed& p);
  static std::uint64_t RankId(const Entry& e) {
    return (std::uint64_t{e.rank} << 32) | e.id;
  }
  static Packed AggregateOf(const Node& n);
  static Packed AttrsAt(const Node& n, int i);
  static void PutAttrs(Node& n, int i, const Packed& p);
  static void Copy(const Node& from, int i, Node& to, int j);
  static void Shift(Node& n, int from, int to, int len);
  static void PrefetchSearch(const Node& n);
  static void PrefetchAttrs(const Node& n);

  std::uint32_t AllocNode(bool leaf);
  void FreeNode(std::uint32_t n);
  int Descend(Slot root, const Entry& e, PathStep* path) const;
  void Rebalance(std::uint32_t parent, int i);
  void RefreshChild(std::uint32_t parent, int i);
  Slot Find(std::uint32_t t, std::int64_t min_primary, const Packed& need,
            AcceptFn accept, const void* ctx) const;

  std::vector<Entry> entries_;  // by slot
  std::vector<std::uint8_t> in_tree_;
  std::vector<Node> nodes_;
  std::vector<std::uint32_t> free_nodes_;
};

}  // namespace hf::ledger
