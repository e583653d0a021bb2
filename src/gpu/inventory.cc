// Strict parsing of the inventory and MIG state files, and the MIG admission
// rules over the profile tables. nlohmann::json exceptions are caught here
// (ParseStrictJson, and the reads below only after type checks) and never
// leave this file.
//
// Thread-safety: see inventory.h (pure functions).
#include "gpu/inventory.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/strict_json.h"

namespace hf::gpu {
namespace {

using json = nlohmann::json;

// Bounds on numbers in the files: generous, but they keep arithmetic on
// them far from overflow.
constexpr std::int64_t kMaxMemoryMib = std::int64_t{1} << 30;  // 1 PiB
constexpr std::int64_t kMaxCpuMilli = std::int64_t{1} << 30;
constexpr std::int64_t kMaxTimeMs = std::int64_t{1} << 50;  // ~35,000 years
constexpr std::int64_t kMaxFaultCount = 1000000;
constexpr int kMaxGpus = 1024;
constexpr int kMaxInstanceId = 1000;

constexpr std::string_view kStateFormat = "heteroflow-sim-mig-state";
constexpr int kStateVersion = 1;

// The error kinds a mig_create_fails fault may name, and the NVML error each
// stands for (the default message says which).
struct ErrorKind {
  std::string_view name;
  StatusCode code;
  std::string_view nvml_error;
};
constexpr ErrorKind kErrorKinds[] = {
    {"internal", StatusCode::kInternal, "NVML_ERROR_UNKNOWN"},
    {"resource_exhausted", StatusCode::kResourceExhausted,
     "NVML_ERROR_INSUFFICIENT_RESOURCES"},
    {"unavailable", StatusCode::kUnavailable, "NVML_ERROR_GPU_IS_LOST"},
    {"failed_precondition", StatusCode::kFailedPrecondition,
     "NVML_ERROR_NOT_SUPPORTED"},
    {"invalid_argument", StatusCode::kInvalidArgument,
     "NVML_ERROR_INVALID_ARGUMENT"},
    {"not_found", StatusCode::kNotFound, "NVML_ERROR_NOT_FOUND"},
};

std::string ChildPath(std::string_view path, std::string_view key) {
  std::string out(path);
  if (!out.empty()) out += '.';
  out += key;
  return out;
}

std::string ElementPath(std::string_view path, std::size_t i) {
  std::string out(path);
  out += '[';
  out += std::to_string(i);
  out += ']';
  return out;
}

Status FieldError(const std::string& path, std::string_view reason) {
  std::string message = path;
  message += ": ";
  message += reason;
  return Status::InvalidArgument(std::move(message), path);
}

// A field that failed a check deeper down: keeps the inner code's message
// but reports it as InvalidArgument on `path`.
Status FieldError(const std::string& path, const Status& inner) {
  return FieldError(path, inner.message());
}

enum class Presence { kOptional, kRequired };

// Reads the fields of one JSON object. Every getter leaves its output alone
// when the field is absent, and records the first error; once an error is
// recorded the getters do nothing, so a parse function can read every field
// and check `status()` once.
class FieldReader {
 public:
  FieldReader(const json& object, std::string path)
      : object_(object), path_(std::move(path)) {}

  // Requires an object whose keys are all in `allowed` (or start with "_").
  void CheckFields(std::initializer_list<std::string_view> allowed) {
    if (!status_.ok()) return;
    if (!object_.is_object()) {
      Fail(FieldError(path_.empty() ? "(document)" : path_,
                      "must be a JSON object"));
      return;
    }
    for (const auto& [key, value] : object_.items()) {
      if (key.starts_with('_')) continue;
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        Fail(FieldError(PathOf(key), "unknown field"));
        return;
      }
    }
  }

  bool Has(std::string_view key) const {
    return object_.is_object() && object_.contains(key);
  }

  std::string PathOf(std::string_view key) const {
    return ChildPath(path_, key);
  }

