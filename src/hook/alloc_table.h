// The process's table of live counted allocations: device pointer (or
// array / VMM / context handle) -> bytes charged to the slice. A free looks
// its size up here, so the cost of a free does not grow with the number of
// live allocations (HAMi-core walks a linked list).
//
// Open addressing with linear probing, split into shards by key hash, each
// shard behind its own spinlock: threads freeing different pointers rarely
// meet. Storage comes from mmap, not malloc, so the table works in any
// allocator state and forked children can drop it cheaply.
//
// No exceptions, no libstdc++ runtime (compiled into libhfhook.so).
// Thread-safety: all methods are thread-safe. After fork, the child calls
// ResetAfterFork (its parent's allocations are not its own).
#ifndef HF_HOOK_ALLOC_TABLE_H_
#define HF_HOOK_ALLOC_TABLE_H_

#include <atomic>
#include <cstdint>

namespace hf::hook {

// What a key names: the same numeric value may be a device pointer and a
// VMM handle at once, so the kind is part of the key.
enum class AllocKind : uint8_t {
  kDevicePointer = 1,  // cuMemAlloc*, pools, managed
  kArray = 2,          // cuArrayCreate, cuArray3DCreate
  kMipmappedArray = 3,
  kVmmHandle = 4,  // cuMemCreate
  kContext = 5,    // context memory
};

class AllocTable {
 public:
  AllocTable() = default;
  ~AllocTable();
  AllocTable(const AllocTable&) = delete;
  AllocTable& operator=(const AllocTable&) = delete;

  // Records `bytes` for (kind, key), replacing any previous entry. Returns
  // false only when no memory could be had for the table (the caller then
  // cannot count the allocation and must undo it).
  bool Insert(AllocKind kind, uint64_t key, uint64_t bytes);
  // Removes (kind, key); returns its bytes in `bytes`. False: not tracked.
  bool Remove(AllocKind kind, uint64_t key, uint64_t* bytes);
  // Adds `delta` to the entry's reference count (VMM handles retained by
  // cuMemRetainAllocationHandle). False: not tracked.
  bool AddRef(AllocKind kind, uint64_t key);
  // Drops one reference; when it was the last, removes the entry and
  // returns true with its bytes. `*tracked` says whether the key was known.
  bool Unref(AllocKind kind, uint64_t key, uint64_t* bytes, bool* tracked);

  // Live entries (locks each shard in turn: for tests and stats).
  uint64_t size();
  // In a forked child: forget everything (without unmapping: the parent's
  // locks may have been held at fork time, so nothing here is trusted).
  void ResetAfterFork();

 private:
  struct Entry {
    uint64_t key;  // 0 with kind 0: empty
    uint64_t bytes;
    uint32_t refs;
    uint8_t kind;  // 0: empty; 0xff: deleted
  };
  struct alignas(64) Shard {
    std::atomic<bool> busy{false};
    Entry* entries = nullptr;
    uint64_t capacity = 0;  // a power of two
    uint64_t live = 0;
    uint64_t used = 0;  // live + deleted
  };
  static constexpr int kShards = 64;
  static constexpr uint8_t kDeleted = 0xff;

  static uint64_t Hash(AllocKind kind, uint64_t key);
  Shard& ShardFor(uint64_t hash) { return shards_[hash % kShards]; }
  static void LockShard(Shard& s);
  static void UnlockShard(Shard& s);
  // REQUIRES: the shard's lock. Returns the slot holding (kind, key) or null.
  static Entry* Find(Shard& s, uint8_t kind, uint64_t key, uint64_t hash);
  static bool Grow(Shard& s);
  static void EraseAt(Shard& s, Entry* e);

  Shard shards_[kShards];
};

}  // namespace hf::hook

#endif  // HF_HOOK_ALLOC_TABLE_H_
