// The simulated GPU driver: inventory facts, MIG state checked against the
// profile tables, clock-driven faults and the atomically written state file.
//
// Thread-safety: see sim_driver.h (one mutex, mu_, guards gpus_ and
// processes_; the inventory, clock reference and options are immutable).
#include "gpu/sim_driver.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>

namespace hf::gpu {
namespace {

constexpr std::string_view kLostDetail =
    "GPU is lost (simulated NVML_ERROR_GPU_IS_LOST)";

// A Status with an arbitrary error code (the faults name theirs).
Status ErrorWithCode(StatusCode code, std::string message) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return Status::InvalidArgument(std::move(message));
    case StatusCode::kNotFound:
      return Status::NotFound(std::move(message));
    case StatusCode::kFailedPrecondition:
      return Status::FailedPrecondition(std::move(message));
    case StatusCode::kResourceExhausted:
      return Status::ResourceExhausted(std::move(message));
    case StatusCode::kUnavailable:
      return Status::Unavailable(std::move(message));
    default:
      return Status::Internal(std::move(message));
  }
}

std::string GpuName(int gpu_index) {
  return "GPU " + std::to_string(gpu_index);
}

// 64-bit FNV-1a over `text`, then a splitmix64 finaliser so that nearby
// inputs spread over all bits.
std::uint64_t Hash64(std::string_view text, std::uint64_t seed) {
  std::uint64_t h = 14695981039346656037ULL ^ seed;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

// "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", the shape NVML's MIG device
// UUIDs have, derived from `key`.
std::string MigUuidFrom(std::string_view key) {
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx",
                static_cast<unsigned long long>(Hash64(key, 0)),
                static_cast<unsigned long long>(Hash64(key, 0x5157)));
  const std::string_view h(hex, 32);
  std::string out = "MIG-";
  out += h.substr(0, 8);
  out += '-';
  out += h.substr(8, 4);
  out += '-';
  out += h.substr(12, 4);
  out += '-';
  out += h.substr(16, 4);
  out += '-';
  out += h.substr(20, 12);
  return out;
}

Status ErrnoError(const std::string& what, int err) {
  return Status::Internal(what + ": " + std::strerror(err));
}

// Writes all of `data` to `fd`, retrying short writes and EINTR.
bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Replaces `path` with `contents` so that a crash leaves either the old or
// the new file, never a torn one: write a temporary beside it, fsync it,
// rename it over `path`, fsync the directory.
Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("creating " + tmp, errno);
  if (!WriteAll(fd, contents) || ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoError("writing " + tmp, err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("closing " + tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("renaming " + tmp + " to " + path, err);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoError("opening " + dir, errno);
  const bool synced = ::fsync(dir_fd) == 0;
  const int err = errno;
  ::close(dir_fd);
  if (!synced) return ErrnoError("syncing " + dir, err);
  return Status::Ok();
}

// The file's contents, or nullopt when it does not exist.
StatusOr<std::optional<std::string>> ReadFileIfExists(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (ec) return Status::Unavailable("cannot stat " + path);
    return std::optional<std::string>();
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) return Status::Unavailable("cannot read " + path);
  return std::optional<std::string>(text.str());
}

Status StateError(const std::string& path, const std::string& reason) {
  return Status::InvalidArgument(path + ": " + reason, path);
}

}  // namespace

SimGpuDriver::SimGpuDriver(Inventory inventory, const Clock& clock,
                           SimDriverOptions options)
    : inventory_(std::move(inventory)),
      clock_(clock),
      options_(std::move(options)),
      start_millis_(clock.NowMillis()) {}

StatusOr<std::unique_ptr<SimGpuDriver>> SimGpuDriver::Create(
    Inventory inventory, const Clock& clock, SimDriverOptions options) {
  std::unique_ptr<SimGpuDriver> driver(
      new SimGpuDriver(std::move(inventory), clock, std::move(options)));
  HF_RETURN_IF_ERROR(driver->Initialize());
  return driver;
}

StatusOr<std::unique_ptr<SimGpuDriver>> SimGpuDriver::CreateFromFile(
    const std::string& inventory_path, const Clock& clock,
    SimDriverOptions options) {
  StatusOr<Inventory> inventory = LoadInventory(inventory_path);
  if (!inventory.ok()) return inventory.status();
  return Create(std::move(inventory).value(), clock, std::move(options));
}

