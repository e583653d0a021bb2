#include "hook/region.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif
#include <cstring>

#include "hook/shared_init.h"

namespace hf::hook {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// How long one wait for the region lock lasts before it is tried afresh.
// The lock is held for well under a microsecond; a wait this long means a
// preempted holder or a lost wake-up (see Region::Lock).
constexpr long kLockStallNs = 20'000'000;

uint32_t OwnerPid(uint64_t owner) { return static_cast<uint32_t>(owner); }

void RaisePeak(std::atomic<uint64_t>& peak, uint64_t value) {
  uint64_t seen = peak.load(kRelaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, kRelaxed)) {
  }
}

}  // namespace

Region::~Region() {
  if (layout_ != nullptr) munmap(layout_, sizeof(RegionLayout));
}

bool Region::Open(const char* path, uint64_t quota_bytes,
                  uint32_t compute_percent, const char** error) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0660);
  if (fd < 0) {
    *error = "cannot open the region file";
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    *error = "cannot stat the region file";
    return false;
  }
  // Growing a zero-length file is safe for everyone at once: ftruncate to
  // the same size is idempotent and the new bytes read as zero.
  if (st.st_size < static_cast<off_t>(sizeof(RegionLayout)) &&
      ftruncate(fd, sizeof(RegionLayout)) != 0) {
    close(fd);
    *error = "cannot size the region file";
    return false;
  }
  const bool ok = MapAndInitialise(
      fd, quota_bytes, compute_percent, error, "cannot map the region file",
      "the region file is not a HeteroFlow region (or another version)");
  close(fd);
  return ok;
}

bool Region::OpenPrivate(uint64_t quota_bytes, uint32_t compute_percent,
                         const char** error) {
  return MapAndInitialise(-1, quota_bytes, compute_percent, error,
                          "cannot map a private region",
                          "cannot initialise a private region");
}

bool Region::MapAndInitialise(int fd, uint64_t quota_bytes,
                              uint32_t compute_percent, const char** error,
                              const char* map_error, const char* init_error) {
  void* p = mmap(nullptr, sizeof(RegionLayout), PROT_READ | PROT_WRITE,
                 fd < 0 ? MAP_SHARED | MAP_ANONYMOUS : MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = map_error;
    return false;
  }
  layout_ = static_cast<RegionLayout*>(p);
  if (!Initialise(quota_bytes, compute_percent)) {
    munmap(layout_, sizeof(RegionLayout));
    layout_ = nullptr;
    *error = init_error;
    return false;
  }
  return true;
}

bool Region::Initialise(uint64_t quota_bytes, uint32_t compute_percent) {
  const bool ready =
      InitialiseOnce(layout_->init_state, layout_->init_pid, [&] {
        layout_->magic = kRegionMagic;
        layout_->version = kRegionVersion;
        InitRobustMutex(&layout_->lock);
        layout_->quota_bytes.store(quota_bytes, kRelaxed);
        layout_->compute_percent.store(compute_percent, kRelaxed);
      });
  if (!ready) return false;
  return layout_->magic == kRegionMagic && layout_->version == kRegionVersion;
}

bool Region::Lock() {
  // Never an unbounded wait. A robust mutex repairs an owner that died
  // holding it (EOWNERDEAD below), but not one killed inside unlock after
  // the lock word was cleared and before the waiters were woken: if a
  // third process takes the free lock in that gap, the "waiters" bit is
  // gone and a sleeping waiter is never woken (seen here: a storm survivor
  // asleep on a free lock). So a wait that lasts kLockStallNs gives up and
  // tries again; the uncontended path stays one compare-and-swap.
  int rc = pthread_mutex_trylock(&layout_->lock);
  bool timed = false;  // rc is pthread_mutex_timedlock's
  while (rc == EBUSY || rc == ETIMEDOUT) {
    timed = true;
    timespec deadline{};
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += kLockStallNs;
    if (deadline.tv_nsec >= 1'000'000'000) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1'000'000'000;
    }
    rc = pthread_mutex_timedlock(&layout_->lock, &deadline);
    if (rc == ETIMEDOUT) layout_->lock_stalls.fetch_add(1, kRelaxed);
  }
  if (rc == EOWNERDEAD) {
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer's pthread_mutex_timedlock takes only a return of 0
    // for a lock (its trylock takes EOWNERDEAD too): without this it
    // reports the Unlock below as an unlock of an unlocked mutex.
    if (timed) {
      __tsan_mutex_pre_lock(&layout_->lock, 0);
      __tsan_mutex_post_lock(&layout_->lock, 0, 0);
    }
#else
    (void)timed;
#endif
    // A process died holding the lock, maybe half-way through an update:
    // the slots are the truth, the totals are derived from them.
    RepairLocked();
    pthread_mutex_consistent(&layout_->lock);
    return true;
  }
  return rc == 0;
}

