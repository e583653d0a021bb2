// The pure half of MPS: capability, client env, and the command grammar
// shared by both MpsControl implementations.
#include "mps/mps_control.h"

#include <cctype>
#include <cstdint>
#include <string>

namespace hf::mps {

namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() &&
         std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

bool AllDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

bool MpsCapable(bool daemon_alive, int cc_major) {
  return daemon_alive && cc_major >= 7;
}

MpsDaemonState ProbeDaemon(MpsControl& control) {
  MpsDaemonState state;
  state.alive = control.Alive();
  state.pipe_directory = control.PipeDirectory();
  state.log_directory = control.LogDirectory();
  return state;
}

MpsSliceLimits SliceLimitsFromEnv(
    const std::map<std::string, std::string>& slice_env) {
  MpsSliceLimits limits;
  if (auto it = slice_env.find(std::string(kPinnedMemLimitEnv));
      it != slice_env.end()) {
    limits.pinned_device_mem_limit = it->second;
  }
  if (auto it = slice_env.find(std::string(kActiveThreadPercentageEnv));
      it != slice_env.end()) {
    limits.active_thread_percentage = it->second;
  }
  return limits;
}

std::map<std::string, std::string> MpsClientEnv(const MpsDaemonState& daemon,
                                                const MpsSliceLimits& limits) {
  std::map<std::string, std::string> env;
  if (!daemon.alive || daemon.pipe_directory.empty()) return env;
  env[std::string(kPipeDirectoryEnv)] = daemon.pipe_directory;
  if (!daemon.log_directory.empty()) {
    env[std::string(kLogDirectoryEnv)] = daemon.log_directory;
  }
  if (!limits.pinned_device_mem_limit.empty()) {
    env[std::string(kPinnedMemLimitEnv)] = limits.pinned_device_mem_limit;
  }
  if (!limits.active_thread_percentage.empty()) {
    env[std::string(kActiveThreadPercentageEnv)] =
        limits.active_thread_percentage;
  }
  return env;
}

Status ValidateDeviceKey(std::string_view device) {
  if (AllDigits(device) && device.size() <= 4) return Status::Ok();
  if ((device.starts_with("GPU-") || device.starts_with("MIG-")) &&
      device.size() > 4 && device.size() <= 128) {
    bool clean = true;
    for (char c : device) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' &&
          c != '/') {
        clean = false;
      }
    }
    if (clean) return Status::Ok();
  }
  return Status::InvalidArgument(
      "an MPS device is a decimal index or a GPU-/MIG- UUID, got '" +
          std::string(device.substr(0, 64)) + "'",
      "device");
}

std::string FormatPinnedLimit(MemoryMib limit_mib) {
  return std::to_string(limit_mib) + "M";
}

bool PinnedLimitReplyMatches(std::string_view reply, MemoryMib limit_mib) {
  reply = Trim(reply);
  if (reply.size() < 2) return false;
  const char unit = reply.back();
  const std::string_view number = reply.substr(0, reply.size() - 1);
  if (!AllDigits(number) || number.size() > 12) return false;
  const std::int64_t value = std::stoll(std::string(number));
  if (unit == 'M') return value == limit_mib;
  if (unit == 'G') {
    // Exact when the limit is whole GiB; otherwise the daemon's rounding
    // down is all the reply can show.
    return value == limit_mib / 1024 && limit_mib >= 1024;
  }
  return false;
}

}  // namespace hf::mps
