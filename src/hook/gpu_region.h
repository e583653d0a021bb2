// The GPU region: one small shared-memory file per physical GPU, created by
// the agent beside the slice regions and mapped by every hooked process on
// that GPU. Through it the slices on one GPU share the GPU's time by their
// compute shares (docs/HOOK.md, "Compute: the GPU's time by shares").
//
// The scheme is a **turn**: one process at a time holds the GPU and may
// launch; the others wait in their launch call. A turn is handed over only
// after the holder's queued work has finished (it synchronises first), so
// the work of two turns never overlaps on the GPU and the holder's turn is
// its slice's GPU time, measured by the clock.
//
// Each slice has a **credit** of GPU time: it accrues at the slice's share
// (25% earns 25 ms per 100 ms, up to a cap of the share of
// kCreditWindowNs), and a turn's length is charged to it. A slice is
// eligible for a turn while its credit is at least kEligibleNs (or half its
// cap, if smaller).
//  - strict: a slice takes and keeps a turn only while eligible and in
//    credit, so it never gets more than its share, alone or not;
//  - work-conserving: a slice without credit may still take a free turn
//    when no eligible slice waits, and GPU time used while no other slice
//    waited is not charged, so an idle GPU is never refused and a busy
//    slice still gets its share (an eligible waiter takes over at once
//    from a holder without credit).
// A holder also yields to a waiter after kQuantumNs when both are equally
// entitled (the processes of one slice take turns this way). A holder that
// has been idle for kIdleNs (no thread launching or synchronising) or has
// died loses its turn to a waiter.
//
// Every process of a slice joins the slice's one entry: its processes
// share one budget. The agent creates the file (mode 0666) and bind-mounts
// it into each container on the GPU; without one the hook uses a private
// region shared with the children it forks.
//
// No exceptions, no allocation, no libstdc++ runtime: compiled into
// libhfhook.so. Thread-safety: every method may be called from any thread of
// any process that mapped the region.
#ifndef HF_HOOK_GPU_REGION_H_
#define HF_HOOK_GPU_REGION_H_

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace hf::hook {

inline constexpr uint32_t kGpuRegionMagic = 0x48465431;  // "HFT1"
inline constexpr uint32_t kGpuRegionVersion = 1;
inline constexpr int kGpuSlices = 64;
inline constexpr int kGpuProcesses = 256;

inline constexpr int64_t kCreditWindowNs = 100'000'000;
inline constexpr int64_t kEligibleNs = 5'000'000;
inline constexpr int64_t kQuantumNs = 10'000'000;
inline constexpr int64_t kIdleNs = 2'000'000;
// The holder settles its charge at least this often (and decides whether
// to yield at most this often while others wait).
inline constexpr int64_t kSettleNs = 1'000'000;
inline constexpr int64_t kDecideNs = 200'000;
// The most a slice can owe after ChargeEscaped: a wrong measurement costs
// a slice this much of its share at worst.
inline constexpr int64_t kMaxDebtNs = 2'000'000'000;

enum class ComputeMode : uint32_t { kWorkConserving = 0, kStrict = 1 };

struct alignas(64) GpuSliceEntry {
  std::atomic<uint64_t> key;  // the slice id (0: free)
  std::atomic<uint32_t> percent;
  std::atomic<uint32_t> mode;      // ComputeMode
  std::atomic<int64_t> credit_ns;  // REQUIRES: the lock for writes
  std::atomic<int64_t> credit_at_ns;
  std::atomic<uint64_t> charged_ns;  // turn time charged, ever
  std::atomic<uint64_t> free_ns;     // turn time not charged (idle GPU)
  std::atomic<uint64_t> waited_ns;   // time its processes waited
  std::atomic<uint64_t> turns;
};

struct alignas(64) GpuProcessEntry {
  std::atomic<int32_t> pid;  // 0: free
  std::atomic<int32_t> slice;
  std::atomic<uint64_t> start_ticks;
  std::atomic<int64_t> waiting_since;  // 0: not waiting for a turn
  std::atomic<int32_t> in_call;        // threads in a launch or synchronise
  std::atomic<int32_t> unused;
  std::atomic<int64_t> last_active_ns;
  std::atomic<int64_t> decided_ns;  // the holder's last yield decision
};

struct GpuRegionLayout {
  uint32_t magic;
  uint32_t version;
  std::atomic<uint32_t> init_state;  // 0 zero-filled, 1 initialising, 2 ready
  std::atomic<int32_t> init_pid;
  pthread_mutex_t lock;            // robust, process-shared
  std::atomic<int32_t> owner;      // process entry + 1; 0: no turn held
  std::atomic<uint32_t> turn_seq;  // futex word: bumped at each hand-over
  std::atomic<int64_t> turn_start_ns;
  std::atomic<int64_t> settled_ns;  // the turn is charged up to here
  std::atomic<int32_t> waiters;
  std::atomic<int32_t> process_high;  // entries in use are below this
  std::atomic<uint64_t> handovers;
  GpuSliceEntry slices[kGpuSlices];
  GpuProcessEntry processes[kGpuProcesses];
};

struct GpuSliceStats {
  uint64_t key = 0;
  uint32_t percent = 0;
  ComputeMode mode = ComputeMode::kWorkConserving;
  int64_t credit_ns = 0;
  uint64_t charged_ns = 0;
  uint64_t free_ns = 0;
  uint64_t waited_ns = 0;
  uint64_t turns = 0;
};

class GpuRegion {
 public:
  GpuRegion() = default;
  ~GpuRegion();
  GpuRegion(const GpuRegion&) = delete;
  GpuRegion& operator=(const GpuRegion&) = delete;

  // Opens (creating) the GPU region at `path`. False, with a static
  // message in `error`, when it cannot be opened or is not a GPU region.
  bool Open(const char* path, const char** error);
  // A region shared only with the children this process forks.
  bool OpenPrivate(const char** error);
  bool is_open() const { return layout_ != nullptr; }

  // Joins the calling process to slice `key` (creating its entry with
  // `percent` and `mode`, or updating them). Returns the process entry, or
  // -1 when the region is full. Call again in a forked child.
  int Join(uint64_t key, uint32_t percent, ComputeMode mode, int pid,
           uint64_t start_ticks);
  // The slice's share changed (the agent's live update).
  void SetPercent(int process, uint32_t percent);

  // Returns once `process` holds the turn and may launch. `drain` waits for
  // the process's queued GPU work (called before the turn is handed over).
  using Drain = void (*)(void* ctx);
  void AwaitTurn(int process, Drain drain, void* ctx);
  // A thread of `process` enters / leaves a call that keeps the GPU busy
  // (a launch, a synchronise): the process is not idle meanwhile.
  void EnterCall(int process);
  void ExitCall(int process);
  // Gives the turn up if `process` holds it (a clean exit). REQUIRES: its
  // work drained.
  void Leave(int process);

  GpuSliceStats SliceStats(uint64_t key);
  // The slices that have an entry (live or not yet reclaimed), at most
  // `capacity` of them into `out`; returns how many were written.
  int Slices(GpuSliceStats* out, int capacity);
  // Charges `ns` of GPU time that slice `key` used outside its turns (the
  // agent's NVML feedback: work the turns did not see) against its credit,
  // which may then fall to -kMaxDebtNs at most. False when the slice has no
  // entry.
  bool ChargeEscaped(uint64_t key, int64_t ns);
  uint64_t handovers() const {
    return layout_->handovers.load(std::memory_order_relaxed);
  }

  static int64_t NowNs();

 private:
  bool Lock();
  void Unlock();
  bool Initialise();
  // Maps `fd` (-1: anonymous shared memory) and initialises it; on failure
  // sets `error` to `map_error` or `init_error`.
  bool MapAndInitialise(int fd, const char** error, const char* map_error,
                        const char* init_error);
  // The slice's credit at `now` without a turn running (accrued, capped).
  int64_t CreditAt(const GpuSliceEntry& s, int64_t now) const;
  // REQUIRES: the lock. Charges the running turn up to `now`.
  void SettleLocked(int64_t now);
  bool EligibleLocked(int slice, int64_t now) const;
  // REQUIRES: the lock. Whether the holder `process` should yield now.
  bool ShouldYieldLocked(int process, int64_t now);
  // REQUIRES: the lock. Hands the turn to the best waiter (or frees it).
  void HandOverLocked(int64_t now);
  // REQUIRES: the lock. Takes a free or abandoned turn for `process` if it
  // may have it.
  bool TryTakeLocked(int process, int64_t now);
  bool OwnerGoneLocked(int owner, int64_t now) const;
  bool OtherSliceWaitingLocked(int slice) const;
  void StartWaiting(int process, int64_t now);
  void StopWaiting(int process, int64_t now);
  void Wake();

  GpuRegionLayout* layout_ = nullptr;
};

}  // namespace hf::hook

#endif  // HF_HOOK_GPU_REGION_H_