void Region::Unlock() { pthread_mutex_unlock(&layout_->lock); }

void Region::RepairLocked() {
  uint64_t sum = 0;
  uint64_t driver = layout_->unattached_bytes.load(kRelaxed);
  for (auto& s : layout_->slots) {
    if (s.owner.load(kRelaxed) != 0 || &s == &layout_->slots[kOverflowSlot]) {
      sum += s.used.load(kRelaxed);
      driver += s.driver_bytes.load(kRelaxed);
    }
  }
  layout_->used_bytes.store(sum, kRelaxed);
  layout_->driver_bytes.store(driver, kRelaxed);
  layout_->recoveries.fetch_add(1, kRelaxed);
}

void Region::Attach(int pid, uint64_t start_ticks) {
  layout_->attaches.fetch_add(1, kRelaxed);
  // Claim a free slot with one CAS; no lock and no syscall, so hundreds of
  // processes starting together do not queue. The claim counter makes
  // every owner value unique.
  const uint64_t claim = layout_->claims.fetch_add(1, kRelaxed) + 1;
  const uint64_t me = (claim << 32) | static_cast<uint32_t>(pid);
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 1; i < kRegionSlots; ++i) {
      RegionSlot& s = layout_->slots[i];
      uint64_t expected = 0;
      if (s.owner.load(kRelaxed) == 0 &&
          s.owner.compare_exchange_strong(expected, me,
                                          std::memory_order_acq_rel)) {
        s.start_ticks.store(start_ticks, kRelaxed);
        s.quota_ooms.store(0, kRelaxed);
        slot_ = i;
        return;
      }
    }
    // Every slot is taken: give dead processes' slots back and try again.
    if (pass == 0) ReclaimDead();
  }
  slot_ = kOverflowSlot;
}

void Region::Detach() {
  if (slot_ <= kOverflowSlot) {
    slot_ = -1;
    return;
  }
  if (!Lock()) return;
  RegionSlot& s = layout_->slots[slot_];
  const uint64_t held = s.used.load(kRelaxed);
  s.used.store(0, kRelaxed);
  const uint64_t total = layout_->used_bytes.load(kRelaxed);
  layout_->used_bytes.store(total >= held ? total - held : 0, kRelaxed);
  ClearDriverBytesLocked(s);
  s.owner.store(0, std::memory_order_release);
  Unlock();
  slot_ = -1;
}

ReserveResult Region::Reserve(uint64_t bytes) {
  if (slot_ < 0) return ReserveResult::kError;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!Lock()) return ReserveResult::kError;
    const uint64_t quota = layout_->quota_bytes.load(kRelaxed);
    const uint64_t used = layout_->used_bytes.load(kRelaxed);
    // The footprint: what the hook counted and what the driver holds
    // beyond it (the agent's measurement).
    const uint64_t driver = layout_->driver_bytes.load(kRelaxed);
    const uint64_t footprint = used + driver;
    if (bytes <= quota && footprint <= quota - bytes) {
      RegionSlot& s = layout_->slots[slot_];
      // Slot first, total second: a death between the two is repaired from
      // the slots.
      s.used.store(s.used.load(kRelaxed) + bytes, kRelaxed);
      layout_->used_bytes.store(used + bytes, kRelaxed);
      Unlock();
      RaisePeak(layout_->peak_bytes, footprint + bytes);
      return ReserveResult::kOk;
    }
    // Over the quota: unless dead processes still hold some of it, no.
    const uint64_t reclaimed = attempt == 0 ? ReclaimDeadLocked() : 0;
    Unlock();
    if (reclaimed == 0) break;
  }
  layout_->quota_ooms.fetch_add(1, kRelaxed);
  if (slot_ >= 0) layout_->slots[slot_].quota_ooms.fetch_add(1, kRelaxed);
  return ReserveResult::kOverQuota;
}

void Region::Charge(uint64_t bytes) {
  if (slot_ < 0 || !Lock()) return;
  RegionSlot& s = layout_->slots[slot_];
  s.used.store(s.used.load(kRelaxed) + bytes, kRelaxed);
  const uint64_t used = layout_->used_bytes.load(kRelaxed) + bytes;
  layout_->used_bytes.store(used, kRelaxed);
  const uint64_t footprint = used + layout_->driver_bytes.load(kRelaxed);
  Unlock();
  RaisePeak(layout_->peak_bytes, footprint);
}