  // Each returns true when the field was present and valid.
  bool Bool(std::string_view key, bool& out, Presence presence) {
    const json* value = Find(key, presence);
    if (value == nullptr) return false;
    if (!value->is_boolean()) return Fail(PathOf(key), "must be true or false");
    out = value->get<bool>();
    return true;
  }

  template <typename T>
  bool Int(std::string_view key, T& out, std::int64_t min, std::int64_t max,
           Presence presence) {
    const json* value = Find(key, presence);
    if (value == nullptr) return false;
    if (!value->is_number_integer()) {
      return Fail(PathOf(key), "must be an integer");
    }
    const bool too_big = value->is_number_unsigned() &&
                         value->get<std::uint64_t>() >
                             static_cast<std::uint64_t>(
                                 std::numeric_limits<std::int64_t>::max());
    const std::int64_t n = too_big ? max : value->get<std::int64_t>();
    if (too_big || n < min || n > max) {
      return Fail(PathOf(key), "must be between " + std::to_string(min) +
                                   " and " + std::to_string(max));
    }
    out = static_cast<T>(n);
    return true;
  }

  // A non-empty string.
  bool String(std::string_view key, std::string& out, Presence presence) {
    const json* value = Find(key, presence);
    if (value == nullptr) return false;
    if (!value->is_string()) return Fail(PathOf(key), "must be a string");
    std::string s = value->get<std::string>();
    if (s.empty()) return Fail(PathOf(key), "must not be empty");
    out = std::move(s);
    return true;
  }

  // The array or object at `key`, or nullptr when absent or on error.
  const json* Array(std::string_view key, Presence presence) {
    const json* value = Find(key, presence);
    if (value != nullptr && !value->is_array()) {
      Fail(PathOf(key), "must be a JSON array");
      return nullptr;
    }
    return value;
  }
  const json* Object(std::string_view key, Presence presence) {
    const json* value = Find(key, presence);
    if (value != nullptr && !value->is_object()) {
      Fail(PathOf(key), "must be a JSON object");
      return nullptr;
    }
    return value;
  }

  // Records `status` when it is the first error; returns false.
  bool Fail(Status status) {
    if (status_.ok()) status_ = std::move(status);
    return false;
  }
  bool Fail(const std::string& path, std::string_view reason) {
    return Fail(FieldError(path, reason));
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

 private:
  const json* Find(std::string_view key, Presence presence) {
    if (!status_.ok() || !object_.is_object()) return nullptr;
    const auto it = object_.find(key);
    if (it == object_.end()) {
      if (presence == Presence::kRequired) Fail(PathOf(key), "is required");
      return nullptr;
    }
    return &*it;
  }

  const json& object_;
  std::string path_;
  Status status_;
};

std::string PlacementText(const MigPlacement& p) {
  return std::to_string(p.start) + ":" + std::to_string(p.size);
}

std::string ProfileNames(const MigModelTable& table) {
  std::string out;
  for (const MigProfile& p : table.profiles) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

std::string MigModelKeys() {
  std::string out;
  for (const MigModelTable& t : AllMigTables()) {
    if (!out.empty()) out += ", ";
    out += t.model_key;
  }
  return out;
}

bool IsMediaProfile(const MigModelTable& table, const std::string& name) {
  const MigProfile* p = FindProfile(table, name);
  return p != nullptr ? p->media_extensions : name.ends_with("+me");
}

// "9.0" -> (9, 0). Digits only, one dot.
bool ParseComputeCapability(const std::string& text, int& major, int& minor) {
  const auto dot = text.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == text.size() ||
      dot > 2 || text.size() - dot - 1 > 2) {
    return false;
  }
  const auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
  };
  const std::string_view whole(text);
  if (!digits(whole.substr(0, dot)) || !digits(whole.substr(dot + 1))) {
    return false;
  }
  major = std::stoi(text.substr(0, dot));
  minor = std::stoi(text.substr(dot + 1));
  return true;
}

// Letters, digits, '.', '_' and '-': what may go into a derived UUID.
bool IsPlainName(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' ||
           c == '_' || c == '-';
  });
}

