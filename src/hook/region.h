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
//  - The quota holds the slice's real footprint on the card: what the hook
//    counted (its allocations) plus what it cannot see (context and module
//    memory, the driver's rounding). The agent measures the second part per
//    process through NVML and writes it into the slot (`driver_bytes`)
//    under the same lock, so a reservation sees both.
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
inline constexpr uint32_t kRegionVersion = 4;
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
  // Device memory of this process the hook did not count (NVML's usage of
  // the process minus `used`), as the agent last measured it. Only the
  // agent sets it (SetDriverBytes); whoever frees the slot clears it.
  // REQUIRES: the region lock for writes.
  std::atomic<uint64_t> driver_bytes;
};

// Interference sampling (docs/HOOK.md, "Interference"): the GPU time of a
// sample of the slice's kernel launches, per kernel class (the kernel and
// its launch shape), added by every hooked process of the slice, read by
// the agent. The counters only grow; a class once claimed keeps its entry
// for the region's life.
inline constexpr int kKernelClasses = 64;

struct alignas(64) KernelClass {
  std::atomic<uint64_t> key;  // 0: free
  std::atomic<uint64_t> samples;
  std::atomic<uint64_t> total_ns;
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
  // == sum of slot.driver_bytes + unattached_bytes: what the slice holds
  // on the card beyond used_bytes. The quota applies to the sum of both.
  std::atomic<uint64_t> driver_bytes;
  // Device memory of the slice's processes that hold no slot (they run
  // without the hook), as the agent measured it.
  std::atomic<uint64_t> unattached_bytes;
  std::atomic<uint64_t> driver_updates;   // SetDriverBytes calls
  std::atomic<uint64_t> peak_bytes;       // of used_bytes + driver_bytes
  std::atomic<uint64_t> quota_ooms;       // refused by the quota
  std::atomic<uint64_t> physical_ooms;    // refused by the driver
  std::atomic<uint64_t> attaches;         // processes that ever attached
  std::atomic<uint64_t> reclaimed_bytes;  // taken back from dead processes
  std::atomic<uint64_t> recoveries;       // EOWNERDEAD repairs
  std::atomic<uint64_t> claims;           // slot claim counter
  std::atomic<uint64_t> lock_stalls;      // lock waits that timed out
  RegionSlot slots[kRegionSlots];
  std::atomic<uint64_t> kernel_samples;  // timed launches recorded
  std::atomic<uint64_t> kernel_dropped;  // timed, but every class taken
  // The sampling period (launches per timed launch) the last process that
  // started or changed it chose; 0: sampling is off (turned off, or over
  // its cost budget).
  std::atomic<uint32_t> sample_period;
  std::atomic<uint32_t> unused;
  KernelClass kernels[kKernelClasses];
};

// What Reserve decided.
enum class ReserveResult { kOk, kOverQuota, kError };

struct RegionStats {
  uint64_t quota_bytes = kUnlimited;
  uint32_t compute_percent = 0;
  uint64_t used_bytes = 0;    // the footprint: counted + driver_bytes
  uint64_t driver_bytes = 0;  // of used_bytes, what the agent measured
  uint64_t driver_updates = 0;
  uint64_t peak_bytes = 0;
  uint64_t quota_ooms = 0;
  uint64_t physical_ooms = 0;
  uint64_t attaches = 0;
  uint64_t reclaimed_bytes = 0;
  uint64_t recoveries = 0;
  uint64_t lock_stalls = 0;
  uint64_t kernel_samples = 0;  // timed launches recorded
  uint64_t kernel_dropped = 0;
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
  // allocation. kOverQuota: the footprint (used()) plus `bytes` would
  // exceed the quota even after dead processes' usage was reclaimed
  // (counted as a quota OOM).
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
  // The slice's footprint on the card, what the quota is checked against:
  // counted() + driver_bytes().
  uint64_t used() const { return counted() + driver_bytes(); }
  // What the hook counted (allocations, HETEROFLOW_HOOK_CONTEXT_MB).
  uint64_t counted() const {
    return layout_->used_bytes.load(std::memory_order_relaxed);
  }
  // What the agent measured beyond it (SetDriverBytes).
  uint64_t driver_bytes() const {
    return layout_->driver_bytes.load(std::memory_order_relaxed);
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

  // For the agent, which reads the slots to tell which processes attached.
  struct SlotView {
    uint64_t owner = 0;  // the claim (pid in the low 32 bits); 0: free
    uint32_t pid = 0;    // in the owner's own pid namespace
    uint64_t start_ticks = 0;
    uint64_t used = 0;
    uint64_t driver_bytes = 0;
  };
  // Slot `index` (1..kRegionSlots-1) as it is now, without the lock; false
  // when it is free or out of range. The fields may be a moment apart.
  bool ReadSlot(int index, SlotView* out) const;
  // The slot whose owner has this in-namespace pid and start time (a start
  // time of 0 on either side matches any), or -1. No lock, no syscall.
  int FindSlot(uint32_t pid, uint64_t start_ticks, SlotView* out) const;

  // The agent's measurement: each listed slot's driver_bytes, for a slot
  // still held by `owner` (one claimed again since is a new process and
  // gets 0), 0 for every slot not listed, and `unattached_bytes` for the
  // slice's processes that hold no slot. Under the lock, so a concurrent
  // Reserve sees all of it or none.
  struct DriverBytes {
    int slot = 0;
    uint64_t owner = 0;
    uint64_t bytes = 0;
  };
  void SetDriverBytes(const DriverBytes* entries, int count,
                      uint64_t unattached_bytes);

  // Interference sampling. RecordKernel adds one timed launch of kernel
  // class `key` (not 0) that took `ns` on the GPU; a class that finds no
  // free entry is counted as dropped. Lock-free.
  void RecordKernel(uint64_t key, uint64_t ns);
  void NoteSamplePeriod(uint32_t period);
  struct KernelView {
    uint64_t key = 0;
    uint64_t samples = 0;
    uint64_t total_ns = 0;
  };
  // Copies the claimed classes into `out` (at most `max`); returns how
  // many. The two counters of a class may be one launch apart.
  int ReadKernels(KernelView* out, int max) const;
  uint32_t sample_period() const {
    return layout_->sample_period.load(std::memory_order_relaxed);
  }

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
  // Zeroes a slot's driver_bytes (its process is gone) and takes them off
  // the total; returns them.
  uint64_t ClearDriverBytesLocked(RegionSlot& slot);
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
