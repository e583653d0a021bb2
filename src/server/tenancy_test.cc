// Tenancy (tenancy.h) on the real SQLite store: who may change tenancy is
// checked before what they sent, bad input names its field, the ledger
// learns each change only after it committed (and nothing of a change that
// failed), in commit order, and a revoke is idempotent.
#include "server/tenancy.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "server/store_test_rows.h"
#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

using store::RowId;

// Records what the ledger is told, and checks that each change is in the
// store by the time it is told.
class RecordingLedger : public TenancyLedger {
 public:
  explicit RecordingLedger(store::Store* store) : store_(store) {}

  Status GroupCreated(const store::GroupRow& group) override {
    return Note("group+" + group.name, [&](store::Txn& txn) {
      return txn.FindGroup(group.name).ok();
    });
  }
  Status TenantChanged(const store::TenantRow& tenant) override {
    return Note("tenant=" + tenant.name + ":" +
                    (tenant.group_id ? std::to_string(*tenant.group_id) : "-"),
                [&](store::Txn& txn) {
                  auto t = txn.FindTenant(tenant.name);
                  return t.ok() && t->group_id == tenant.group_id;
                });
  }
  Status GroupDeleted(RowId group, const std::vector<RowId>& members) override {
    return Note(
        "group-" + std::to_string(group) + "/" + std::to_string(members.size()),
        [&](store::Txn& txn) {
          auto groups = txn.ListGroups();
          if (!groups.ok()) return false;
          for (const auto& g : *groups) {
            if (g.id == group) return false;
          }
          return true;
        });
  }
  Status ApprovalGranted(const store::ApprovalRow& approval) override {
    return Note("approve" + std::to_string(approval.id), [&](store::Txn& txn) {
      return txn.GetApproval(approval.id).ok();
    });
  }
  Status ApprovalRevoked(RowId approval) override {
    return Note("revoke" + std::to_string(approval), [&](store::Txn& txn) {
      auto a = txn.GetApproval(approval);
      return a.ok() && a->revoked_at.has_value();
    });
  }

  std::vector<std::string> told;
  bool committed_first = true;

 private:
  template <typename F>
  Status Note(std::string what, F committed) {
    bool in_store = false;
    Status read = store_->Read([&](store::Txn& txn) -> Status {
      in_store = committed(txn);
      return Status::Ok();
    });
    if (!read.ok() || !in_store) committed_first = false;
    told.push_back(std::move(what));
    return Status::Ok();
  }
  store::Store* store_;
};

class TenancyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
    ledger_ = std::make_unique<RecordingLedger>(store_.get());
    writer_ = std::make_unique<StoreWriterForTest>(store_.get());
    tenancy_ = std::make_unique<Tenancy>(store_.get(), &clock_, writer_.get(),
                                         ledger_.get());
    admin_.role = store::Role::kAdmin;
    admin_.token_id = 1;
  }

  store::sqlite_testing::TempDir dir_{"hf-tenancy-test"};
  FakeClock clock_{1'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<RecordingLedger> ledger_;
  std::unique_ptr<StoreWriterForTest> writer_;
  std::unique_ptr<Tenancy> tenancy_;
  Caller admin_;
};

TEST_F(TenancyTest, TheLedgerLearnsEachChangeAfterItsCommitInOrder) {
  ASSERT_TRUE(tenancy_->CreateTenant(admin_, "acme", "labs").ok());
  ASSERT_TRUE(tenancy_->CreateTenant(admin_, "beta", std::nullopt).ok());
  auto approval = tenancy_->CreateApproval(
      admin_, {"acme", "beta", "joint training run", std::nullopt, 3600});
  ASSERT_TRUE(approval.ok()) << approval.status().ToString();
  ASSERT_TRUE(tenancy_->RevokeApproval(admin_, approval->id).ok());
  ASSERT_TRUE(tenancy_->SetTenantGroup(admin_, "beta", "labs").ok());
  auto deleted = tenancy_->DeleteGroup(admin_, "labs");
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  const std::string group = std::to_string(deleted->id);
  const std::string id = std::to_string(approval->id);
  EXPECT_EQ(
      ledger_->told,
      (std::vector<std::string>{
          "group+labs", "tenant=acme:" + group, "tenant=beta:-", "approve" + id,
          "revoke" + id, "tenant=beta:" + group, "group-" + group + "/2"}));
  EXPECT_TRUE(ledger_->committed_first);
}