Status SimGpuDriver::Initialize() {
  MutexLock lock(mu_);
  gpus_.resize(inventory_.gpus.size());
  for (const InventoryGpu& gpu : inventory_.gpus) {
    GpuState& state = gpus_[gpu.index];
    state.create_failures_used.assign(gpu.faults.mig_create_failures.size(), 0);
    for (const MigInstance& instance : gpu.mig_instances) {
      AddDevice(gpu.index, instance);
    }
  }
  return LoadStateFile();
}

Status SimGpuDriver::LoadStateFile() {
  if (options_.state_file.empty()) return Status::Ok();
  const std::string context = "MIG state file " + options_.state_file;
  StatusOr<std::optional<std::string>> text =
      ReadFileIfExists(options_.state_file);
  if (!text.ok()) return text.status().WithContext(context);
  if (!text->has_value()) return Status::Ok();  // first start: no changes yet
  StatusOr<SimMigState> saved = ParseSimMigState(**text);
  if (!saved.ok()) return saved.status().WithContext(context);
  std::vector<bool> seen(gpus_.size(), false);
  for (const SimGpuMigState& gpu : saved->gpus) {
    if (gpu.index >= 0 && gpu.index < static_cast<int>(seen.size())) {
      if (seen[gpu.index]) {
        return StateError("gpus",
                          "GPU " + std::to_string(gpu.index) + " appears twice")
            .WithContext(context);
      }
      seen[gpu.index] = true;
    }
    HF_RETURN_IF_ERROR(ApplySavedGpu(gpu).WithContext(context));
  }
  return Status::Ok();
}

Status SimGpuDriver::ApplySavedGpu(const SimGpuMigState& saved) {
  const std::string path = "gpus[index " + std::to_string(saved.index) + "]";
  const std::string afresh = " (delete the state file to start afresh)";
  if (saved.index < 0 || saved.index >= static_cast<int>(gpus_.size())) {
    return StateError(path, "no such GPU in the inventory" + afresh);
  }
  const InventoryGpu& gpu = inventory_.gpus[saved.index];
  if (saved.uuid != gpu.uuid) {
    return StateError(
        path + ".uuid",
        "is " + saved.uuid + " but the inventory says " + gpu.uuid + afresh);
  }
  if (!gpu.mig_enabled) {
    return StateError(path, "the inventory does not enable MIG on it" + afresh);
  }
  std::vector<MigInstance> placed;
  std::vector<MigDevice> devices;
  for (const MigDevice& device : saved.devices) {
    const std::string device_path = path + ".devices[gpu_instance_id " +
                                    std::to_string(device.gpu_instance_id) +
                                    "]";
    StatusOr<MigInstance> instance = PlaceMigInstance(
        *gpu.mig_table, placed, device.profile, device.placement);
    if (!instance.ok()) {
      return StateError(device_path, instance.status().message() + afresh);
    }
    for (const MigDevice& other : devices) {
      if (other.gpu_instance_id == device.gpu_instance_id ||
          other.device_uuid == device.device_uuid) {
        return StateError(device_path,
                          "duplicate GPU instance id or device UUID");
      }
    }
    placed.push_back(*instance);
    devices.push_back(device);
    devices.back().profile = instance->profile;
  }
  std::sort(devices.begin(), devices.end(),
            [](const MigDevice& a, const MigDevice& b) {
              return a.gpu_instance_id < b.gpu_instance_id;
            });
  GpuState& state = gpus_[saved.index];
  state.devices = std::move(devices);
  state.next_mig_sequence = saved.next_mig_sequence;
  return Status::Ok();
}

std::int64_t SimGpuDriver::ElapsedMillis() const {
  return clock_.NowMillis() - start_millis_;
}

bool SimGpuDriver::IsLost(const InventoryGpu& gpu, std::int64_t elapsed) const {
  if (gpus_[gpu.index].lost_now) return true;
  return std::any_of(
      gpu.faults.lost.begin(), gpu.faults.lost.end(),
      [&](const GpuLostFault& fault) { return fault.ActiveAt(elapsed); });
}

