// fake_gpu.cc: the shared simulated device (fake_gpu.h).
#include "hook/testing/fake_gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

namespace hf::fake_gpu {

namespace {

uint64_t StartTicks(int pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // Field 22, counted after the command name's closing parenthesis (field
  // 2, which may itself contain spaces and parentheses).
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return 0;
  int field = 2;
  for (++p; *p != '\0'; ++p) {
    if (*p == ' ') {
      ++field;
      if (field == 22) return strtoull(p + 1, nullptr, 10);
    }
  }
  return 0;
}

bool Alive(int pid, uint64_t start_ticks) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  const uint64_t now = StartTicks(pid);
  return now == 0 || start_ticks == 0 || now == start_ticks;
}

void SleepUntil(int64_t deadline_ns) {
  timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000),
              static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) ==
         EINTR) {
  }
}

uint64_t Pending(const Channel& c) { return c.enqueued_ns - c.executed_ns; }

// The scheduler state RunUntil works on: the live device, or a copy of it
// for a projection.
struct Timeline {
  Channel* channels;
  ProcessSlot* procs;  // null in a projection
  RunRing* runs;       // null in a projection
  int64_t* sim_ns;
  int32_t* current;
  uint64_t* current_run_ns;
  uint64_t* busy_ns;
  uint64_t timeslice_ns;
};

// Notes that the device ran a channel for `length` from `start`, when the
// channel had executed `executed`: one more segment, or the newest one
// longer when this continues it (the same slice resumed after the timeline
// was advanced to "now", or the channel picked again with no one else to
// run), so a channel running alone keeps one segment however long it runs.
void NoteRun(RunRing& ring, int64_t start, uint64_t executed, uint64_t length) {
  if (ring.count > 0) {
    RunSegment& last =
        ring.segments[(ring.next + kRunSegments - 1) % kRunSegments];
    if (last.start_ns + static_cast<int64_t>(last.length_ns) == start &&
        last.executed_ns + last.length_ns == executed) {
      last.length_ns += length;
      return;
    }
  }
  ring.segments[ring.next] = RunSegment{start, executed, length};
  ring.next = (ring.next + 1) % kRunSegments;
  if (ring.count < kRunSegments) ++ring.count;
}

// The next channel with work after `from`, round robin; -1 when none.
int NextWithWork(const Channel* channels, int from) {
  for (int i = 1; i <= kMaxChannels; ++i) {
    const int c = (from + i + kMaxChannels) % kMaxChannels;
    if (channels[c].process >= 0 && Pending(channels[c]) > 0) return c;
  }
  return -1;
}

// Runs the timeline until `limit` (or, with stop_channel >= 0, until that
// channel reaches stop_mark; returns the time it does). Idle time passes
// with nothing run.
int64_t RunUntil(Timeline& t, int64_t limit, int stop_channel,
                 uint64_t stop_mark) {
  for (;;) {
    if (stop_channel >= 0 &&
        (t.channels[stop_channel].process < 0 ||
         t.channels[stop_channel].executed_ns >= stop_mark)) {
      return *t.sim_ns;
    }
    if (*t.sim_ns >= limit) return *t.sim_ns;
    int cur = *t.current;
    const bool has_work = cur >= 0 && t.channels[cur].process >= 0 &&
                          Pending(t.channels[cur]) > 0;
    if (!has_work || *t.current_run_ns >= t.timeslice_ns) {
      const int next = NextWithWork(t.channels, cur < 0 ? -1 : cur);
      if (next < 0) {
        // Idle: nothing queued anywhere.
        *t.current = -1;
        *t.current_run_ns = 0;
        if (stop_channel >= 0) return INT64_MAX;  // never reached
        *t.sim_ns = limit;
        return limit;
      }
      cur = next;
      *t.current = cur;
      *t.current_run_ns = 0;
    }
    Channel& c = t.channels[cur];
    uint64_t run = std::min(Pending(c), t.timeslice_ns - *t.current_run_ns);
    const uint64_t left = static_cast<uint64_t>(limit - *t.sim_ns);
    run = std::min(run, left);
    if (stop_channel == cur) {
      run = std::min(run, stop_mark - c.executed_ns);
    }
    if (t.runs != nullptr) NoteRun(t.runs[cur], *t.sim_ns, c.executed_ns, run);
    c.executed_ns += run;
    *t.current_run_ns += run;
    *t.sim_ns += static_cast<int64_t>(run);
    *t.busy_ns += run;
    if (t.procs != nullptr) t.procs[c.process].executed_ns += run;
  }
}

}  // namespace