TEST_F(TenancyTest, AFailedWriteTellsTheLedgerNothing) {
  ASSERT_TRUE(tenancy_->CreateTenant(admin_, "acme", std::nullopt).ok());
  ledger_->told.clear();
  // Already there: refused by the store, nothing told.
  auto again = tenancy_->CreateTenant(admin_, "acme", "labs");
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  // Not the leader: nothing written, nothing told.
  writer_->refuse = true;
  EXPECT_EQ(tenancy_->CreateGroup(admin_, "labs").status().code(),
            StatusCode::kUnavailable);
  EXPECT_TRUE(ledger_->told.empty());
  writer_->refuse = false;
  auto groups = tenancy_->ListGroups(admin_);
  ASSERT_TRUE(groups.ok());
  EXPECT_TRUE(groups->empty());  // the failed tenant's group rolled back
}

TEST_F(TenancyTest, WhoMayCallIsCheckedBeforeWhatTheySent) {
  Caller user;
  user.role = store::Role::kUser;
  user.tenant_id = 7;
  // An invalid name from a non-admin: refused for who they are.
  EXPECT_EQ(
      tenancy_->CreateTenant(user, "NOT VALID", std::nullopt).status().code(),
      StatusCode::kPermissionDenied);
  EXPECT_EQ(tenancy_->CreateApproval(user, {"a", "a", "", std::nullopt, 0})
                .status()
                .code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(ledger_->told.empty());
}

TEST_F(TenancyTest, BadApprovalsNameTheirField) {
  ASSERT_TRUE(tenancy_->CreateTenant(admin_, "acme", std::nullopt).ok());
  ASSERT_TRUE(tenancy_->CreateTenant(admin_, "beta", std::nullopt).ok());
  const auto field = [&](const ApprovalCreate& request) {
    auto made = tenancy_->CreateApproval(admin_, request);
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
    return made.status().field();
  };
  EXPECT_EQ(field({"acme", "acme", "why", std::nullopt, 60}), "tenant_b");
  EXPECT_EQ(field({"acme", "beta", "", std::nullopt, 60}), "reason");
  EXPECT_EQ(field({"acme", "beta", "why", std::nullopt, std::nullopt}),
            "expires_at");
  EXPECT_EQ(field({"acme", "beta", "why", std::nullopt, 0}), "ttl_s");
  EXPECT_EQ(field({"acme", "beta", "why", 1, std::nullopt}), "expires_at");
  EXPECT_EQ(field({"acme", "nobody", "why", std::nullopt, 60}), "tenant_b");
  auto listed = tenancy_->ListApprovals(admin_);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

TEST_F(TenancyTest, ARevokeIsIdempotent) {
  ASSERT_TRUE(tenancy_->CreateTenant(admin_, "acme", std::nullopt).ok());
  ASSERT_TRUE(tenancy_->CreateTenant(admin_, "beta", std::nullopt).ok());
  auto approval = tenancy_->CreateApproval(
      admin_, {"beta", "acme", "why", std::nullopt, 60});
  ASSERT_TRUE(approval.ok());
  auto first = tenancy_->RevokeApproval(admin_, approval->id);
  clock_.Advance(5'000);
  auto second = tenancy_->RevokeApproval(admin_, approval->id);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->revoked_at, second->revoked_at);
  EXPECT_LT(approval->tenant_a, approval->tenant_b);  // stored ordered
}

TEST_F(TenancyTest, ConcurrentChangesReachTheLedgerInCommitOrder) {
  // Two threads flip one tenant between two groups; the last group the
  // ledger was told must be the one the store holds.
  ASSERT_TRUE(tenancy_->CreateGroup(admin_, "red").ok());
  ASSERT_TRUE(tenancy_->CreateGroup(admin_, "blue").ok());
  ASSERT_TRUE(tenancy_->CreateTenant(admin_, "acme", std::nullopt).ok());
  std::vector<std::thread> threads;
  for (const char* group : {"red", "blue"}) {
    threads.emplace_back([&, group] {
      for (int i = 0; i < 20; ++i) {
        ASSERT_TRUE(tenancy_->SetTenantGroup(admin_, "acme", group).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  auto stored = tenancy_->GetTenant(admin_, "acme");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(ledger_->told.back(),
            "tenant=acme:" + std::to_string(*stored->group_id));
  EXPECT_TRUE(ledger_->committed_first);
}

}  // namespace
}  // namespace hf::server
