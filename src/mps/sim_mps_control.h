// SimMpsControl: MpsControl for the simulated GPU backend (machines without
// GPUs, the simulator, tests). Whether a daemon can start comes from the
// simulated inventory (parsed elsewhere); the daemon is a flag, the caps a
// map. It behaves as ProcessMpsControl does towards the agent: the same
// contract tests run against both (mps_test.cc).
//
// Thread-safety: safe to call from several threads (one internal mutex).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/thread_annotations.h"
#include "mps/mps_control.h"

namespace hf::mps {

struct SimMpsOptions {
  // False: every start fails, as on a node whose GPUs cannot run MPS.
  bool daemon_can_start = true;
  std::string pipe_directory = "/run/heteroflow/mps/pipe";
  std::string log_directory = "/run/heteroflow/mps/log";
};

class SimMpsControl final : public MpsControl {
 public:
  explicit SimMpsControl(SimMpsOptions options);

  Status Ensure() override;
  bool Alive() override;
  Status SetWholeCardPinnedLimit(const std::string& device,
                                 MemoryMib limit_mib) override;
  std::string PipeDirectory() const override;
  std::string LogDirectory() const override;
  Status Stop() override;

  // Test seams.
  // The daemon dies (as if SIGKILLed): the caps it held are gone until the
  // next Ensure starts it and sets them again.
  void KillDaemon();
  void SetDaemonCanStart(bool can_start);
  // The cap the running daemon holds for `device`; nullopt when none or no
  // daemon runs.
  std::optional<MemoryMib> DaemonPinnedLimit(const std::string& device) const;
  // How many times a daemon was started.
  int starts() const;

 private:
  const std::string pipe_directory_;
  const std::string log_directory_;
  mutable Mutex mu_;
  bool can_start_ HF_GUARDED_BY(mu_);
  bool running_ HF_GUARDED_BY(mu_) = false;
  int starts_ HF_GUARDED_BY(mu_) = 0;
  std::map<std::string, MemoryMib> caps_ HF_GUARDED_BY(mu_);
  std::map<std::string, MemoryMib> daemon_caps_ HF_GUARDED_BY(mu_);
};

}  // namespace hf::mps