std::string SimGpuDriver::CurrentUuid(const InventoryGpu& gpu,
                                      std::int64_t elapsed) const {
  // The latest change that has happened; a later entry wins a tie.
  const UuidChangeFault* latest = nullptr;
  for (const UuidChangeFault& change : gpu.faults.uuid_changes) {
    if (change.at_ms <= elapsed &&
        (latest == nullptr || change.at_ms >= latest->at_ms)) {
      latest = &change;
    }
  }
  return latest != nullptr ? latest->uuid : gpu.uuid;
}

Status SimGpuDriver::CheckReachable(int gpu_index, std::int64_t elapsed) const {
  if (gpu_index < 0 || gpu_index >= static_cast<int>(gpus_.size())) {
    return Status::NotFound("no " + GpuName(gpu_index) + " (the node has " +
                            std::to_string(gpus_.size()) + " GPUs)");
  }
  if (IsLost(inventory_.gpus[gpu_index], elapsed)) {
    return Status::Unavailable(GpuName(gpu_index) + ": " +
                               std::string(kLostDetail));
  }
  return Status::Ok();
}

Status SimGpuDriver::CheckMigMode(int gpu_index, std::int64_t elapsed) const {
  HF_RETURN_IF_ERROR(CheckReachable(gpu_index, elapsed));
  if (!inventory_.gpus[gpu_index].mig_enabled) {
    return Status::FailedPrecondition(GpuName(gpu_index) +
                                      " is not in MIG mode");
  }
  return Status::Ok();
}

Status SimGpuDriver::ConsumeCreateFault(int gpu_index, std::int64_t elapsed) {
  GpuState& state = gpus_[gpu_index];
  if (state.fail_creates > 0) {
    --state.fail_creates;
    return ErrorWithCode(state.fail_code,
                         GpuName(gpu_index) + ": injected MIG create failure");
  }
  const std::vector<MigCreateFault>& faults =
      inventory_.gpus[gpu_index].faults.mig_create_failures;
  std::vector<int>& used = gpus_[gpu_index].create_failures_used;
  for (std::size_t i = 0; i < faults.size(); ++i) {
    const MigCreateFault& fault = faults[i];
    if (elapsed < fault.at_ms) continue;
    if (fault.count && used[i] >= *fault.count) continue;
    ++used[i];
    return ErrorWithCode(fault.error,
                         GpuName(gpu_index) + ": " + fault.message);
  }
  return Status::Ok();
}

std::vector<MigInstance> SimGpuDriver::Instances(int gpu_index) const {
  std::vector<MigInstance> out;
  for (const MigDevice& device : gpus_[gpu_index].devices) {
    out.push_back({device.profile, device.placement});
  }
  return out;
}

std::string SimGpuDriver::NewDeviceUuid(int gpu_index) {
  GpuState& state = gpus_[gpu_index];
  const std::string& gpu_uuid = inventory_.gpus[gpu_index].uuid;
  for (;;) {
    std::string uuid =
        MigUuidFrom(gpu_uuid + "/" + std::to_string(state.next_mig_sequence));
    ++state.next_mig_sequence;
    const bool taken =
        std::any_of(gpus_.begin(), gpus_.end(), [&](const GpuState& gpu) {
          return std::any_of(
              gpu.devices.begin(), gpu.devices.end(),
              [&](const MigDevice& d) { return d.device_uuid == uuid; });
        });
    if (!taken) return uuid;
  }
}

MigDevice SimGpuDriver::AddDevice(int gpu_index, const MigInstance& instance) {
  GpuState& state = gpus_[gpu_index];
  const MigModelTable& table = *inventory_.gpus[gpu_index].mig_table;
  const MigProfile* profile = FindProfile(table, instance.profile);
  // NVML gives the whole-card instance id 0 and numbers the others from 1;
  // an id is free again once its instance is destroyed.
  int id = 0;
  if (profile == nullptr || profile->memory_slices < table.memory_slices) {
    id = 1;
    while (std::any_of(
        state.devices.begin(), state.devices.end(),
        [&](const MigDevice& d) { return d.gpu_instance_id == id; })) {
      ++id;
    }
  }
  MigDevice device;
  device.gpu_instance_id = id;
  device.compute_instance_id = 0;  // the first (only) CI in its GI
  device.profile = instance.profile;
  device.placement = instance.placement;
  device.device_uuid = NewDeviceUuid(gpu_index);
  const auto pos =
      std::find_if(state.devices.begin(), state.devices.end(),
                   [&](const MigDevice& d) { return d.gpu_instance_id > id; });
  state.devices.insert(pos, device);
  return device;
}

