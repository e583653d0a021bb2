// TempDir and OpenSqliteStore: making and removing the directory, and the
// store's URL in it. See temp_store.h.
#include "store/testing/temp_store.h"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <system_error>

namespace hf::store::sqlite_testing {

TempDir::TempDir(std::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" +
      std::string(prefix) + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed for " + pattern);
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  // A destructor must not throw; a directory left behind only costs space.
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::File(std::string_view name) const {
  return (path_ / name).string();
}

StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const TempDir& dir) {
  return OpenStore("sqlite:" + dir.File(kDatabaseFile));
}

}  // namespace hf::store::sqlite_testing
