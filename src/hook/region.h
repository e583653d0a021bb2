// The slice's accounting region: one small shared-memory file per slice,
// mapped by every process of the slice that runs under the hook, and by the
// agent that created it. It holds the slice's memory quota, the bytes the
// slice's processes hold, one slot per attached process, and counters.
//
// Why this shape (the peers' failures it avoids, issue 6):
//  - Quota is reserved atomically *before* the real allocation, under one
//    process-shared ROBUST mutex: concurrent processes can never overshoot,
//    and a process killed while holding the lock never leaves it held (the
//    next locker gets EOWNERDEAD and repairs the totals from the slots).
//  - Each process's usage lives in its own slot (pid + process start time,
//    so a recycled pid is never mistaken for it); a dead process's usage is
//    reclaimed by the next process that needs the memory (the slow path of
//    Reserve), by a process attaching, or by the agent. Attaching scans the
//    slots without a syscall, so hundreds of processes can start at once.
//  - Readers of the totals (cuMemGetInfo, NVML) take no lock: `used` and
//    `quota` are atomics kept equal to the locked state.
//
// Only this header describes the layout; the hook and the agent both use
// this class (the agent creates the region and changes the quota live).
//
// No exceptions, no allocation, no libstdc++ runtime: this file is compiled
// into libhfhook.so. Thread-safety: every method is safe to call from any
// thread of any process that mapped the region.
#ifndef HF_HOOK_REGION_H_
#define HF_HOOK_REGION_H_

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>

namespace hf::hook {

inline constexpr uint32_t kRegionMagic = 0x48465231;  // "HFR1"
inline constexpr uint32_t kRegionVersion = 2;
inline constexpr int kRegionSlots = 1024;
// Slot 0 is shared by processes that found no free slot: its usage is never
// reclaimed (fail closed: leaked quota, never oversold memory).
inline constexpr int kOverflowSlot = 0;
inline constexpr uint64_t kUnlimited = ~uint64_t{0};

struct alignas(64) RegionSlot {
  // 0: free. Otherwise the owner's pid (low 32 bits) and a claim counter
  // (high bits), so a slot freed and claimed again is a new owner.
  std::atomic<uint64_t> owner;
  // The owner's process start time (clock ticks since boot, /proc/PID/stat
  // field 22): with the pid, it names one process for the life of the
  // machine.
  std::atomic<uint64_t> start_ticks;
  // Bytes this process holds. REQUIRES: the region lock for writes.
  std::atomic<uint64_t> used;
  std::atomic<uint64_t> quota_ooms;
};

struct RegionLayout {
  uint32_t magic;
  uint32_t version;
  // 0: zero-filled, 1: being initialised by `init_pid`, 2: ready.
  std::atomic<uint32_t> init_state;
  std::atomic<int32_t> init_pid;
  pthread_mutex_t lock;                    // robust, process-shared
  std::atomic<uint64_t> quota_bytes;       // kUnlimited: no memory cap
  std::atomic<uint32_t> compute_percent;   // 0: no compute limit
  std::atomic<uint32_t> quota_generation;  // bumped on each quota change
  std::atomic<uint64_t> used_bytes;        // == sum of slot.used
  std::atomic<uint64_t> peak_bytes;
  std::atomic<uint64_t> quota_ooms;       // refused by the quota
  std::atomic<uint64_t> physical_ooms;    // refused by the driver
  std::atomic<uint64_t> attaches;         // processes that ever attached
  std::atomic<uint64_t> reclaimed_bytes;  // taken back from dead processes
  std::atomic<uint64_t> recoveries;       // EOWNERDEAD repairs
  std::atomic<uint64_t> claims;           // slot claim counter
  std::atomic<uint64_t> lock_stalls;      // lock waits that timed out
  RegionSlot slots[kRegionSlots];
};

// What Reserve decided.
enum class ReserveResult { kOk, kOverQuota, kError };

struct RegionStats {
  uint64_t quota_bytes = kUnlimited;
  uint32_t compute_percent = 0;
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t quota_ooms = 0;
  uint64_t physical_ooms = 0;
  uint64_t attaches = 0;
  uint64_t reclaimed_bytes = 0;
  uint64_t recoveries = 0;
  uint64_t lock_stalls = 0;
  int live_processes = 0;  // slots held (dead holders until reclaimed)
};

class Region {
 public:
  Region() = default;
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  // Opens (creating it if missing) the region file at `path` and maps it.
  // A new region starts with `quota_bytes` and `compute_percent`; an
  // existing one keeps its own (the agent's word wins over the
  // environment). Returns false, with a message in `error` (a static
  // string), when the file cannot be opened or is not a region.
  bool Open(const char* path, uint64_t quota_bytes, uint32_t compute_percent,
            const char** error);
  // A region with no file: shared only with the children this process
  // forks (for a hook used without an agent and without a slice id).
  bool OpenPrivate(uint64_t quota_bytes, uint32_t compute_percent,
                   const char** error);

