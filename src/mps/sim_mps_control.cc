// SimMpsControl (see sim_mps_control.h).
#include "mps/sim_mps_control.h"

#include <utility>

namespace hf::mps {

SimMpsControl::SimMpsControl(SimMpsOptions options)
    : pipe_directory_(std::move(options.pipe_directory)),
      log_directory_(std::move(options.log_directory)),
      can_start_(options.daemon_can_start) {}

Status SimMpsControl::Ensure() {
  MutexLock lock(mu_);
  if (running_) return Status::Ok();
  if (!can_start_) {
    return Status::Unavailable(
        "starting the MPS control daemon (sim): the simulated node cannot "
        "run one");
  }
  running_ = true;
  ++starts_;
  daemon_caps_ = caps_;  // a new daemon gets every remembered cap
  return Status::Ok();
}

bool SimMpsControl::Alive() {
  MutexLock lock(mu_);
  return running_;
}

Status SimMpsControl::SetWholeCardPinnedLimit(const std::string& device,
                                              MemoryMib limit_mib) {
  HF_RETURN_IF_ERROR(ValidateDeviceKey(device));
  if (limit_mib <= 0) {
    return Status::InvalidArgument(
        "pinned-memory cap must be 1 MiB or more, got " +
            std::to_string(limit_mib),
        "limit_mib");
  }
  MutexLock lock(mu_);
  caps_[device] = limit_mib;
  if (!running_) {
    return Status::Unavailable(
        "no MPS control daemon answers now; the pinned-memory cap of device " +
        device + " is set when it starts");
  }
  daemon_caps_[device] = limit_mib;
  return Status::Ok();
}

std::string SimMpsControl::PipeDirectory() const { return pipe_directory_; }
std::string SimMpsControl::LogDirectory() const { return log_directory_; }

Status SimMpsControl::Stop() {
  MutexLock lock(mu_);
  running_ = false;
  daemon_caps_.clear();
  return Status::Ok();
}

void SimMpsControl::KillDaemon() {
  MutexLock lock(mu_);
  running_ = false;
  daemon_caps_.clear();
}

void SimMpsControl::SetDaemonCanStart(bool can_start) {
  MutexLock lock(mu_);
  can_start_ = can_start;
}

std::optional<MemoryMib> SimMpsControl::DaemonPinnedLimit(
    const std::string& device) const {
  MutexLock lock(mu_);
  auto it = daemon_caps_.find(device);
  if (!running_ || it == daemon_caps_.end()) return std::nullopt;
  return it->second;
}

int SimMpsControl::starts() const {
  MutexLock lock(mu_);
  return starts_;
}

}  // namespace hf::mps