bool IsGpuUuid(const std::string& s) {
  return s.size() > 4 && s.starts_with("GPU-");
}

// ---- Inventory ----------------------------------------------------------

void ParseLostFault(FieldReader& r, GpuFaults& faults) {
  r.CheckFields({"kind", "at_ms", "recover_at_ms"});
  GpuLostFault fault;
  r.Int("at_ms", fault.at_ms, 0, kMaxTimeMs, Presence::kRequired);
  std::int64_t recover = 0;
  if (r.Int("recover_at_ms", recover, 0, kMaxTimeMs, Presence::kOptional)) {
    if (recover <= fault.at_ms) {
      r.Fail(r.PathOf("recover_at_ms"), "must be later than at_ms");
    }
    fault.recover_at_ms = recover;
  }
  if (r.ok()) faults.lost.push_back(fault);
}

void ParseMigCreateFault(FieldReader& r, const InventoryGpu& gpu,
                         const std::string& path, GpuFaults& faults) {
  r.CheckFields({"kind", "at_ms", "count", "error", "message"});
  if (r.ok() && !gpu.mig_enabled) {
    r.Fail(path + ".kind", "mig_create_fails needs mig_enabled: true");
  }
  MigCreateFault fault;
  r.Int("at_ms", fault.at_ms, 0, kMaxTimeMs, Presence::kOptional);
  int count = 0;
  if (r.Int("count", count, 1, kMaxFaultCount, Presence::kOptional)) {
    fault.count = count;
  }
  std::string error = "internal";
  r.String("error", error, Presence::kOptional);
  const auto* kind =
      std::find_if(std::begin(kErrorKinds), std::end(kErrorKinds),
                   [&](const ErrorKind& k) { return k.name == error; });
  if (r.ok() && kind == std::end(kErrorKinds)) {
    std::string known;
    for (const ErrorKind& k : kErrorKinds) {
      if (!known.empty()) known += ", ";
      known += k.name;
    }
    r.Fail(r.PathOf("error"),
           "unknown error kind \"" + error + "\" (one of: " + known + ")");
  }
  if (!r.ok()) return;
  fault.error = kind->code;
  fault.message =
      "simulated MIG create failure (" + std::string(kind->nvml_error) + ")";
  r.String("message", fault.message, Presence::kOptional);
  if (r.ok()) faults.mig_create_failures.push_back(std::move(fault));
}

void ParseUuidChangeFault(FieldReader& r, GpuFaults& faults) {
  r.CheckFields({"kind", "at_ms", "uuid"});
  UuidChangeFault fault;
  r.Int("at_ms", fault.at_ms, 0, kMaxTimeMs, Presence::kRequired);
  if (r.String("uuid", fault.uuid, Presence::kRequired) &&
      !IsGpuUuid(fault.uuid)) {
    r.Fail(r.PathOf("uuid"), "must start with \"GPU-\"");
  }
  if (r.ok()) faults.uuid_changes.push_back(std::move(fault));
}

Status ParseFaults(const json& list, const std::string& path,
                   InventoryGpu& gpu) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string fault_path = ElementPath(path, i);
    FieldReader r(list[i], fault_path);
    r.CheckFields({"kind", "at_ms", "recover_at_ms", "count", "error",
                   "message", "uuid"});
    std::string kind;
    r.String("kind", kind, Presence::kRequired);
    if (!r.ok()) return r.status();
    if (kind == "lost") {
      ParseLostFault(r, gpu.faults);
    } else if (kind == "mig_create_fails") {
      ParseMigCreateFault(r, gpu, fault_path, gpu.faults);
    } else if (kind == "uuid_change") {
      ParseUuidChangeFault(r, gpu.faults);
    } else {
      r.Fail(r.PathOf("kind"),
             "unknown fault kind \"" + kind +
                 "\" (one of: lost, mig_create_fails, uuid_change)");
    }
    if (!r.ok()) return r.status();
  }
  return Status::Ok();
}

