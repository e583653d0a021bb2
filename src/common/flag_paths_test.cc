#include "common/flag_paths.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace hf {
namespace {

namespace fs = std::filesystem;

TEST(FlagPathsTest, RelativePathsBecomeAbsoluteAgainstTheWorkingDirectory) {
  const std::string cwd = fs::current_path().string();
  std::string value = "./var/mps";
  ASSERT_TRUE(MakeFlagPathAbsolute("--mps-dir", value).ok());
  EXPECT_EQ(value, cwd + "/var/mps");
  value = "var/../state/";
  ASSERT_TRUE(MakeFlagPathAbsolute("--state-dir", value).ok());
  EXPECT_EQ(value, cwd + "/state");
  value = "/already/absolute/./x";
  ASSERT_TRUE(MakeFlagPathAbsolute("--state-dir", value).ok());
  EXPECT_EQ(value, "/already/absolute/x");
  value = "";
  ASSERT_TRUE(MakeFlagPathAbsolute("--hook-library", value).ok());
  EXPECT_EQ(value, "") << "an unset flag stays unset";
}

TEST(FlagPathsTest, BareProgramNamesStayForTheSearchPath) {
  const std::string cwd = fs::current_path().string();
  std::string value = "nvidia-cuda-mps-control";
  ASSERT_TRUE(MakeFlagProgramAbsolute("--mps-control", value).ok());
  EXPECT_EQ(value, "nvidia-cuda-mps-control");
  value = "bin/docker";
  ASSERT_TRUE(MakeFlagProgramAbsolute("--docker", value).ok());
  EXPECT_EQ(value, cwd + "/bin/docker");
}

TEST(FlagPathsTest, SqliteUrlsGetAnAbsolutePathOthersAreKept) {
  const std::string cwd = fs::current_path().string();
  std::string url = "sqlite:./var/heteroflow.db";
  ASSERT_TRUE(MakeSqliteUrlAbsolute("--db", url).ok());
  EXPECT_EQ(url, "sqlite:" + cwd + "/var/heteroflow.db");
  for (const char* kept : {"sqlite:/abs/hf.db", "sqlite://host/hf.db",
                           "sqlite::memory:", "sqlite:file:hf.db", "sqlite:"}) {
    url = kept;
    ASSERT_TRUE(MakeSqliteUrlAbsolute("--db", url).ok());
    EXPECT_EQ(url, kept) << "left for OpenStore to accept or refuse";
  }
  url = "postgres://u@db:5432/hf";
  ASSERT_TRUE(MakeSqliteUrlAbsolute("--db", url).ok());
  EXPECT_EQ(url, "postgres://u@db:5432/hf");
}

TEST(FlagPathsTest, AnUnreadableWorkingDirectoryIsAnErrorNamingTheFlag) {
  const fs::path before = fs::current_path();
  const fs::path gone =
      fs::temp_directory_path() / ("hf-flag-paths-" + std::to_string(getpid()));
  fs::create_directories(gone);
  ASSERT_EQ(chdir(gone.c_str()), 0);
  fs::remove(gone);
  std::string value = "mps";
  const Status s = MakeFlagPathAbsolute("--mps-dir", value);
  ASSERT_EQ(chdir(before.c_str()), 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.field(), "--mps-dir");
  EXPECT_EQ(value, "mps") << "left as it was";
}

}  // namespace
}  // namespace hf