void Region::Release(uint64_t bytes) {
  if (slot_ < 0 || !Lock()) return;
  RegionSlot& s = layout_->slots[slot_];
  const uint64_t held = s.used.load(kRelaxed);
  // Never below zero: a count that underflows would report petabytes free.
  const uint64_t give = bytes <= held ? bytes : held;
  s.used.store(held - give, kRelaxed);
  const uint64_t total = layout_->used_bytes.load(kRelaxed);
  layout_->used_bytes.store(total >= give ? total - give : 0, kRelaxed);
  Unlock();
}

void Region::CountPhysicalOom() {
  layout_->physical_ooms.fetch_add(1, kRelaxed);
}

void Region::SetQuota(uint64_t quota_bytes) {
  layout_->quota_bytes.store(quota_bytes, kRelaxed);
  layout_->quota_generation.fetch_add(1, kRelaxed);
}

void Region::SetComputePercent(uint32_t percent) {
  layout_->compute_percent.store(percent, kRelaxed);
}

uint64_t Region::ReclaimDead() {
  if (!Lock()) return 0;
  const uint64_t reclaimed = ReclaimDeadLocked();
  Unlock();
  return reclaimed;
}

uint64_t Region::ReclaimDeadLocked() {
  uint64_t reclaimed = 0;
  for (int i = 1; i < kRegionSlots; ++i) {
    RegionSlot& s = layout_->slots[i];
    const uint64_t owner = s.owner.load(std::memory_order_acquire);
    if (owner == 0 || i == slot_) continue;
    if (ProcessAlive(static_cast<int>(OwnerPid(owner)),
                     s.start_ticks.load(kRelaxed))) {
      continue;
    }
    const uint64_t held = s.used.load(kRelaxed);
    s.used.store(0, kRelaxed);
    const uint64_t total = layout_->used_bytes.load(kRelaxed);
    layout_->used_bytes.store(total >= held ? total - held : 0, kRelaxed);
    reclaimed += held + ClearDriverBytesLocked(s);
    // Only the holder of the lock frees a slot, and only a free slot is
    // claimed, so the owner cannot have changed since the load above.
    s.owner.store(0, std::memory_order_release);
  }
  layout_->reclaimed_bytes.fetch_add(reclaimed, kRelaxed);
  return reclaimed;
}

bool Region::ReadSlot(int index, SlotView* out) const {
  if (index <= kOverflowSlot || index >= kRegionSlots) return false;
  const RegionSlot& s = layout_->slots[index];
  const uint64_t owner = s.owner.load(std::memory_order_acquire);
  if (owner == 0) return false;
  out->owner = owner;
  out->pid = OwnerPid(owner);
  out->start_ticks = s.start_ticks.load(kRelaxed);
  out->used = s.used.load(kRelaxed);
  out->driver_bytes = s.driver_bytes.load(kRelaxed);
  return true;
}

int Region::FindSlot(uint32_t pid, uint64_t start_ticks, SlotView* out) const {
  for (int i = 1; i < kRegionSlots; ++i) {
    SlotView v;
    if (!ReadSlot(i, &v) || v.pid != pid) continue;
    if (start_ticks != 0 && v.start_ticks != 0 &&
        v.start_ticks != start_ticks) {
      continue;  // the pid's earlier (or later) owner
    }
    *out = v;
    return i;
  }
  return -1;
}

void Region::SetDriverBytes(const DriverBytes* entries, int count,
                            uint64_t unattached_bytes) {
  if (!Lock()) return;
  // Slots first, the total last: a death in between is repaired from the
  // slots (RepairLocked).
  uint64_t total = unattached_bytes;
  layout_->unattached_bytes.store(unattached_bytes, kRelaxed);
  for (int i = 1; i < kRegionSlots; ++i) {
    RegionSlot& s = layout_->slots[i];
    const uint64_t owner = s.owner.load(std::memory_order_acquire);
    uint64_t bytes = 0;
    for (int e = 0; e < count && owner != 0; ++e) {
      if (entries[e].slot == i && entries[e].owner == owner) {
        bytes = entries[e].bytes;
        break;
      }
    }
    if (s.driver_bytes.load(kRelaxed) != bytes) {
      s.driver_bytes.store(bytes, kRelaxed);
    }
    total += bytes;
  }
  layout_->driver_bytes.store(total, kRelaxed);
  const uint64_t footprint = layout_->used_bytes.load(kRelaxed) + total;
  Unlock();
  layout_->driver_updates.fetch_add(1, kRelaxed);
  RaisePeak(layout_->peak_bytes, footprint);
}