Status ParseMigInstances(const json& list, const std::string& path,
                         InventoryGpu& gpu) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string instance_path = ElementPath(path, i);
    FieldReader r(list[i], instance_path);
    r.CheckFields({"profile", "start"});
    std::string profile_name;
    r.String("profile", profile_name, Presence::kRequired);
    if (!r.ok()) return r.status();
    const MigProfile* profile = FindProfile(*gpu.mig_table, profile_name);
    if (profile == nullptr) {
      return FieldError(ChildPath(instance_path, "profile"),
                        "no MIG profile \"" + profile_name + "\" on " +
                            gpu.mig_table->model_key + " (profiles: " +
                            ProfileNames(*gpu.mig_table) + ")");
    }
    std::optional<MigPlacement> placement;
    int start = 0;
    if (r.Int("start", start, 0, gpu.mig_table->memory_slices - 1,
              Presence::kOptional)) {
      placement = MigPlacement{start, profile->memory_slices};
    }
    if (!r.ok()) return r.status();
    StatusOr<MigInstance> placed = PlaceMigInstance(
        *gpu.mig_table, gpu.mig_instances, profile->name, placement);
    if (!placed.ok()) return FieldError(instance_path, placed.status());
    gpu.mig_instances.push_back(std::move(placed).value());
  }
  return Status::Ok();
}

// The MIG fields of a GPU, after its model and memory are known.
Status ParseGpuMig(FieldReader& r, const std::string& path, InventoryGpu& gpu) {
  r.Bool("mig_enabled", gpu.mig_enabled, Presence::kOptional);
  if (!r.ok()) return r.status();
  if (gpu.mig_enabled) {
    gpu.mig_table = gpu.vendor == "nvidia"
                        ? FindMigTable(gpu.model, gpu.memory_mib)
                        : nullptr;
    if (gpu.mig_table == nullptr) {
      return FieldError(
          r.PathOf("mig_enabled"),
          "model \"" + gpu.model + "\" (" + std::to_string(gpu.memory_mib) +
              " MB) has no MIG profile table (known: " + MigModelKeys() + ")");
    }
  }
  const json* instances = r.Array("mig_instances", Presence::kOptional);
  if (!r.ok()) return r.status();
  if (instances != nullptr && !instances->empty()) {
    if (!gpu.mig_enabled) {
      return FieldError(r.PathOf("mig_instances"), "needs mig_enabled: true");
    }
    HF_RETURN_IF_ERROR(
        ParseMigInstances(*instances, ChildPath(path, "mig_instances"), gpu));
  }
  return Status::Ok();
}