Status SimGpuDriver::SaveState() const {
  if (options_.state_file.empty()) return Status::Ok();
  SimMigState state;
  for (const InventoryGpu& gpu : inventory_.gpus) {
    if (!gpu.mig_enabled) continue;
    const GpuState& current = gpus_[gpu.index];
    state.gpus.push_back(SimGpuMigState{
        gpu.index, gpu.uuid, current.next_mig_sequence, current.devices});
  }
  return WriteFileAtomically(options_.state_file, SerializeSimMigState(state))
      .WithContext("saving the MIG state");
}

StatusOr<std::vector<GpuInfo>> SimGpuDriver::ListGpus() {
  MutexLock lock(mu_);
  const std::int64_t elapsed = ElapsedMillis();
  std::vector<GpuInfo> out;
  for (const InventoryGpu& gpu : inventory_.gpus) {
    GpuInfo info;
    info.index = gpu.index;
    info.uuid = CurrentUuid(gpu, elapsed);
    info.vendor = gpu.vendor;
    info.model = gpu.model;
    info.memory_mib = gpu.memory_mib;
    info.cc_major = gpu.cc_major;
    info.cc_minor = gpu.cc_minor;
    if (IsLost(gpu, elapsed)) {
      info.healthy = false;
      info.health_detail = std::string(kLostDetail);
    } else {
      info.mig_enabled = gpu.mig_enabled;
      MemoryMib used = 0;
      for (const auto& [pid, process] : processes_) {
        if (process.gpu_index == gpu.index) {
          used += process.used_memory_mib.value_or(0);
        }
      }
      info.used_memory_mib = used;
    }
    out.push_back(std::move(info));
  }
  return out;
}

StatusOr<std::vector<MigDevice>> SimGpuDriver::ListMigDevices(int gpu_index) {
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(CheckMigMode(gpu_index, ElapsedMillis()));
  return gpus_[gpu_index].devices;
}

StatusOr<MigDevice> SimGpuDriver::CreateMigDevice(
    int gpu_index, const std::string& profile,
    std::optional<MigPlacement> placement) {
  MutexLock lock(mu_);
  const std::int64_t elapsed = ElapsedMillis();
  HF_RETURN_IF_ERROR(CheckMigMode(gpu_index, elapsed));
  StatusOr<MigInstance> placed =
      PlaceMigInstance(*inventory_.gpus[gpu_index].mig_table,
                       Instances(gpu_index), profile, placement);
  if (!placed.ok()) return placed.status().WithContext(GpuName(gpu_index));
  HF_RETURN_IF_ERROR(ConsumeCreateFault(gpu_index, elapsed));
  const GpuState before = gpus_[gpu_index];
  MigDevice device = AddDevice(gpu_index, *placed);
  Status saved = SaveState();
  if (!saved.ok()) {
    gpus_[gpu_index] = before;
    return saved;
  }
  return device;
}

Status SimGpuDriver::DestroyMigDevice(int gpu_index, int gpu_instance_id) {
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(CheckMigMode(gpu_index, ElapsedMillis()));
  std::vector<MigDevice>& devices = gpus_[gpu_index].devices;
  const auto it = std::find_if(
      devices.begin(), devices.end(),
      [&](const MigDevice& d) { return d.gpu_instance_id == gpu_instance_id; });
  if (it == devices.end()) {
    return Status::NotFound(GpuName(gpu_index) + " has no GPU instance " +
                            std::to_string(gpu_instance_id));
  }
  std::string users;
  for (const auto& [pid, process] : processes_) {
    if (process.gpu_index == gpu_index &&
        process.gpu_instance_id == gpu_instance_id) {
      users += (users.empty() ? "" : ", ") + std::to_string(pid);
    }
  }
  if (!users.empty()) {
    return Status::FailedPrecondition(
        "kInUse: GPU instance " + std::to_string(gpu_instance_id) + " on " +
        GpuName(gpu_index) + " is in use by pid " + users);
  }
  const MigDevice removed = *it;
  const auto pos = devices.erase(it);
  Status saved = SaveState();
  if (!saved.ok()) {
    devices.insert(pos, removed);
    return saved;
  }
  return Status::Ok();
}