int64_t SharedDevice::NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string SharedDevice::PathFor(const std::string& dir, int index) {
  return dir + "/gpu-" + std::to_string(index);
}

SharedDevice::~SharedDevice() {
  if (layout_ != nullptr) ::munmap(layout_, sizeof(Layout));
}

bool SharedDevice::Open(const std::string& dir, int index,
                        const DeviceOptions& options, std::string* error) {
  void* mem = nullptr;
  shared_ = !dir.empty();
  if (shared_) {
    const std::string path = PathFor(dir, index);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
      *error = path + ": " + strerror(errno);
      return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 ||
        (st.st_size != 0 && st.st_size != static_cast<off_t>(sizeof(Layout)))) {
      ::close(fd);
      *error = path + ": not a fake GPU of this version (size)";
      return false;
    }
    if (st.st_size == 0 &&
        ::ftruncate(fd, static_cast<off_t>(sizeof(Layout))) != 0) {
      *error = path + ": ftruncate: " + strerror(errno);
      ::close(fd);
      return false;
    }
    mem = ::mmap(nullptr, sizeof(Layout), PROT_READ | PROT_WRITE, MAP_SHARED,
                 fd, 0);
    ::close(fd);
  } else {
    mem = ::mmap(nullptr, sizeof(Layout), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (mem == MAP_FAILED) {
    *error = std::string("mmap: ") + strerror(errno);
    return false;
  }
  layout_ = static_cast<Layout*>(mem);
  uint32_t expected = 0;
  if (layout_->init_state.compare_exchange_strong(expected, 1)) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&layout_->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    layout_->magic = kMagic;
    layout_->version = kVersion;
    layout_->memory_bytes = options.memory_bytes;
    layout_->timeslice_ns =
        options.timeslice_ns == 0 ? kDefaultTimesliceNs : options.timeslice_ns;
    layout_->sim_ns = NowNs();
    layout_->current = -1;
    for (Channel& c : layout_->channels) c.process = -1;
    layout_->init_state.store(2);
  } else {
    // Another process is initialising it: wait (a creator killed right
    // here leaves the file unusable, which the error says).
    const int64_t deadline = NowNs() + 2'000'000'000;
    while (layout_->init_state.load() != 2 && NowNs() < deadline) {
      ::usleep(1000);
    }
    if (layout_->init_state.load() != 2 || layout_->magic != kMagic ||
        layout_->version != kVersion) {
      ::munmap(layout_, sizeof(Layout));
      layout_ = nullptr;
      *error = PathFor(dir, index) + ": not a ready fake GPU of this version";
      return false;
    }
  }
  return true;
}

bool SharedDevice::Lock() {
  const int rc = pthread_mutex_lock(&layout_->lock);
  if (rc == EOWNERDEAD) {
    // A process died inside: the counters it was changing may be half
    // done, which a test double can live with.
    pthread_mutex_consistent(&layout_->lock);
    return true;
  }
  return rc == 0;
}

void SharedDevice::Unlock() { pthread_mutex_unlock(&layout_->lock); }