StatusOr<InventoryGpu> ParseGpu(const json& object, const std::string& path,
                                int position, const std::string& node_id) {
  FieldReader r(object, path);
  r.CheckFields({"index", "uuid", "vendor", "model", "memory_mb",
                 "compute_capability", "mig_enabled", "mig_instances",
                 "faults"});
  InventoryGpu gpu;
  gpu.index = position;
  int index = position;
  if (r.Int("index", index, 0, kMaxGpus - 1, Presence::kOptional) &&
      index != position) {
    r.Fail(r.PathOf("index"),
           "is " + std::to_string(index) + " but the GPU is at position " +
               std::to_string(position) + " (indices are the array positions)");
  }
  r.String("model", gpu.model, Presence::kRequired);
  if (r.String("vendor", gpu.vendor, Presence::kOptional) &&
      !IsPlainName(gpu.vendor)) {
    r.Fail(r.PathOf("vendor"), "must be a plain lower-case name");
  }
  r.Int("memory_mb", gpu.memory_mib, 1, kMaxMemoryMib, Presence::kRequired);
  std::string cc;
  if (r.String(
          "compute_capability", cc,
          gpu.vendor == "nvidia" ? Presence::kRequired : Presence::kOptional) &&
      !ParseComputeCapability(cc, gpu.cc_major, gpu.cc_minor)) {
    r.Fail(r.PathOf("compute_capability"),
           "must be \"<major>.<minor>\" such as \"9.0\", got \"" + cc + "\"");
  }
  gpu.uuid = "GPU-sim-" + node_id + "-" + std::to_string(position);
  if (r.String("uuid", gpu.uuid, Presence::kOptional) && !IsGpuUuid(gpu.uuid)) {
    r.Fail(r.PathOf("uuid"), "must start with \"GPU-\"");
  }
  if (!r.ok()) return r.status();
  HF_RETURN_IF_ERROR(ParseGpuMig(r, path, gpu));
  const json* faults = r.Array("faults", Presence::kOptional);
  if (!r.ok()) return r.status();
  if (faults != nullptr) {
    HF_RETURN_IF_ERROR(ParseFaults(*faults, ChildPath(path, "faults"), gpu));
  }
  return gpu;
}

Status ParseMps(const json& object, MpsBehaviour& mps) {
  FieldReader r(object, "mps");
  r.CheckFields({"daemon_can_start", "failure_reason"});
  r.Bool("daemon_can_start", mps.daemon_can_start, Presence::kOptional);
  r.String("failure_reason", mps.failure_reason, Presence::kOptional);
  return r.status();
}

Status ParseGpus(const json& list, Inventory& inventory) {
  if (list.size() > static_cast<std::size_t>(kMaxGpus)) {
    return FieldError("gpus",
                      "more than " + std::to_string(kMaxGpus) + " GPUs");
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = ElementPath("gpus", i);
    StatusOr<InventoryGpu> gpu =
        ParseGpu(list[i], path, static_cast<int>(i), inventory.node_id);
    if (!gpu.ok()) return gpu.status();
    for (const InventoryGpu& earlier : inventory.gpus) {
      if (earlier.uuid == gpu->uuid) {
        return FieldError(ChildPath(path, "uuid"),
                          "\"" + gpu->uuid + "\" is also the UUID of gpus[" +
                              std::to_string(earlier.index) + "]");
      }
    }
    inventory.gpus.push_back(std::move(gpu).value());
  }
  return Status::Ok();
}

// Strict JSON (common/strict_json.h): also refuses a key given twice (the
// second would silently win), numbers out of range and NUL in strings.
// Keys starting with "_" are comments and may repeat.
StatusOr<json> ParseJson(std::string_view text, std::string_view what) {
  StrictJsonOptions options;
  options.top_level = "(document)";
  options.comment_prefix = "_";
  auto doc = ParseStrictJson(text, options);
  if (!doc.ok()) {
    const Status& s = doc.status();
    if (s.field() == options.top_level) {
      return Status::InvalidArgument(std::string(what) + " " + s.message(),
                                     s.field());
    }
    return FieldError(s.field(), s.message());
  }
  return doc;
}

Status AddSource(const Status& status, std::string_view source) {
  return source.empty() ? status : status.WithContext(source);
}

// ---- State file ---------------------------------------------------------

StatusOr<MigDevice> ParseStateDevice(const json& object,
                                     const std::string& path) {
  FieldReader r(object, path);
  r.CheckFields({"gpu_instance_id", "compute_instance_id", "profile", "start",
                 "size", "device_uuid"});
  MigDevice device;
  r.Int("gpu_instance_id", device.gpu_instance_id, 0, kMaxInstanceId,
        Presence::kRequired);
  r.Int("compute_instance_id", device.compute_instance_id, 0, kMaxInstanceId,
        Presence::kRequired);
  r.String("profile", device.profile, Presence::kRequired);
  r.Int("start", device.placement.start, 0, kMaxInstanceId,
        Presence::kRequired);
  r.Int("size", device.placement.size, 1, kMaxInstanceId, Presence::kRequired);
  if (r.String("device_uuid", device.device_uuid, Presence::kRequired) &&
      !device.device_uuid.starts_with("MIG-")) {
    r.Fail(r.PathOf("device_uuid"), "must start with \"MIG-\"");
  }
  if (!r.ok()) return r.status();
  return device;
}