StatusOr<std::vector<GpuProcess>> SimGpuDriver::ListProcesses(int gpu_index) {
  MutexLock lock(mu_);
  HF_RETURN_IF_ERROR(CheckReachable(gpu_index, ElapsedMillis()));
  std::vector<GpuProcess> out;
  for (const auto& [pid, process] : processes_) {
    if (process.gpu_index != gpu_index) continue;
    out.push_back(
        GpuProcess{pid, process.used_memory_mib, process.gpu_instance_id});
  }
  return out;
}

Status SimGpuDriver::SetLost(int gpu_index, bool lost) {
  MutexLock lock(mu_);
  if (gpu_index < 0 || gpu_index >= static_cast<int>(gpus_.size())) {
    return Status::NotFound("no " + GpuName(gpu_index));
  }
  gpus_[gpu_index].lost_now = lost;
  return Status::Ok();
}

Status SimGpuDriver::FailNextMigCreates(int gpu_index, int count,
                                        StatusCode code) {
  MutexLock lock(mu_);
  if (gpu_index < 0 || gpu_index >= static_cast<int>(gpus_.size())) {
    return Status::NotFound("no " + GpuName(gpu_index));
  }
  gpus_[gpu_index].fail_creates = std::max(0, count);
  gpus_[gpu_index].fail_code = code;
  return Status::Ok();
}

std::map<int, std::vector<MigDevice>> SimGpuDriver::AllMigDevices() const {
  MutexLock lock(mu_);
  std::map<int, std::vector<MigDevice>> out;
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    if (!gpus_[i].devices.empty()) {
      out[static_cast<int>(i)] = gpus_[i].devices;
    }
  }
  return out;
}

Status SimGpuDriver::RegisterProcess(const SimProcess& process) {
  MutexLock lock(mu_);
  if (process.pid <= 0) {
    return Status::InvalidArgument("pid must be positive", "pid");
  }
  if (process.used_memory_mib && *process.used_memory_mib < 0) {
    return Status::InvalidArgument("used memory must not be negative",
                                   "used_memory_mib");
  }
  HF_RETURN_IF_ERROR(CheckReachable(process.gpu_index, ElapsedMillis()));
  if (processes_.contains(process.pid)) {
    return Status::AlreadyExists("pid " + std::to_string(process.pid) +
                                 " is already registered");
  }
  const std::string gpu = GpuName(process.gpu_index);
  if (!inventory_.gpus[process.gpu_index].mig_enabled) {
    if (process.gpu_instance_id) {
      return Status::InvalidArgument(
          gpu + " is not in MIG mode; a process there has no GPU instance",
          "gpu_instance_id");
    }
  } else if (!process.gpu_instance_id) {
    return Status::InvalidArgument(
        gpu + " is in MIG mode; a process there runs in a GPU instance",
        "gpu_instance_id");
  } else {
    const std::vector<MigDevice>& devices = gpus_[process.gpu_index].devices;
    if (std::none_of(devices.begin(), devices.end(), [&](const MigDevice& d) {
          return d.gpu_instance_id == *process.gpu_instance_id;
        })) {
      return Status::NotFound(gpu + " has no GPU instance " +
                              std::to_string(*process.gpu_instance_id));
    }
  }
  processes_.emplace(process.pid, process);
  return Status::Ok();
}

Status SimGpuDriver::UnregisterProcess(std::int64_t pid) {
  MutexLock lock(mu_);
  if (processes_.erase(pid) == 0) {
    return Status::NotFound("pid " + std::to_string(pid) +
                            " is not registered");
  }
  return Status::Ok();
}

}  // namespace hf::gpu