int SharedDevice::ProcessSlotLocked() {
  const int pid = static_cast<int>(::getpid());
  if (slot_ >= 0 && slot_pid_ == pid && layout_->procs[slot_].pid == pid) {
    return slot_;
  }
  slot_ = -1;
  const uint64_t ticks = StartTicks(pid);
  int free_slot = -1;
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& p = layout_->procs[i];
    if (p.pid == pid && p.start_ticks == ticks) {
      slot_ = i;
      break;
    }
    if (p.pid == 0 && free_slot < 0) free_slot = i;
  }
  if (slot_ < 0) {
    if (free_slot < 0) {
      ReclaimDeadLocked();
      for (int i = 0; i < kMaxProcesses && free_slot < 0; ++i) {
        if (layout_->procs[i].pid == 0) free_slot = i;
      }
    }
    if (free_slot < 0) return -1;
    ProcessSlot& p = layout_->procs[free_slot];
    p = ProcessSlot{};
    p.pid = pid;
    p.start_ticks = ticks;
    slot_ = free_slot;
  }
  slot_pid_ = pid;
  return slot_;
}

void SharedDevice::ReclaimDeadLocked() {
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& p = layout_->procs[i];
    if (p.pid == 0 || Alive(p.pid, p.start_ticks)) continue;
    layout_->used_bytes -= std::min(layout_->used_bytes, p.used_bytes);
    for (Channel& c : layout_->channels) {
      if (c.process == i) c.process = -1;
    }
    p = ProcessSlot{};
  }
}

bool SharedDevice::Charge(uint64_t bytes) {
  if (!Lock()) return false;
  const int slot = ProcessSlotLocked();
  bool ok = slot >= 0;
  if (ok && bytes > layout_->memory_bytes - layout_->used_bytes) {
    ReclaimDeadLocked();
    ok = bytes <= layout_->memory_bytes - layout_->used_bytes;
  }
  if (ok) {
    layout_->used_bytes += bytes;
    layout_->procs[slot].used_bytes += bytes;
  }
  Unlock();
  return ok;
}

void SharedDevice::Uncharge(uint64_t bytes) {
  if (!Lock()) return;
  const int slot = ProcessSlotLocked();
  if (slot >= 0) {
    ProcessSlot& p = layout_->procs[slot];
    const uint64_t taken = std::min(bytes, p.used_bytes);
    p.used_bytes -= taken;
    layout_->used_bytes -= std::min(layout_->used_bytes, taken);
  }
  Unlock();
}

uint64_t SharedDevice::used_bytes() {
  if (!Lock()) return 0;
  const uint64_t used = layout_->used_bytes;
  Unlock();
  return used;
}

void SharedDevice::ContextOpened() {
  if (!Lock()) return;
  const int slot = ProcessSlotLocked();
  if (slot >= 0) ++layout_->procs[slot].contexts;
  Unlock();
}

void SharedDevice::ContextClosed() {
  if (!Lock()) return;
  const int slot = ProcessSlotLocked();
  if (slot >= 0 && layout_->procs[slot].contexts > 0) {
    --layout_->procs[slot].contexts;
  }
  Unlock();
}

int SharedDevice::OpenChannel(uint64_t key, uint64_t kernel_ns) {
  if (!Lock()) return -1;
  const int slot = ProcessSlotLocked();
  int found = -1;
  if (slot >= 0) {
    for (int i = 0; i < kMaxChannels; ++i) {
      if (layout_->channels[i].process == slot &&
          layout_->channels[i].key == key) {
        found = i;
        break;
      }
    }
    for (int i = 0; i < kMaxChannels && found < 0; ++i) {
      if (layout_->channels[i].process < 0) {
        AdvanceLocked(NowNs());
        Channel& c = layout_->channels[i];
        c = Channel{};
        c.process = slot;
        c.key = key;
        c.kernel_ns = kernel_ns;
        layout_->runs[i].next = 0;
        layout_->runs[i].count = 0;
        found = i;
      }
    }
  }
  Unlock();
  return found;
}

void SharedDevice::CloseChannel(int channel) {
  if (channel < 0 || channel >= kMaxChannels || !Lock()) return;
  AdvanceLocked(NowNs());
  const int slot = ProcessSlotLocked();
  if (layout_->channels[channel].process == slot) {
    layout_->channels[channel].process = -1;
  }
  Unlock();
}