StatusOr<SimGpuMigState> ParseStateGpu(const json& object,
                                       const std::string& path) {
  FieldReader r(object, path);
  r.CheckFields({"index", "uuid", "next_mig_sequence", "devices"});
  SimGpuMigState gpu;
  r.Int("index", gpu.index, 0, kMaxGpus - 1, Presence::kRequired);
  r.String("uuid", gpu.uuid, Presence::kRequired);
  r.Int("next_mig_sequence", gpu.next_mig_sequence, 0,
        std::numeric_limits<std::int64_t>::max() / 2, Presence::kRequired);
  const json* devices = r.Array("devices", Presence::kRequired);
  if (!r.ok()) return r.status();
  for (std::size_t i = 0; i < devices->size(); ++i) {
    StatusOr<MigDevice> device = ParseStateDevice(
        (*devices)[i], ElementPath(ChildPath(path, "devices"), i));
    if (!device.ok()) return device.status();
    gpu.devices.push_back(std::move(device).value());
  }
  return gpu;
}

}  // namespace

StatusOr<MigInstance> PlaceMigInstance(const MigModelTable& table,
                                       const std::vector<MigInstance>& existing,
                                       std::string_view profile_name,
                                       std::optional<MigPlacement> placement) {
  const MigProfile* profile = FindProfile(table, profile_name);
  if (profile == nullptr) {
    return Status::NotFound("no MIG profile \"" + std::string(profile_name) +
                            "\" on " + table.model_key +
                            " (profiles: " + ProfileNames(table) + ")");
  }
  if (placement && !IsLegalPlacement(table, profile->name, *placement)) {
    std::string legal;
    for (const MigPlacement& p : profile->placements) {
      if (!legal.empty()) legal += ", ";
      legal += PlacementText(p);
    }
    return Status::InvalidArgument(
        "placement " + PlacementText(*placement) + " is not legal for " +
        profile->name + " on " + table.model_key + " (legal: " + legal + ")");
  }
  const auto same_profile = std::count_if(
      existing.begin(), existing.end(),
      [&](const MigInstance& i) { return i.profile == profile->name; });
  if (same_profile >= profile->max_instances) {
    return Status::ResourceExhausted(
        "all " + std::to_string(profile->max_instances) + " instances of " +
        profile->name + " on " + table.model_key + " are in use");
  }
  if (profile->media_extensions) {
    for (const MigInstance& other : existing) {
      if (IsMediaProfile(table, other.profile)) {
        return Status::ResourceExhausted(
            "the media engines are taken by " + other.profile + " at " +
            PlacementText(other.placement) + " (one +me instance per GPU)");
      }
    }
  }
  const auto overlapping = [&](const MigPlacement& p) {
    return std::find_if(
        existing.begin(), existing.end(),
        [&](const MigInstance& i) { return i.placement.Overlaps(p); });
  };
  if (placement) {
    const auto clash = overlapping(*placement);
    if (clash != existing.end()) {
      return Status::ResourceExhausted(
          "placement " + PlacementText(*placement) + " for " + profile->name +
          " overlaps " + clash->profile + " at " +
          PlacementText(clash->placement));
    }
    return MigInstance{profile->name, *placement};
  }
  for (const MigPlacement& p : profile->placements) {
    if (overlapping(p) == existing.end()) return MigInstance{profile->name, p};
  }
  return Status::ResourceExhausted("no free placement for " + profile->name +
                                   " on " + table.model_key +
                                   ": every legal placement overlaps an "
                                   "existing instance");
}

