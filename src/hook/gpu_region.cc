#include "hook/gpu_region.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hook/shared_init.h"

namespace hf::hook {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
// One wait for a turn lasts at most this long before the waiter looks again
// (an abandoned turn, credit earned meanwhile).
constexpr int64_t kWaitSliceNs = 2'000'000;

int64_t Cap(uint32_t percent) {
  return kCreditWindowNs * static_cast<int64_t>(percent) / 100;
}

int64_t Threshold(uint32_t percent) {
  const int64_t half = Cap(percent) / 2;
  return half < kEligibleNs ? half : kEligibleNs;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, int64_t ns) {
  if (ns <= 0) return;
  timespec ts{static_cast<time_t>(ns / 1'000'000'000),
              static_cast<long>(ns % 1'000'000'000)};
  // A shared (not FUTEX_PRIVATE) wait: the word is in a file mapped by
  // several processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts,
          nullptr, 0);
}

bool ProcessGone(int pid) {
  return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

int64_t GpuRegion::NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no syscall
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

GpuRegion::~GpuRegion() {
  if (layout_ != nullptr) munmap(layout_, sizeof(GpuRegionLayout));
}

bool GpuRegion::Open(const char* path, const char** error) {
  const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    *error = "cannot open the GPU region file";
    return false;
  }
  // Growing a zero-length file is safe for everyone at once: ftruncate to
  // the same size is idempotent and the new bytes read as zero. A file of
  // another size is not a GPU region of this version.
  const off_t size = lseek(fd, 0, SEEK_END);
  if (size != 0 && size != static_cast<off_t>(sizeof(GpuRegionLayout))) {
    close(fd);
    *error =
        "the GPU region file is not a HeteroFlow GPU region (or another "
        "version)";
    return false;
  }
  if (size == 0 && ftruncate(fd, sizeof(GpuRegionLayout)) != 0) {
    close(fd);
    *error = "cannot size the GPU region file";
    return false;
  }
  const bool ok = MapAndInitialise(fd, error, "cannot map the GPU region file",
                                   "the GPU region file is not a HeteroFlow "
                                   "GPU region");
  close(fd);
  return ok;
}

bool GpuRegion::OpenPrivate(const char** error) {
  return MapAndInitialise(-1, error, "cannot map a private GPU region",
                          "cannot initialise a private GPU region");
}

bool GpuRegion::MapAndInitialise(int fd, const char** error,
                                 const char* map_error,
                                 const char* init_error) {
  void* p = mmap(nullptr, sizeof(GpuRegionLayout), PROT_READ | PROT_WRITE,
                 fd < 0 ? MAP_SHARED | MAP_ANONYMOUS : MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = map_error;
    return false;
  }
  layout_ = static_cast<GpuRegionLayout*>(p);
  if (!Initialise()) {
    munmap(layout_, sizeof(GpuRegionLayout));
    layout_ = nullptr;
    *error = init_error;
    return false;
  }
  return true;
}

bool GpuRegion::Initialise() {
  const bool ready =
      InitialiseOnce(layout_->init_state, layout_->init_pid, [this] {
        layout_->magic = kGpuRegionMagic;
        layout_->version = kGpuRegionVersion;
        InitRobustMutex(&layout_->lock);
      });
  return ready && layout_->magic == kGpuRegionMagic &&
         layout_->version == kGpuRegionVersion;
}

bool GpuRegion::Lock() {
  const int rc = pthread_mutex_lock(&layout_->lock);
  if (rc == EOWNERDEAD) {
    // A process died holding it. Every field is an atomic written whole,
    // and a turn it held is taken over as abandoned: nothing to repair.
    pthread_mutex_consistent(&layout_->lock);
    return true;
  }
  return rc == 0;
}

void GpuRegion::Unlock() { pthread_mutex_unlock(&layout_->lock); }

int GpuRegion::Join(uint64_t key, uint32_t percent, ComputeMode mode, int pid,
                    uint64_t start_ticks) {
  if (key == 0 || !Lock()) return -1;
  const int64_t now = NowNs();
  GpuRegionLayout& l = *layout_;
  // The slice's entry.
  int slice = -1;
  int free_slice = -1;
  for (int i = 0; i < kGpuSlices; ++i) {
    const uint64_t k = l.slices[i].key.load(kRelaxed);
    if (k == key) {
      slice = i;
      break;
    }
    if (k == 0 && free_slice < 0) free_slice = i;
  }
  if (slice < 0 && free_slice < 0) {
    // Free the entries of slices no live process belongs to.
    bool used[kGpuSlices] = {};
    for (int i = 0; i < kGpuProcesses; ++i) {
      GpuProcessEntry& p = l.processes[i];
      const int ppid = p.pid.load(kRelaxed);
      if (ppid == 0) continue;
      if (ProcessGone(ppid)) {
        p.pid.store(0, kRelaxed);
        continue;
      }
      const int s = p.slice.load(kRelaxed);
      if (s >= 0 && s < kGpuSlices) used[s] = true;
    }
    for (int i = 0; i < kGpuSlices && free_slice < 0; ++i) {
      if (!used[i]) free_slice = i;
    }
  }
  if (slice < 0) {
    if (free_slice < 0) {
      Unlock();
      return -1;
    }
    slice = free_slice;
    GpuSliceEntry& s = l.slices[slice];
    s.key.store(key, kRelaxed);
    s.credit_ns.store(0, kRelaxed);
    s.credit_at_ns.store(now, kRelaxed);
    s.charged_ns.store(0, kRelaxed);
    s.free_ns.store(0, kRelaxed);
    s.waited_ns.store(0, kRelaxed);
    s.turns.store(0, kRelaxed);
  }
  GpuSliceEntry& s = l.slices[slice];
  if (s.percent.load(kRelaxed) != percent) {
    s.credit_ns.store(CreditAt(s, now), kRelaxed);
    s.credit_at_ns.store(now, kRelaxed);
    s.percent.store(percent, kRelaxed);
  }
  s.mode.store(static_cast<uint32_t>(mode), kRelaxed);
  // The process's entry: its own (joined before), a free one, or one of a
  // dead process.
  int process = -1;
  int free_process = -1;
  for (int i = 0; i < kGpuProcesses; ++i) {
    GpuProcessEntry& p = l.processes[i];
    const int ppid = p.pid.load(kRelaxed);
    if (ppid == pid && p.start_ticks.load(kRelaxed) == start_ticks) {
      process = i;
      break;
    }
    if (free_process < 0 && (ppid == 0 || ProcessGone(ppid))) {
      free_process = i;
    }
  }
  if (process < 0) process = free_process;
  if (process >= 0) {
    GpuProcessEntry& p = l.processes[process];
    if (p.waiting_since.exchange(0, kRelaxed) != 0) {
      l.waiters.fetch_sub(1, kRelaxed);
    }
    if (l.owner.load(kRelaxed) == process + 1) {
      // A dead process's turn, still held: charge and hand it on.
      SettleLocked(now);
      HandOverLocked(now);
    }
    p.pid.store(pid, kRelaxed);
    p.start_ticks.store(start_ticks, kRelaxed);
    p.slice.store(slice, kRelaxed);
    p.in_call.store(0, kRelaxed);
    p.last_active_ns.store(now, kRelaxed);
    p.decided_ns.store(0, kRelaxed);
    if (l.process_high.load(kRelaxed) <= process) {
      l.process_high.store(process + 1, kRelaxed);
    }
  }
  Unlock();
  return process;
}

void GpuRegion::SetPercent(int process, uint32_t percent) {
  if (process < 0 || process >= kGpuProcesses || !Lock()) return;
  const int slice = layout_->processes[process].slice.load(kRelaxed);
  if (slice >= 0 && slice < kGpuSlices) {
    GpuSliceEntry& s = layout_->slices[slice];
    const int64_t now = NowNs();
    s.credit_ns.store(CreditAt(s, now), kRelaxed);
    s.credit_at_ns.store(now, kRelaxed);
    s.percent.store(percent, kRelaxed);
  }
  Unlock();
}

int64_t GpuRegion::CreditAt(const GpuSliceEntry& s, int64_t now) const {
  const uint32_t percent = s.percent.load(kRelaxed);
  const int64_t since = now - s.credit_at_ns.load(kRelaxed);
  int64_t credit = s.credit_ns.load(kRelaxed);
  if (since > 0) credit += since * static_cast<int64_t>(percent) / 100;
  const int64_t cap = Cap(percent);
  return credit > cap ? cap : credit;
}

void GpuRegion::SettleLocked(int64_t now) {
  GpuRegionLayout& l = *layout_;
  const int owner = l.owner.load(kRelaxed) - 1;
  if (owner < 0) return;
  const int64_t used = now - l.settled_ns.load(kRelaxed);
  if (used <= 0) return;
  l.settled_ns.store(now, kRelaxed);
  const int slice = l.processes[owner].slice.load(kRelaxed);
  if (slice < 0 || slice >= kGpuSlices) return;
  GpuSliceEntry& s = l.slices[slice];
  int64_t credit = CreditAt(s, now) - used;
  int64_t charged = used;
  if (static_cast<ComputeMode>(s.mode.load(kRelaxed)) ==
          ComputeMode::kWorkConserving &&
      credit < 0 && !OtherSliceWaitingLocked(slice)) {
    // Time nobody else wanted: the GPU would have idled. Not charged.
    const int64_t uncharged = -credit < used ? -credit : used;
    credit += uncharged;
    charged -= uncharged;
    s.free_ns.fetch_add(static_cast<uint64_t>(uncharged), kRelaxed);
  }
  s.credit_ns.store(credit, kRelaxed);
  s.credit_at_ns.store(now, kRelaxed);
  s.charged_ns.fetch_add(static_cast<uint64_t>(charged), kRelaxed);
}

bool GpuRegion::EligibleLocked(int slice, int64_t now) const {
  if (slice < 0 || slice >= kGpuSlices) return false;
  const GpuSliceEntry& s = layout_->slices[slice];
  return CreditAt(s, now) >= Threshold(s.percent.load(kRelaxed));
}

bool GpuRegion::OtherSliceWaitingLocked(int slice) const {
  const GpuRegionLayout& l = *layout_;
  if (l.waiters.load(kRelaxed) <= 0) return false;
  const int high = l.process_high.load(kRelaxed);
  for (int i = 0; i < high; ++i) {
    const GpuProcessEntry& p = l.processes[i];
    if (p.waiting_since.load(kRelaxed) != 0 &&
        p.slice.load(kRelaxed) != slice) {
      return true;
    }
  }
  return false;
}

bool GpuRegion::ShouldYieldLocked(int process, int64_t now) {
  GpuRegionLayout& l = *layout_;
  SettleLocked(now);
  const int slice = l.processes[process].slice.load(kRelaxed);
  if (slice < 0 || slice >= kGpuSlices) return false;
  const GpuSliceEntry& s = l.slices[slice];
  const int64_t credit = s.credit_ns.load(kRelaxed);
  const bool strict =
      static_cast<ComputeMode>(s.mode.load(kRelaxed)) == ComputeMode::kStrict;
  if (strict && credit <= 0) return true;
  if (l.waiters.load(kRelaxed) <= 0) return false;
  bool eligible_waiter = false;
  bool borrowing_waiter = false;
  const int high = l.process_high.load(kRelaxed);
  for (int i = 0; i < high; ++i) {
    const GpuProcessEntry& p = l.processes[i];
    if (i == process || p.waiting_since.load(kRelaxed) == 0) continue;
    const int other = p.slice.load(kRelaxed);
    if (EligibleLocked(other, now)) {
      eligible_waiter = true;
    } else if (other >= 0 && other < kGpuSlices &&
               static_cast<ComputeMode>(l.slices[other].mode.load(kRelaxed)) ==
                   ComputeMode::kWorkConserving) {
      borrowing_waiter = true;
    }
  }
  const bool in_credit = credit > 0;
  if (eligible_waiter && !in_credit) return true;
  if (now - l.turn_start_ns.load(kRelaxed) < kQuantumNs) return false;
  // Equally entitled: take turns.
  return eligible_waiter || (!in_credit && borrowing_waiter);
}

void GpuRegion::HandOverLocked(int64_t now) {
  GpuRegionLayout& l = *layout_;
  int best = -1;
  int best_rank = 0;
  int64_t best_since = 0;
  const int high = l.process_high.load(kRelaxed);
  const int owner = l.owner.load(kRelaxed) - 1;
  for (int i = 0; i < high; ++i) {
    GpuProcessEntry& p = l.processes[i];
    const int64_t since = p.waiting_since.load(kRelaxed);
    if (i == owner || since == 0) continue;
    const int slice = p.slice.load(kRelaxed);
    int rank = 0;
    if (EligibleLocked(slice, now)) {
      rank = 2;
    } else if (slice >= 0 && slice < kGpuSlices &&
               static_cast<ComputeMode>(l.slices[slice].mode.load(kRelaxed)) ==
                   ComputeMode::kWorkConserving) {
      rank = 1;
    }
    if (rank == 0) continue;
    if (rank > best_rank || (rank == best_rank && since < best_since)) {
      if (ProcessGone(p.pid.load(kRelaxed))) {
        p.waiting_since.store(0, kRelaxed);
        l.waiters.fetch_sub(1, kRelaxed);
        p.pid.store(0, kRelaxed);
        continue;
      }
      best = i;
      best_rank = rank;
      best_since = since;
    }
  }
  l.owner.store(best + 1, kRelaxed);
  l.turn_start_ns.store(now, kRelaxed);
  l.settled_ns.store(now, kRelaxed);
  if (best >= 0) {
    const int slice = l.processes[best].slice.load(kRelaxed);
    if (slice >= 0 && slice < kGpuSlices) {
      l.slices[slice].turns.fetch_add(1, kRelaxed);
    }
  }
  l.handovers.fetch_add(1, kRelaxed);
  Wake();
}

bool GpuRegion::OwnerGoneLocked(int owner, int64_t now) const {
  const GpuProcessEntry& p = layout_->processes[owner];
  if (p.pid.load(kRelaxed) == 0) return true;
  if (p.in_call.load(kRelaxed) == 0 &&
      now - p.last_active_ns.load(kRelaxed) >= kIdleNs) {
    return true;
  }
  return ProcessGone(p.pid.load(kRelaxed));
}

bool GpuRegion::TryTakeLocked(int process, int64_t now) {
  GpuRegionLayout& l = *layout_;
  const int owner = l.owner.load(kRelaxed) - 1;
  if (owner == process) return true;
  if (owner >= 0) {
    if (!OwnerGoneLocked(owner, now)) return false;
    SettleLocked(now);  // the abandoned turn is charged to its slice
    l.owner.store(0, kRelaxed);
  }
  const int slice = l.processes[process].slice.load(kRelaxed);
  if (!EligibleLocked(slice, now)) {
    if (static_cast<ComputeMode>(l.slices[slice].mode.load(kRelaxed)) !=
        ComputeMode::kWorkConserving) {
      return false;
    }
    // Borrowing: only when no eligible slice waits for the GPU.
    const int high = l.process_high.load(kRelaxed);
    for (int i = 0; i < high; ++i) {
      const GpuProcessEntry& p = l.processes[i];
      if (i != process && p.waiting_since.load(kRelaxed) != 0 &&
          EligibleLocked(p.slice.load(kRelaxed), now)) {
        return false;
      }
    }
  }
  l.owner.store(process + 1, kRelaxed);
  l.turn_start_ns.store(now, kRelaxed);
  l.settled_ns.store(now, kRelaxed);
  l.slices[slice].turns.fetch_add(1, kRelaxed);
  l.turn_seq.fetch_add(1, std::memory_order_release);
  return true;
}

void GpuRegion::StartWaiting(int process, int64_t now) {
  GpuProcessEntry& p = layout_->processes[process];
  int64_t expected = 0;
  if (p.waiting_since.compare_exchange_strong(expected, now, kRelaxed)) {
    layout_->waiters.fetch_add(1, kRelaxed);
  }
}

void GpuRegion::StopWaiting(int process, int64_t now) {
  GpuProcessEntry& p = layout_->processes[process];
  const int64_t since = p.waiting_since.exchange(0, kRelaxed);
  if (since == 0) return;
  layout_->waiters.fetch_sub(1, kRelaxed);
  const int slice = p.slice.load(kRelaxed);
  if (slice >= 0 && slice < kGpuSlices && now > since) {
    layout_->slices[slice].waited_ns.fetch_add(
        static_cast<uint64_t>(now - since), kRelaxed);
  }
}

void GpuRegion::Wake() {
  layout_->turn_seq.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&layout_->turn_seq),
          FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void GpuRegion::EnterCall(int process) {
  layout_->processes[process].in_call.fetch_add(1, kRelaxed);
}

void GpuRegion::ExitCall(int process) {
  GpuProcessEntry& p = layout_->processes[process];
  p.last_active_ns.store(NowNs(), kRelaxed);
  p.in_call.fetch_sub(1, kRelaxed);
}

void GpuRegion::AwaitTurn(int process, Drain drain, void* ctx) {
  if (process < 0 || process >= kGpuProcesses) return;
  GpuRegionLayout& l = *layout_;
  GpuProcessEntry& me = l.processes[process];
  for (;;) {
    int64_t now = NowNs();
    if (l.owner.load(std::memory_order_acquire) == process + 1) {
      me.last_active_ns.store(now, kRelaxed);
      const bool check = now - l.settled_ns.load(kRelaxed) >= kSettleNs ||
                         (l.waiters.load(kRelaxed) > 0 &&
                          now - me.decided_ns.load(kRelaxed) >= kDecideNs);
      if (!check) {
        if (me.waiting_since.load(kRelaxed) != 0) StopWaiting(process, now);
        return;  // the fast path: a few relaxed loads
      }
      if (!Lock()) return;
      const bool yield = l.owner.load(kRelaxed) == process + 1 &&
                         ShouldYieldLocked(process, now);
      me.decided_ns.store(now, kRelaxed);
      Unlock();
      if (!yield) {
        StopWaiting(process, now);
        return;
      }
      // Hand the GPU over only once this process's work has run: the
      // next turn starts on an idle GPU.
      if (drain != nullptr) drain(ctx);
      now = NowNs();
      if (!Lock()) return;
      if (l.owner.load(kRelaxed) == process + 1) {
        // A waiter from now on, but never its own successor: the hand-over
        // skips the holder.
        SettleLocked(now);
        StartWaiting(process, now);
        HandOverLocked(now);
      }
      Unlock();
    }
    StartWaiting(process, now);
    const uint32_t seen = l.turn_seq.load(std::memory_order_acquire);
    if (!Lock()) return;
    const bool took = TryTakeLocked(process, now);
    int64_t wait = kWaitSliceNs;
    if (!took) {
      // A strict slice without credit sleeps until it has earned a turn.
      const int slice = me.slice.load(kRelaxed);
      if (slice >= 0 && slice < kGpuSlices) {
        const GpuSliceEntry& s = l.slices[slice];
        const uint32_t percent = s.percent.load(kRelaxed);
        const int64_t short_by = Threshold(percent) - CreditAt(s, now);
        if (short_by > 0 && percent > 0) {
          const int64_t until = short_by * 100 / percent;
          if (until < wait) wait = until + 1000;
        }
      }
    }
    Unlock();
    if (took) {
      StopWaiting(process, NowNs());
      return;
    }
    FutexWait(&l.turn_seq, seen, wait);
  }
}

void GpuRegion::Leave(int process) {
  if (process < 0 || process >= kGpuProcesses || !Lock()) return;
  const int64_t now = NowNs();
  if (layout_->owner.load(kRelaxed) == process + 1) {
    SettleLocked(now);
    HandOverLocked(now);
  }
  StopWaiting(process, now);
  layout_->processes[process].pid.store(0, kRelaxed);
  Unlock();
}

int GpuRegion::Slices(GpuSliceStats* out, int capacity) {
  if (capacity <= 0 || !Lock()) return 0;
  const int64_t now = NowNs();
  SettleLocked(now);
  int n = 0;
  for (const GpuSliceEntry& s : layout_->slices) {
    if (n == capacity) break;
    const uint64_t key = s.key.load(kRelaxed);
    if (key == 0) continue;
    GpuSliceStats& o = out[n++];
    o.key = key;
    o.percent = s.percent.load(kRelaxed);
    o.mode = static_cast<ComputeMode>(s.mode.load(kRelaxed));
    o.credit_ns = CreditAt(s, now);
    o.charged_ns = s.charged_ns.load(kRelaxed);
    o.free_ns = s.free_ns.load(kRelaxed);
    o.waited_ns = s.waited_ns.load(kRelaxed);
    o.turns = s.turns.load(kRelaxed);
  }
  Unlock();
  return n;
}

bool GpuRegion::ChargeEscaped(uint64_t key, int64_t ns) {
  if (key == 0 || ns <= 0 || !Lock()) return false;
  const int64_t now = NowNs();
  SettleLocked(now);
  bool found = false;
  for (GpuSliceEntry& s : layout_->slices) {
    if (s.key.load(kRelaxed) != key) continue;
    int64_t credit = CreditAt(s, now) - ns;
    if (credit < -kMaxDebtNs) credit = -kMaxDebtNs;
    s.credit_ns.store(credit, kRelaxed);
    s.credit_at_ns.store(now, kRelaxed);
    found = true;
    break;
  }
  Unlock();
  return found;
}

GpuSliceStats GpuRegion::SliceStats(uint64_t key) {
  GpuSliceStats out;
  if (!Lock()) return out;
  const int64_t now = NowNs();
  SettleLocked(now);
  for (const GpuSliceEntry& s : layout_->slices) {
    if (s.key.load(kRelaxed) != key) continue;
    out.key = key;
    out.percent = s.percent.load(kRelaxed);
    out.mode = static_cast<ComputeMode>(s.mode.load(kRelaxed));
    out.credit_ns = CreditAt(s, now);
    out.charged_ns = s.charged_ns.load(kRelaxed);
    out.free_ns = s.free_ns.load(kRelaxed);
    out.waited_ns = s.waited_ns.load(kRelaxed);
    out.turns = s.turns.load(kRelaxed);
    break;
  }
  Unlock();
  return out;
}

}  // namespace hf::hook