void SharedDevice::AdvanceLocked(int64_t now) {
  Layout& l = *layout_;
  if (now <= l.sim_ns) return;
  Timeline t{l.channels, l.procs,           l.runs,     &l.sim_ns,
             &l.current, &l.current_run_ns, &l.busy_ns, l.timeslice_ns};
  RunUntil(t, now, -1, 0);
  SnapshotLocked(now);
}

int64_t SharedDevice::ProjectLocked(int channel, uint64_t mark) const {
  const Layout& l = *layout_;
  static thread_local Channel channels[kMaxChannels];
  memcpy(channels, l.channels, sizeof(channels));
  int64_t sim = l.sim_ns;
  int32_t current = l.current;
  uint64_t run = l.current_run_ns;
  uint64_t busy = l.busy_ns;
  Timeline t{channels, nullptr, nullptr, &sim,
             &current, &run,    &busy,   l.timeslice_ns};
  return RunUntil(t, INT64_MAX, channel, mark);
}

void SharedDevice::SnapshotLocked(int64_t now) {
  Layout& l = *layout_;
  if (l.history_count > 0) {
    const uint32_t last = (l.history_next + kHistory - 1) % kHistory;
    if (now - l.history[last].mono_ns < kSampleEveryNs) return;
  }
  Snapshot& s = l.history[l.history_next];
  s.mono_ns = now;
  s.busy_ns = l.busy_ns;
  for (int i = 0; i < kMaxProcesses; ++i) {
    s.pid[i] = l.procs[i].pid;
    s.executed[i] = l.procs[i].executed_ns;
  }
  l.history_next = (l.history_next + 1) % kHistory;
  if (l.history_count < kHistory) ++l.history_count;
}

uint64_t SharedDevice::Enqueue(int channel, uint64_t ns) {
  if (channel < 0 || channel >= kMaxChannels) return 0;
  for (;;) {
    if (!Lock()) return 0;
    const int64_t now = NowNs();
    AdvanceLocked(now);
    Channel& c = layout_->channels[channel];
    if (c.process < 0) {
      Unlock();
      return 0;
    }
    const uint64_t room = c.kernel_ns * (kMaxQueuedLaunches - 1);
    if (c.kernel_ns == 0 || Pending(c) <= room) {
      c.enqueued_ns += ns;
      ++layout_->launches;
      const uint64_t mark = c.enqueued_ns;
      Unlock();
      return mark;
    }
    // Full: wait until one launch's worth has run.
    const int64_t at = ProjectLocked(channel, c.enqueued_ns - room);
    Unlock();
    SleepUntil(at == INT64_MAX ? now + 1'000'000 : at);
  }
}

uint64_t SharedDevice::Mark(int channel) {
  if (channel < 0 || channel >= kMaxChannels || !Lock()) return 0;
  const uint64_t mark = layout_->channels[channel].enqueued_ns;
  Unlock();
  return mark;
}

bool SharedDevice::Reached(int channel, uint64_t mark) {
  if (channel < 0 || channel >= kMaxChannels || !Lock()) return true;
  AdvanceLocked(NowNs());
  const Channel& c = layout_->channels[channel];
  const bool done = c.process < 0 || c.executed_ns >= mark;
  Unlock();
  return done;
}

bool SharedDevice::ReachedAt(int channel, uint64_t mark, int64_t* at_ns) {
  *at_ns = 0;
  if (channel < 0 || channel >= kMaxChannels || !Lock()) return true;
  const int64_t now = NowNs();
  AdvanceLocked(now);
  const Channel& c = layout_->channels[channel];
  bool done = true;
  if (c.process < 0) {
    *at_ns = now;
  } else if (c.executed_ns < mark) {
    done = false;
  } else {
    // Newest first: the segment in which the executed work went past the
    // mark (executed_ns < mark <= executed_ns + length_ns); else the mark was
    // reached no later than the oldest segment kept began.
    const RunRing& ring = layout_->runs[channel];
    for (uint32_t k = 1; k <= ring.count; ++k) {
      const RunSegment& s =
          ring.segments[(ring.next + kRunSegments - k) % kRunSegments];
      *at_ns = s.start_ns;
      if (mark > s.executed_ns) {
        *at_ns +=
            static_cast<int64_t>(std::min(mark - s.executed_ns, s.length_ns));
        break;
      }
    }
  }
  Unlock();
  return done;
}