  // Claims this process's slot (the overflow slot when all are taken). No
  // syscall unless every slot is taken. REQUIRES: Open succeeded. Call again
  // in a forked child (ResetAfterFork first).
  void Attach(int pid, uint64_t start_ticks);
  // In a forked child: forget the parent's slot (the child attaches anew).
  void ResetAfterFork() { slot_ = -1; }
  // Gives this process's slot back, returning its usage. For clean exits.
  void Detach();

  // Reserves `bytes` of the quota for this process before the real
  // allocation. kOverQuota: the quota would be exceeded even after dead
  // processes' usage was reclaimed (counted as a quota OOM).
  // REQUIRES: Attach was called.
  ReserveResult Reserve(uint64_t bytes);
  // Charges `bytes` even past the quota (memory the driver took on its own,
  // e.g. a context). REQUIRES: Attach was called.
  void Charge(uint64_t bytes);
  // Returns `bytes` to the quota (a free, or a failed allocation). Never
  // takes more than this process holds.
  void Release(uint64_t bytes);
  // Counts an allocation the driver itself refused.
  void CountPhysicalOom();

  // Lock-free reads for cuMemGetInfo / NVML.
  uint64_t quota() const {
    return layout_->quota_bytes.load(std::memory_order_relaxed);
  }
  uint64_t used() const {
    return layout_->used_bytes.load(std::memory_order_relaxed);
  }
  uint32_t compute_percent() const {
    return layout_->compute_percent.load(std::memory_order_relaxed);
  }

  // Sets the quota live (dynamic quota, SPEC section 13). Lowering it below
  // the current usage refuses new allocations until usage drops; nothing
  // held is taken away.
  void SetQuota(uint64_t quota_bytes);
  void SetComputePercent(uint32_t percent);

  // Reclaims the usage of every slot whose process is gone. Returns the
  // bytes reclaimed. Costs one or two syscalls per occupied slot.
  uint64_t ReclaimDead();

  RegionStats Stats() const;
  bool is_open() const { return layout_ != nullptr; }
  int slot() const { return slot_; }

  // Reads this process's start time (field 22 of /proc/self/stat); 0 when
  // it cannot be read.
  static uint64_t ProcessStartTicks(int pid);
  // Whether the process `pid` that started at `start_ticks` still runs.
  static bool ProcessAlive(int pid, uint64_t start_ticks);

 private:
  bool Lock();  // false: the lock is unusable (never expected)
  void Unlock();
  void RepairLocked();  // after EOWNERDEAD: totals from the slots
  uint64_t ReclaimDeadLocked();
  bool Initialise(uint64_t quota_bytes, uint32_t compute_percent);
  // Maps `fd` (or, with -1, anonymous shared memory) and initialises it;
  // on failure sets `error` to `map_error` or `init_error`.
  bool MapAndInitialise(int fd, uint64_t quota_bytes, uint32_t compute_percent,
                        const char** error, const char* map_error,
                        const char* init_error);

  RegionLayout* layout_ = nullptr;
  int slot_ = -1;
};

}  // namespace hf::hook

#endif  // HF_HOOK_REGION_H_
