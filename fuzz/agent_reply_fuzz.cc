// libFuzzer target: the agent's decoding of the control plane's replies
// (src/agent). A real Agent, on the simulated GPU driver and task runtime,
// runs cycles against a transport that answers every request with the next
// piece of the input: pieces are separated by a 0x1e byte, and a piece's
// first byte picks the HTTP status (200, 400, 404, 409, 500).
//
// Checked: nothing throws or crashes, whatever the replies; every task the
// agent starts is pinned to GPUs of the node; no MIG partition is made on a
// GPU whose UUID the command did not name.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent.h"
#include "agent/server_client.h"
#include "agent/testing/test_node.h"
#include "common/clock.h"
#include "gpu/inventory.h"
#include "gpu/sim_driver.h"
#include "runtime/sim_runtime.h"

namespace {

using hf::agent::WireReply;
using hf::agent::WireRequest;

void Fail(const char* what) {
  std::fprintf(stderr, "agent_reply_fuzz: %s\n", what);
  std::abort();
}

class FuzzedServer final : public hf::agent::Transport {
 public:
  explicit FuzzedServer(std::vector<std::string_view> pieces)
      : pieces_(std::move(pieces)) {}
  hf::StatusOr<WireReply> RoundTrip(const WireRequest&) override {
    if (next_ >= pieces_.size()) return hf::Status::Unavailable("no more");
    std::string_view piece = pieces_[next_++];
    static constexpr int kStatus[] = {200, 200, 200, 400, 404, 409, 500};
    int status = 200;
    if (!piece.empty()) {
      status = kStatus[static_cast<unsigned char>(piece[0]) % 7];
      piece.remove_prefix(1);
    }
    return WireReply{status, std::string(piece)};
  }

 private:
  std::vector<std::string_view> pieces_;
  std::size_t next_ = 0;
};

const std::filesystem::path& StateRoot() {
  static const std::filesystem::path root =
      std::filesystem::temp_directory_path() /
      ("hf-agent-reply-fuzz-" + std::to_string(::getpid()));
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> pieces;
  std::size_t start = 0;
  while (start <= input.size() && pieces.size() < 64) {
    const std::size_t end = input.find('\x1e', start);
    if (end == std::string_view::npos) {
      pieces.push_back(input.substr(start));
      break;
    }
    pieces.push_back(input.substr(start, end - start));
    start = end + 1;
  }

  std::error_code ec;
  std::filesystem::remove_all(StateRoot(), ec);
  hf::FakeClock clock(1'000'000);
  auto inventory = hf::gpu::ParseInventory(hf::agent::test_node::kInventory);
  if (!inventory.ok()) Fail("inventory");
  auto driver = hf::gpu::SimGpuDriver::Create(std::move(*inventory), clock);
  if (!driver.ok()) Fail("driver");
  std::vector<std::string> uuids;
  auto gpus = (*driver)->ListGpus();
  if (!gpus.ok() || gpus->size() != 2) Fail("GPUs");
  for (const auto& g : *gpus) uuids.push_back(g.uuid);
  hf::runtime::SimHost host(driver->get(), &clock,
                            [](const hf::runtime::TaskSpec&) {
                              return hf::runtime::SimTaskBehaviour{};
                            });
  hf::runtime::SimRuntime runtime(&host);
  hf::agent::ServerClient client(std::make_unique<FuzzedServer>(pieces),
                                 "token");
  hf::agent::AgentOptions options;
  options.node_id = "n1";
  options.state_dir = StateRoot();
  auto agent = hf::agent::Agent::Create(options, &client, driver->get(),
                                        &runtime, nullptr, {}, &clock);
  if (!agent.ok()) Fail("agent");
  for (int cycle = 0; cycle < 4; ++cycle) {
    (void)(*agent)->RunOnce();
    clock.Advance(5000);
  }
  for (const auto& [id, task] : host.tasks()) {
    if (!task.mig_device.empty()) continue;
    if (task.gpu_indices.empty()) Fail("a task started with no GPU pinned");
    for (int index : task.gpu_indices) {
      if (index < 0 || index > 1) Fail("a task pinned to no GPU of the node");
    }
  }
  // The T4 (GPU 1) is not in MIG mode, so only GPU 0 can hold partitions,
  // and only for a command that named GPU 0's UUID.
  auto made = (*driver)->ListMigDevices(0);
  if (made.ok() && !made->empty() &&
      input.find(uuids[0]) == std::string_view::npos) {
    Fail("a partition made for a command that did not name the GPU");
  }
  agent->reset();
  std::filesystem::remove_all(StateRoot(), ec);
  return 0;
}
