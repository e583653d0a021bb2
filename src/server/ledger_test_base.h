// For the tests of the units over the ledger (Inventory, LedgerTenancy,
// Placement): an empty ledger with its inventory mirror, and the stored row
// of an A100 GPU to feed it. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "ledger/ledger.h"
#include "server/inventory.h"
#include "server/names.h"
#include "server/scheduler_queue.h"
#include "store/store.h"

namespace hf::server {

class LedgerTestBase : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ledger = ledger::Ledger::Create();
    ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
    ledger_ = std::move(*ledger);
    inventory_ = std::make_unique<Inventory>(*ledger_, names_, queue_);
  }

  // GPU `index` of stored node `node`: an 80 GB A100 (or `memory_mib`).
  static store::GpuRow A100(store::RowId node, int index, std::string uuid,
                            std::int64_t memory_mib = 81920) {
    store::GpuRow g;
    g.node_id = node;
    g.index = index;
    g.uuid = std::move(uuid);
    g.vendor = "nvidia";
    g.model = "NVIDIA A100-SXM4-80GB";
    g.memory_mib = memory_mib;
    g.cc_major = 8;
    return g;
  }

  std::unique_ptr<ledger::Ledger> ledger_;
  Names names_{nullptr};
  SchedulerQueue queue_{60'000};
  std::unique_ptr<Inventory> inventory_;
};

}  // namespace hf::server
