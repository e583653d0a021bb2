// fake_gpu: one simulated GPU shared by every process that opens it, the
// device behind the fake CUDA driver (fake_cuda*.cc) and, for its process
// and utilisation queries, the fake NVML (src/gpu/nvml/fake_nvml.cc).
//
// A device is a small shared-memory file (<dir>/gpu-<index>), mapped
// MAP_SHARED by each process, with one process-shared robust mutex over it.
// It holds:
//  - the device's memory: a total, the bytes every process holds, and one
//    slot per process (pid + start time, so a recycled pid is never taken for
//    a dead owner). A charge past the total is a physical out-of-memory. A
//    dead process's memory and queued work are reclaimed, as the real driver
//    tears a dead process's contexts down.
//  - one simulated timeline: each CUDA context of each process is a channel
//    with a FIFO of queued GPU time. The device runs one channel at a time
//    and time-slices between the channels that have work (a slice of
//    `timeslice_ns`, 2 ms by default), so two busy processes each get half of
//    the device. The timeline is advanced lazily to "now" (CLOCK_MONOTONIC,
//    the same in every process) by whoever touches the device; a
//    synchronize computes when its work will be done and sleeps until then.
//  - a history of what the timeline did (per-process GPU time, sampled every
//    20 ms of activity), from which NVML's per-process and device
//    utilisation are answered.
//  - per channel, its most recent run segments (when the device ran it, and
//    how far its work had got), so that the instant a channel's work crossed
//    a mark can be told afterwards: what a CUDA event's completion time is.
//
// With an empty directory the device is private to the process (an
// anonymous mapping): the same code, one process.
//
// docs/FAKE_CUDA.md ("Shared devices") says how this differs from a real
// GPU. Thread-safety: every method may be called from any thread of any
// process that opened the device.
#ifndef HF_HOOK_TESTING_FAKE_GPU_H_
#define HF_HOOK_TESTING_FAKE_GPU_H_

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace hf::fake_gpu {

inline constexpr uint32_t kMagic = 0x48464731;  // "HFG1"
inline constexpr uint32_t kVersion = 2;
inline constexpr int kMaxProcesses = 256;
inline constexpr int kMaxChannels = 256;
inline constexpr int kHistory = 256;
inline constexpr int64_t kSampleEveryNs = 20'000'000;
// Launches a channel may have queued before the next launch blocks (the
// real driver's pushbuffer also fills up and blocks the launching thread).
inline constexpr uint64_t kMaxQueuedLaunches = 1024;
inline constexpr uint64_t kDefaultTimesliceNs = 2'000'000;
// Run segments kept per channel. Two busy channels in 2 ms slices give each
// a segment every 4 ms, so this covers about half a second of history (a
// channel running alone is one segment however long it runs).
inline constexpr int kRunSegments = 128;

struct ProcessSlot {
  int32_t pid;  // 0: free
  uint32_t contexts;
  uint64_t start_ticks;
  uint64_t used_bytes;
  uint64_t executed_ns;  // GPU time this process's channels ever ran
};

struct Channel {
  int32_t process;  // slot index; -1: free
  uint32_t unused;
  uint64_t key;        // the owner's context handle
  uint64_t kernel_ns;  // the owner's time per launch (0: launches are free)
  uint64_t enqueued_ns;
  uint64_t executed_ns;
};

// A stretch of time the device ran one channel without a break: from
// `start_ns` (simulated CLOCK_MONOTONIC) for `length_ns`, starting when the
// channel had executed `executed_ns` of its work.
struct RunSegment {
  int64_t start_ns;
  uint64_t executed_ns;
  uint64_t length_ns;
};

// A channel's most recent run segments: a ring, the newest at next - 1.
struct RunRing {
  uint32_t next;
  uint32_t count;
  RunSegment segments[kRunSegments];
};

struct Snapshot {
  int64_t mono_ns;
  uint64_t busy_ns;
  int32_t pid[kMaxProcesses];  // the slot's owner then (0: free)
  uint64_t executed[kMaxProcesses];
};

struct Layout {
  uint32_t magic;
  uint32_t version;
  std::atomic<uint32_t> init_state;  // 0 zero-filled, 1 initialising, 2 ready
  uint32_t unused;
  pthread_mutex_t lock;  // robust, process-shared
  uint64_t memory_bytes;
  uint64_t timeslice_ns;
  uint64_t used_bytes;  // == sum of procs[].used_bytes
  int64_t sim_ns;       // the timeline is simulated up to here
  int32_t current;      // the channel running; -1: none
  uint32_t unused2;
  uint64_t current_run_ns;  // how long `current` has run in its slice
  uint64_t busy_ns;         // GPU time the device ever ran
  uint64_t launches;
  int64_t last_reclaim_ns;
  ProcessSlot procs[kMaxProcesses];
  Channel channels[kMaxChannels];
  uint32_t history_next;
  uint32_t history_count;
  Snapshot history[kHistory];
  RunRing runs[kMaxChannels];  // by channel; emptied when a channel opens
};

struct DeviceOptions {
  uint64_t memory_bytes = 1024ULL * 1024 * 1024;
  uint64_t timeslice_ns = kDefaultTimesliceNs;
};

struct ProcessUsage {
  int pid = 0;
  uint64_t used_bytes = 0;
  uint32_t contexts = 0;
  uint64_t executed_ns = 0;
};

struct ProcessUtilization {
  int pid = 0;
  unsigned int sm_percent = 0;  // of the interval
  uint64_t executed_ns = 0;     // in the interval
};

struct Utilization {
  int64_t from_ns = 0;  // CLOCK_MONOTONIC
  int64_t to_ns = 0;
  unsigned int gpu_percent = 0;
  std::vector<ProcessUtilization> processes;
};

class SharedDevice {
 public:
  SharedDevice() = default;
  ~SharedDevice();
  SharedDevice(const SharedDevice&) = delete;
  SharedDevice& operator=(const SharedDevice&) = delete;

  // Opens device `index` in `dir` (creating it with `options` when it does
  // not exist; an existing device keeps its own memory size and slice), or
  // a private one when `dir` is empty. False, with `error` set, when the
  // file cannot be opened or is not a fake GPU of this version.
  bool Open(const std::string& dir, int index, const DeviceOptions& options,
            std::string* error);
  static std::string PathFor(const std::string& dir, int index);

  uint64_t memory_bytes() const { return layout_->memory_bytes; }
  uint64_t timeslice_ns() const { return layout_->timeslice_ns; }

  // Memory of the calling process. Charge is false when the device is full
  // even after dead processes' memory was reclaimed.
  bool Charge(uint64_t bytes);
  void Uncharge(uint64_t bytes);
  uint64_t used_bytes();  // every process's

  // A context of the calling process opened / closed (NVML lists the
  // processes with a context).
  void ContextOpened();
  void ContextClosed();

  // The channel of the calling process's context `key`, opened on first use;
  // -1 when every channel is taken. Closing drops its queued work.
  int OpenChannel(uint64_t key, uint64_t kernel_ns);
  void CloseChannel(int channel);

  // Queues `ns` of GPU time on `channel`, first waiting while it has
  // kMaxQueuedLaunches launches queued. Returns the channel's mark after it
  // (what a synchronize then waits for).
  uint64_t Enqueue(int channel, uint64_t ns);
  // The work queued on `channel` so far.
  uint64_t Mark(int channel);
  bool Reached(int channel, uint64_t mark);
  // When `channel` finished its work up to `mark`, after advancing the
  // timeline to now: true with *at_ns the simulated CLOCK_MONOTONIC instant
  // its executed work reached `mark`, so the time the device spent running
  // other channels in between counts; false while it has not. Answered from
  // the channel's last kRunSegments run segments: a mark reached at or before
  // the oldest kept one's start gets that start (later than the truth), one
  // on a channel that never ran gets 0. A closed channel (its work dropped)
  // gets now.
  bool ReachedAt(int channel, uint64_t mark, int64_t* at_ns);
  // Sleeps until the channel has run everything up to `mark` (or closed).
  void WaitFor(int channel, uint64_t mark);

  uint64_t busy_ns();  // GPU time run so far (all processes)
  uint64_t launches();

  // NVML's views. Processes: every live process with a context or memory
  // (dead ones reclaimed first). UtilizationSince: GPU time per process and
  // for the device from the newest sample at or before `since_ns`
  // (CLOCK_MONOTONIC; the oldest kept when none is that old) to now.
  std::vector<ProcessUsage> Processes();
  Utilization UtilizationSince(int64_t since_ns);

  static int64_t NowNs();

 private:
  bool Lock();
  void Unlock();
  // Runs the timeline up to `now`. REQUIRES: the lock.
  void AdvanceLocked(int64_t now);
  // When `channel` will reach `mark` if nothing more is queued.
  int64_t ProjectLocked(int channel, uint64_t mark) const;
  int ProcessSlotLocked();  // the caller's slot, claimed on first use
  void ReclaimDeadLocked();
  void SnapshotLocked(int64_t now);

  Layout* layout_ = nullptr;
  bool shared_ = false;
  // The calling process's slot (-1: not claimed); with its pid, so a
  // forked child claims its own.
  int slot_ = -1;
  int slot_pid_ = 0;
};

}  // namespace hf::fake_gpu

#endif  // HF_HOOK_TESTING_FAKE_GPU_H_