void SharedDevice::WaitFor(int channel, uint64_t mark) {
  if (channel < 0 || channel >= kMaxChannels) return;
  for (;;) {
    if (!Lock()) return;
    const int64_t now = NowNs();
    AdvanceLocked(now);
    const Channel& c = layout_->channels[channel];
    if (c.process < 0 || c.executed_ns >= mark) {
      Unlock();
      return;
    }
    // When it is done if nobody queues more; others may, so look again
    // then.
    if (now - layout_->last_reclaim_ns > 100'000'000) {
      layout_->last_reclaim_ns = now;
      ReclaimDeadLocked();
    }
    const int64_t at = ProjectLocked(channel, mark);
    Unlock();
    SleepUntil(at == INT64_MAX ? now + 1'000'000 : at);
  }
}

uint64_t SharedDevice::busy_ns() {
  if (!Lock()) return 0;
  AdvanceLocked(NowNs());
  const uint64_t busy = layout_->busy_ns;
  Unlock();
  return busy;
}

uint64_t SharedDevice::launches() {
  if (!Lock()) return 0;
  const uint64_t n = layout_->launches;
  Unlock();
  return n;
}

std::vector<ProcessUsage> SharedDevice::Processes() {
  std::vector<ProcessUsage> out;
  if (!Lock()) return out;
  AdvanceLocked(NowNs());
  ReclaimDeadLocked();
  for (const ProcessSlot& p : layout_->procs) {
    if (p.pid == 0 || (p.contexts == 0 && p.used_bytes == 0)) continue;
    out.push_back(ProcessUsage{p.pid, p.used_bytes, p.contexts, p.executed_ns});
  }
  Unlock();
  return out;
}

Utilization SharedDevice::UtilizationSince(int64_t since_ns) {
  Utilization u;
  if (!Lock()) return u;
  const int64_t now = NowNs();
  AdvanceLocked(now);
  const Layout& l = *layout_;
  // The newest sample at or before `since_ns`, else the oldest kept.
  const Snapshot* base = nullptr;
  const Snapshot* oldest = nullptr;
  for (uint32_t k = 0; k < l.history_count; ++k) {
    const Snapshot& s =
        l.history[(l.history_next + kHistory - l.history_count + k) % kHistory];
    if (oldest == nullptr) oldest = &s;
    if (s.mono_ns <= since_ns) base = &s;
  }
  if (base == nullptr) base = oldest;
  u.to_ns = now;
  u.from_ns = base != nullptr ? base->mono_ns : now;
  const int64_t span = u.to_ns - u.from_ns;
  const auto percent = [span](uint64_t ns) {
    if (span <= 0) return 0U;
    const uint64_t p = (ns * 100 + static_cast<uint64_t>(span) / 2) /
                       static_cast<uint64_t>(span);
    return static_cast<unsigned int>(std::min<uint64_t>(p, 100));
  };
  u.gpu_percent = percent(base != nullptr ? l.busy_ns - base->busy_ns : 0);
  for (int i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& p = l.procs[i];
    if (p.pid == 0) continue;
    // A slot that changed owners since the sample starts from 0.
    const uint64_t before = base != nullptr && base->pid[i] == p.pid &&
                                    base->executed[i] <= p.executed_ns
                                ? base->executed[i]
                                : 0;
    const uint64_t ran = p.executed_ns - before;
    if (ran == 0 && p.contexts == 0) continue;
    u.processes.push_back(ProcessUtilization{p.pid, percent(ran), ran});
  }
  Unlock();
  return u;
}

}  // namespace hf::fake_gpu