uint64_t Region::ClearDriverBytesLocked(RegionSlot& slot) {
  const uint64_t bytes = slot.driver_bytes.load(kRelaxed);
  if (bytes == 0) return 0;
  slot.driver_bytes.store(0, kRelaxed);
  const uint64_t total = layout_->driver_bytes.load(kRelaxed);
  layout_->driver_bytes.store(total >= bytes ? total - bytes : 0, kRelaxed);
  return bytes;
}

void Region::RecordKernel(uint64_t key, uint64_t ns) {
  if (key == 0) return;
  // Probe from the key's own entry: a class usually finds itself at once.
  const int start = static_cast<int>(key % kKernelClasses);
  for (int i = 0; i < kKernelClasses; ++i) {
    KernelClass& k = layout_->kernels[(start + i) % kKernelClasses];
    uint64_t have = k.key.load(std::memory_order_acquire);
    if (have == 0) {
      if (k.key.compare_exchange_strong(have, key, std::memory_order_acq_rel)) {
        have = key;
      }
    }
    if (have != key) continue;
    k.total_ns.fetch_add(ns, kRelaxed);
    k.samples.fetch_add(1, std::memory_order_release);
    layout_->kernel_samples.fetch_add(1, kRelaxed);
    return;
  }
  layout_->kernel_dropped.fetch_add(1, kRelaxed);
}

void Region::NoteSamplePeriod(uint32_t period) {
  if (layout_->sample_period.load(kRelaxed) != period) {
    layout_->sample_period.store(period, kRelaxed);
  }
}

int Region::ReadKernels(KernelView* out, int max) const {
  int n = 0;
  for (int i = 0; i < kKernelClasses && n < max; ++i) {
    const KernelClass& k = layout_->kernels[i];
    const uint64_t key = k.key.load(std::memory_order_acquire);
    if (key == 0) continue;
    out[n].key = key;
    out[n].samples = k.samples.load(std::memory_order_acquire);
    out[n].total_ns = k.total_ns.load(kRelaxed);
    ++n;
  }
  return n;
}

RegionStats Region::Stats() const {
  RegionStats s;
  s.quota_bytes = layout_->quota_bytes.load(kRelaxed);
  s.compute_percent = layout_->compute_percent.load(kRelaxed);
  s.driver_bytes = layout_->driver_bytes.load(kRelaxed);
  s.driver_updates = layout_->driver_updates.load(kRelaxed);
  s.used_bytes = layout_->used_bytes.load(kRelaxed) + s.driver_bytes;
  s.peak_bytes = layout_->peak_bytes.load(kRelaxed);
  s.quota_ooms = layout_->quota_ooms.load(kRelaxed);
  s.physical_ooms = layout_->physical_ooms.load(kRelaxed);
  s.attaches = layout_->attaches.load(kRelaxed);
  s.reclaimed_bytes = layout_->reclaimed_bytes.load(kRelaxed);
  s.recoveries = layout_->recoveries.load(kRelaxed);
  s.lock_stalls = layout_->lock_stalls.load(kRelaxed);
  s.kernel_samples = layout_->kernel_samples.load(kRelaxed);
  s.kernel_dropped = layout_->kernel_dropped.load(kRelaxed);
  // Slots held, not a liveness check: the reader (the agent) may live in
  // another pid namespace than the task, where the pids mean nothing. A
  // dead process holds its slot until the hook reclaims it.
  for (int i = 1; i < kRegionSlots; ++i) {
    if (layout_->slots[i].owner.load(kRelaxed) != 0) ++s.live_processes;
  }
  return s;
}

uint64_t Region::ProcessStartTicks(int pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: count the
  // fields from the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  // After ')' comes field 3; the start time is field 22.
  int field = 2;
  for (++p; *p != '\0'; ++p) {
    if (*p == ' ') {
      ++field;
      if (field == 22) {
        uint64_t v = 0;
        for (++p; *p >= '0' && *p <= '9'; ++p) {
          v = v * 10 + static_cast<uint64_t>(*p - '0');
        }
        return v;
      }
    }
  }
  return 0;
}

bool Region::ProcessAlive(int pid, uint64_t start_ticks) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // The pid exists (or we may not signal it): the same process only if it
  // started when the slot's owner did. An unreadable /proc (0) counts as
  // alive: never reclaim what might still be in use.
  const uint64_t now = ProcessStartTicks(pid);
  return now == 0 || start_ticks == 0 || now == start_ticks;
}

}  // namespace hf::hook
