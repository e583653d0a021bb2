#include "hook/alloc_table.h"

#include <sys/mman.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hf::hook {
namespace {

constexpr uint64_t kInitialCapacity = 64;

void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void* MapZeroed(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

AllocTable::~AllocTable() {
  for (auto& s : shards_) {
    if (s.entries != nullptr) munmap(s.entries, s.capacity * sizeof(Entry));
  }
}

uint64_t AllocTable::Hash(AllocKind kind, uint64_t key) {
  // MurmurHash3's 64-bit finaliser: device pointers are aligned, so their
  // low bits carry nothing; this spreads every bit over the whole word.
  uint64_t h = key ^ (static_cast<uint64_t>(kind) * 0x9e3779b97f4a7c15ULL);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

void AllocTable::LockShard(Shard& s) {
  for (;;) {
    if (!s.busy.exchange(true, std::memory_order_acquire)) return;
    while (s.busy.load(std::memory_order_relaxed)) CpuRelax();
  }
}

void AllocTable::UnlockShard(Shard& s) {
  s.busy.store(false, std::memory_order_release);
}

AllocTable::Entry* AllocTable::Find(Shard& s, uint8_t kind, uint64_t key,
                                    uint64_t hash) {
  if (s.capacity == 0) return nullptr;
  const uint64_t mask = s.capacity - 1;
  for (uint64_t i = (hash >> 6) & mask, n = 0; n < s.capacity;
       i = (i + 1) & mask, ++n) {
    Entry& e = s.entries[i];
    if (e.kind == 0) return nullptr;
    if (e.kind == kind && e.key == key) return &e;
  }
  return nullptr;
}

bool AllocTable::Grow(Shard& s) {
  // Rehash into twice the room (or the same room, when deletions filled
  // it), dropping the deleted markers.
  const uint64_t capacity = s.capacity == 0            ? kInitialCapacity
                            : s.live * 2 >= s.capacity ? s.capacity * 2
                                                       : s.capacity;
  auto* entries = static_cast<Entry*>(MapZeroed(capacity * sizeof(Entry)));
  if (entries == nullptr) return false;
  const uint64_t mask = capacity - 1;
  for (uint64_t i = 0; i < s.capacity; ++i) {
    const Entry& e = s.entries[i];
    if (e.kind == 0 || e.kind == kDeleted) continue;
    uint64_t j = (Hash(static_cast<AllocKind>(e.kind), e.key) >> 6) & mask;
    while (entries[j].kind != 0) j = (j + 1) & mask;
    entries[j] = e;
  }
  if (s.entries != nullptr) munmap(s.entries, s.capacity * sizeof(Entry));
  s.entries = entries;
  s.capacity = capacity;
  s.used = s.live;
  return true;
}

void AllocTable::EraseAt(Shard& s, Entry* e) {
  // If the next slot is empty, no probe sequence runs through this one:
  // mark it empty, not deleted, so tables with churn stay short.
  const uint64_t mask = s.capacity - 1;
  const uint64_t next = (static_cast<uint64_t>(e - s.entries) + 1) & mask;
  if (s.entries[next].kind == 0) {
    e->kind = 0;
    --s.used;
  } else {
    e->kind = kDeleted;
  }
  --s.live;
}

bool AllocTable::Insert(AllocKind kind, uint64_t key, uint64_t bytes) {
  const uint64_t hash = Hash(kind, key);
  Shard& s = ShardFor(hash);
  LockShard(s);
  if (Entry* e = Find(s, static_cast<uint8_t>(kind), key, hash)) {
    e->bytes = bytes;
    e->refs = 1;
    UnlockShard(s);
    return true;
  }
  // Keep at most half the slots occupied (live or deleted).
  if ((s.used + 1) * 2 > s.capacity && !Grow(s)) {
    UnlockShard(s);
    return false;
  }
  const uint64_t mask = s.capacity - 1;
  uint64_t i = (hash >> 6) & mask;
  while (s.entries[i].kind != 0 && s.entries[i].kind != kDeleted) {
    i = (i + 1) & mask;
  }
  if (s.entries[i].kind == 0) ++s.used;
  s.entries[i] = Entry{key, bytes, 1, static_cast<uint8_t>(kind)};
  ++s.live;
  UnlockShard(s);
  return true;
}

bool AllocTable::Remove(AllocKind kind, uint64_t key, uint64_t* bytes) {
  const uint64_t hash = Hash(kind, key);
  Shard& s = ShardFor(hash);
  LockShard(s);
  Entry* e = Find(s, static_cast<uint8_t>(kind), key, hash);
  if (e != nullptr) {
    *bytes = e->bytes;
    EraseAt(s, e);
  }
  UnlockShard(s);
  return e != nullptr;
}

bool AllocTable::AddRef(AllocKind kind, uint64_t key) {
  const uint64_t hash = Hash(kind, key);
  Shard& s = ShardFor(hash);
  LockShard(s);
  Entry* e = Find(s, static_cast<uint8_t>(kind), key, hash);
  if (e != nullptr) ++e->refs;
  UnlockShard(s);
  return e != nullptr;
}

bool AllocTable::Unref(AllocKind kind, uint64_t key, uint64_t* bytes,
                       bool* tracked) {
  const uint64_t hash = Hash(kind, key);
  Shard& s = ShardFor(hash);
  LockShard(s);
  Entry* e = Find(s, static_cast<uint8_t>(kind), key, hash);
  *tracked = e != nullptr;
  bool last = false;
  if (e != nullptr && --e->refs == 0) {
    *bytes = e->bytes;
    EraseAt(s, e);
    last = true;
  }
  UnlockShard(s);
  return last;
}

uint64_t AllocTable::size() {
  uint64_t n = 0;
  for (auto& s : shards_) {
    LockShard(s);
    n += s.live;
    UnlockShard(s);
  }
  return n;
}

void AllocTable::ResetAfterFork() {
  for (auto& s : shards_) {
    // The parent's mapping is the child's private copy: drop it.
    if (s.entries != nullptr) munmap(s.entries, s.capacity * sizeof(Entry));
    s.entries = nullptr;
    s.capacity = s.live = s.used = 0;
    s.busy.store(false, std::memory_order_relaxed);
  }
}

}  // namespace hf::hook
