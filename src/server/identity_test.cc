// Identity (identity.h) on the real SQLite store in a temporary directory,
// with a fake clock: the token cache answers within kTokenCacheMillis, a
// revocation through Identity is seen at once, and missing, unknown and
// revoked tokens are refused.
#include "server/identity.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

using store::Role;

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
    ASSERT_TRUE(store_
                    ->Write([&](store::Txn& txn) -> Status {
                      store::TenantRow row;
                      row.name = "acme";
                      auto t = txn.InsertTenant(row);
                      if (!t.ok()) return t.status();
                      tenant_id_ = t->id;
                      return Status::Ok();
                    })
                    .ok());
    names_ = std::make_unique<Names>(store_.get());
    identity_ = std::make_unique<Identity>(store_.get(), &clock_, names_.get());
    auto admin = identity_->BootstrapAdmin(std::nullopt);
    ASSERT_TRUE(admin.ok()) << admin.status().ToString();
    ASSERT_TRUE(admin->has_value());
    admin_secret_ = **admin;
  }
  void TearDown() override {
    identity_.reset();
    names_.reset();
    store_.reset();
  }

  Caller Admin() {
    auto admin = identity_->Authenticate(admin_secret_);
    EXPECT_TRUE(admin.ok()) << admin.status().ToString();
    return admin.ok() ? *admin : Caller{};
  }

  // A user token of tenant acme: its row and secret.
  std::pair<store::TokenRow, std::string> NewUserToken() {
    auto created = identity_->CreateToken(Admin(), Role::kUser, "acme",
                                          "a user", std::nullopt);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? *created : std::pair<store::TokenRow, std::string>{};
  }

  store::sqlite_testing::TempDir dir_{"hf-identity-test"};
  FakeClock clock_{1'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Names> names_;
  std::unique_ptr<Identity> identity_;
  store::RowId tenant_id_ = 0;
  std::string admin_secret_;
};

TEST_F(IdentityTest, AuthenticatesAndCachesForTheCacheTime) {
  const auto [row, secret] = NewUserToken();
  auto caller = identity_->Authenticate(secret);
  ASSERT_TRUE(caller.ok()) << caller.status().ToString();
  EXPECT_EQ(caller->token_id, row.id);
  EXPECT_EQ(caller->role, Role::kUser);
  EXPECT_EQ(caller->tenant_id, tenant_id_);
  EXPECT_EQ(caller->tenant, "acme");  // the name, from Names
  EXPECT_FALSE(caller->admin());
  EXPECT_TRUE(Admin().admin());

  // Revoked behind Identity's back (as by another server instance): the
  // cached answer stands until the cache time is over.
  ASSERT_TRUE(store_
                  ->Write([&, id = row.id](store::Txn& txn) -> Status {
                    return txn.RevokeToken(id, clock_.NowMillis());
                  })
                  .ok());
  clock_.Advance(kTokenCacheMillis - 1);
  auto cached = identity_->Authenticate(secret);
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_EQ(cached->token_id, row.id);
  clock_.Advance(1);
  auto expired = identity_->Authenticate(secret);
  EXPECT_EQ(expired.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(expired.status().message(), "this token was revoked");
}

TEST_F(IdentityTest, ARevocationIsSeenAtOnce) {
  const auto [row, secret] = NewUserToken();
  ASSERT_TRUE(identity_->Authenticate(secret).ok());  // cached now
  auto revoked = identity_->RevokeToken(Admin(), row.id);
  ASSERT_TRUE(revoked.ok()) << revoked.status().ToString();
  EXPECT_TRUE(revoked->revoked_at.has_value());
  auto again = identity_->Authenticate(secret);  // same instant
  EXPECT_EQ(again.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(again.status().message(), "this token was revoked");
  // Listed as revoked.
  auto listed = identity_->ListTokens(Admin());
  ASSERT_TRUE(listed.ok());
  bool found = false;
  for (const store::TokenRow& t : *listed) {
    if (t.id == row.id) {
      found = true;
      EXPECT_EQ(t.revoked_at, revoked->revoked_at);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(IdentityTest, MissingAndUnknownTokensAreRefused) {
  auto missing = identity_->Authenticate("");
  EXPECT_EQ(missing.status().code(), StatusCode::kUnauthenticated);
  auto unknown = identity_->Authenticate("hf_not-a-token-anyone-made");
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(unknown.status().message(), "unknown token");
  // A user may not revoke; a token no caller may see is not found.
  const auto [row, secret] = NewUserToken();
  auto user = identity_->Authenticate(secret);
  ASSERT_TRUE(user.ok());
  EXPECT_EQ(identity_->RevokeToken(*user, row.id).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(identity_->RevokeToken(Admin(), 9999).status().code(),
            StatusCode::kNotFound);
  // Only one bootstrap token is ever generated.
  auto second = identity_->BootstrapAdmin(std::nullopt);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->has_value());
}

}  // namespace
}  // namespace hf::server