StatusOr<Inventory> ParseInventory(std::string_view json_text,
                                   std::string_view source) {
  StatusOr<json> doc = ParseJson(json_text, "the inventory");
  if (!doc.ok()) return AddSource(doc.status(), source);
  Inventory inventory;
  FieldReader r(*doc, "");
  r.CheckFields({"node_id", "containerized", "cpu_milli", "host_memory_mb",
                 "mps", "gpus"});
  if (r.String("node_id", inventory.node_id, Presence::kOptional) &&
      !IsPlainName(inventory.node_id)) {
    r.Fail("node_id", "may hold only letters, digits, '.', '_' and '-'");
  }
  r.Bool("containerized", inventory.containerized, Presence::kOptional);
  r.Int("cpu_milli", inventory.cpu_milli, 1, kMaxCpuMilli, Presence::kRequired);
  r.Int("host_memory_mb", inventory.host_memory_mib, 1, kMaxMemoryMib,
        Presence::kRequired);
  const json* mps = r.Object("mps", Presence::kOptional);
  const json* gpus = r.Array("gpus", Presence::kRequired);
  if (!r.ok()) return AddSource(r.status(), source);
  Status status = Status::Ok();
  if (mps != nullptr) status = ParseMps(*mps, inventory.mps);
  if (status.ok()) status = ParseGpus(*gpus, inventory);
  if (!status.ok()) return AddSource(status, source);
  return inventory;
}

StatusOr<Inventory> LoadInventory(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (ec) {
      return Status::Unavailable("cannot stat inventory file " + path + ": " +
                                 ec.message());
    }
    return Status::NotFound("inventory file " + path + " does not exist");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return Status::Unavailable("cannot read inventory file " + path);
  }
  return ParseInventory(text.str(), path);
}

StatusOr<SimMigState> ParseSimMigState(std::string_view json_text) {
  StatusOr<json> doc = ParseJson(json_text, "the MIG state file");
  if (!doc.ok()) return doc.status();
  FieldReader r(*doc, "");
  r.CheckFields({"format", "version", "gpus"});
  std::string format;
  if (r.String("format", format, Presence::kRequired) &&
      format != kStateFormat) {
    r.Fail("format", "must be \"" + std::string(kStateFormat) + "\"");
  }
  int version = 0;
  r.Int("version", version, kStateVersion, kStateVersion, Presence::kRequired);
  const json* gpus = r.Array("gpus", Presence::kRequired);
  if (!r.ok()) return r.status();
  SimMigState state;
  for (std::size_t i = 0; i < gpus->size(); ++i) {
    StatusOr<SimGpuMigState> gpu =
        ParseStateGpu((*gpus)[i], ElementPath("gpus", i));
    if (!gpu.ok()) return gpu.status();
    state.gpus.push_back(std::move(gpu).value());
  }
  return state;
}

std::string SerializeSimMigState(const SimMigState& state) {
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const SimGpuMigState& gpu : state.gpus) {
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const MigDevice& d : gpu.devices) {
      devices.push_back({{"gpu_instance_id", d.gpu_instance_id},
                         {"compute_instance_id", d.compute_instance_id},
                         {"profile", d.profile},
                         {"start", d.placement.start},
                         {"size", d.placement.size},
                         {"device_uuid", d.device_uuid}});
    }
    gpus.push_back({{"index", gpu.index},
                    {"uuid", gpu.uuid},
                    {"next_mig_sequence", gpu.next_mig_sequence},
                    {"devices", std::move(devices)}});
  }
  nlohmann::ordered_json doc = {{"format", kStateFormat},
                                {"version", kStateVersion},
                                {"gpus", std::move(gpus)}};
  return doc.dump(2) + "\n";
}

}  // namespace hf::gpu
