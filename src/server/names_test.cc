// Names (names.h) on the real SQLite store in a temporary directory: what
// is set is answered from memory; a name not set is read from the store
// once and then cached; a card is read from the store only when asked to.
#include "server/names.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

using store::RowId;

// Delegates to a real store and counts the read transactions.
class CountingStore final : public store::Store {
 public:
  explicit CountingStore(std::unique_ptr<store::Store> inner)
      : inner_(std::move(inner)) {}
  Status Write(const std::function<Status(store::Txn&)>& fn) override {
    return inner_->Write(fn);
  }
  Status Read(const std::function<Status(store::Txn&)>& fn) override {
    reads.fetch_add(1);
    return inner_->Read(fn);
  }
  store::StoreInfo info() const override { return inner_->info(); }
  std::atomic<int> reads{0};

 private:
  std::unique_ptr<store::Store> inner_;
};

class NamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto inner = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(inner.ok()) << inner.status().ToString();
    store_ = std::make_unique<CountingStore>(std::move(*inner));
    names_ = std::make_unique<Names>(store_.get());
  }
  void TearDown() override {
    names_.reset();
    store_.reset();
  }

  template <typename Fn>
  void Write(Fn fn) {
    ASSERT_TRUE(store_->Write(fn).ok());
  }

  store::sqlite_testing::TempDir dir_{"hf-names-test"};
  std::unique_ptr<CountingStore> store_;
  std::unique_ptr<Names> names_;
};

TEST_F(NamesTest, WhatIsSetIsAnsweredWithoutTheStore) {
  names_->SetTenant(1, "acme");
  names_->SetNode(1, "node-a");
  names_->SetGroup(1, "labs");
  names_->SetAll({store::GroupRow{.id = 2, .name = "ops"}},
                 {store::TenantRow{.id = 2, .name = "beta"}},
                 {store::NodeRow{.id = 2, .name = "node-b"}});
  names_->SetTenant(1, "acme2");  // a later set wins
  EXPECT_EQ(names_->Tenant(1), "acme2");
  EXPECT_EQ(names_->Node(1), "node-a");
  EXPECT_EQ(names_->Group(1), "labs");
  EXPECT_EQ(names_->Tenant(2), "beta");
  EXPECT_EQ(names_->Node(2), "node-b");
  EXPECT_EQ(names_->Group(2), "ops");

  names_->SetGpu(GpuKey{1, 0}, GpuIdentity{"GPU-a0", "nvidia"});
  names_->SetGpu(GpuKey{1, 2}, GpuIdentity{"GPU-a2", "amd"});
  ASSERT_TRUE(names_->Gpu(GpuKey{1, 2}).has_value());
  EXPECT_EQ(names_->Gpu(GpuKey{1, 2})->vendor, "amd");
  EXPECT_FALSE(names_->Gpu(GpuKey{1, 1}).has_value());
  EXPECT_FALSE(names_->Gpu(GpuKey{2, 0}).has_value());
  // Several at once, in the order asked, the unknown left out.
  const auto gpus = names_->Gpus(1, {2, 1, 0});
  ASSERT_EQ(gpus.size(), 2U);
  EXPECT_EQ(gpus[0].uuid, "GPU-a2");
  EXPECT_EQ(gpus[1].uuid, "GPU-a0");
  EXPECT_EQ(names_->GpuUuid(GpuKey{1, 0}, /*read_store=*/true), "GPU-a0");
  EXPECT_EQ(store_->reads.load(), 0);
}

TEST_F(NamesTest, AMissIsReadFromTheStoreOnceThenCached) {
  store::TenantRow tenant;
  store::NodeRow node;
  store::GroupRow group;
  Write([&](store::Txn& txn) -> Status {
    auto t = txn.InsertTenant(store::TenantRow{.name = "acme"});
    if (!t.ok()) return t.status();
    tenant = *t;
    auto n = txn.UpsertNode(store::NodeRow{.name = "node-a"});
    if (!n.ok()) return n.status();
    node = *n;
    auto g = txn.InsertGroup(store::GroupRow{.name = "labs"});
    if (!g.ok()) return g.status();
    group = *g;
    return Status::Ok();
  });
  EXPECT_EQ(names_->Tenant(tenant.id), "acme");
  EXPECT_EQ(store_->reads.load(), 1);
  EXPECT_EQ(names_->Tenant(tenant.id), "acme");
  EXPECT_EQ(store_->reads.load(), 1);  // cached
  EXPECT_EQ(names_->Node(node.id), "node-a");
  EXPECT_EQ(names_->Node(node.id), "node-a");
  EXPECT_EQ(names_->Group(group.id), "labs");
  EXPECT_EQ(names_->Group(group.id), "labs");
  EXPECT_EQ(store_->reads.load(), 3);

  // Unknown: "" and not cached (it may be created later).
  EXPECT_EQ(names_->Tenant(999), "");
  EXPECT_EQ(store_->reads.load(), 4);
  Write([&](store::Txn& txn) -> Status {
    return txn.InsertTenant(store::TenantRow{.name = "late"}).status();
  });
  RowId late = 0;
  ASSERT_TRUE(store_
                  ->Read([&](store::Txn& txn) -> Status {
                    auto t = txn.FindTenant("late");
                    if (!t.ok()) return t.status();
                    late = t->id;
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(names_->Tenant(late), "late");
}

TEST_F(NamesTest, ACardIsReadFromTheStoreOnlyWhenAskedTo) {
  Write([&](store::Txn& txn) -> Status {
    auto n = txn.UpsertNode(store::NodeRow{.name = "node-a"});
    if (!n.ok()) return n.status();
    return txn
        .UpsertGpu(store::GpuRow{
            .node_id = n->id, .index = 1, .uuid = "GPU-s1", .vendor = "nvidia"})
        .status();
  });
  RowId node = 0;
  ASSERT_TRUE(store_
                  ->Read([&](store::Txn& txn) -> Status {
                    auto n = txn.FindNode("node-a");
                    if (!n.ok()) return n.status();
                    node = n->id;
                    return Status::Ok();
                  })
                  .ok());
  const int before = store_->reads.load();
  // The leader: no store read (it may be inside a write transaction).
  EXPECT_EQ(names_->GpuUuid(GpuKey{node, 1}, /*read_store=*/false), "");
  EXPECT_EQ(store_->reads.load(), before);
  // A follower: the store's inventory, not cached (the ledger decides).
  EXPECT_EQ(names_->GpuUuid(GpuKey{node, 1}, /*read_store=*/true), "GPU-s1");
  EXPECT_EQ(store_->reads.load(), before + 1);
  EXPECT_FALSE(names_->Gpu(GpuKey{node, 1}).has_value());
  EXPECT_EQ(names_->GpuUuid(GpuKey{node, 7}, /*read_store=*/true), "");
  // Once set, the set card wins without a read.
  names_->SetGpu(GpuKey{node, 1}, GpuIdentity{"GPU-l1", "nvidia"});
  EXPECT_EQ(names_->GpuUuid(GpuKey{node, 1}, /*read_store=*/true), "GPU-l1");
  EXPECT_EQ(store_->reads.load(), before + 2);
}

}  // namespace
}  // namespace hf::server
