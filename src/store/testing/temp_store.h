// TempDir and OpenSqliteStore: a real SQLite store in a fresh temporary
// directory, for tests.
//
// Tests run the real store, not a fake, so that what they check holds for
// the database the server uses; each test gets a directory of its own so
// that tests running side by side (ctest -j, repeated runs) never share a
// database file, and the directory goes away with the TempDir even when an
// assertion ends the test early.
//
// Declare the TempDir before the store that lives in it: members and locals
// are destroyed in reverse order, so the store is closed before its files
// are removed.
//
// Thread-safety: none needed; a TempDir is made and dropped by one thread.
// The store is a Store like any other (store.h).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "store/store.h"

namespace hf::store::sqlite_testing {

// A directory made with a unique name under $TMPDIR (else /tmp), removed
// with everything in it on destruction.
class TempDir {
 public:
  // `prefix` starts the directory's name, so that one left behind (a killed
  // test) says which test made it. Throws std::runtime_error when the
  // directory cannot be made: a test without it cannot run, and GoogleTest
  // reports the exception as that test's failure.
  explicit TempDir(std::string_view prefix = "hf-test");
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the directory.
  std::string File(std::string_view name) const;

 private:
  std::filesystem::path path_;
};

// The database file OpenSqliteStore opens in a TempDir.
inline constexpr std::string_view kDatabaseFile = "hf.db";

// Opens (creating it the first time) the SQLite store in `dir`'s
// kDatabaseFile. Calling it again on the same TempDir reopens the same
// database, as a restarted server would.
StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const TempDir& dir);

}  // namespace hf::store::sqlite_testing
