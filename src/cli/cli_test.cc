// Tests of hfctl: settings precedence, the requests each command builds,
// table rendering, error messages, and the built binary itself (an
// unreachable server, --help) plus the real HTTP transport against a small
// loopback server.
//
// The tests change the process environment (HF_SERVER, HF_TOKEN,
// HFCTL_CONFIG, HOME) and restore it; they must not run in parallel threads.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/client.h"
#include "cli/render.h"
#include "cli/request.h"
#include "cli/settings.h"

namespace hf::cli {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system's temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "hfctl_test_XXXXXX");
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }

  // Writes `content` to `name` in this directory; returns its path.
  std::string Write(const std::string& name, const std::string& content) const {
    const fs::path file = path_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << content;
    return file.string();
  }

 private:
  fs::path path_;
};

// Clears the variables hfctl reads and points HOME at an empty directory, so
// neither the developer's shell nor their config file leaks into a test.
class CliTest : public ::testing::Test {
 protected:
  static constexpr const char* kVariables[] = {"HF_SERVER", "HF_TOKEN",
                                               "HFCTL_CONFIG", "HOME"};

  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      if (value != nullptr) saved_[name] = value;
      unsetenv(name);
    }
    setenv("HOME", home_.path().c_str(), 1);
  }

  void TearDown() override {
    for (const char* name : kVariables) {
      unsetenv(name);
      if (auto it = saved_.find(name); it != saved_.end()) {
        setenv(name, it->second.c_str(), 1);
      }
    }
  }

  // Writes the default config file, $HOME/.config/heteroflow/hfctl.json.
  std::string WriteDefaultConfig(const std::string& content) const {
    return home_.Write(".config/heteroflow/hfctl.json", content);
  }

  TempDir home_;
  TempDir files_;

 private:
  std::map<std::string, std::string> saved_;
};

// ---------------------------------------------------------------------------
// Settings

using SettingsTest = CliTest;

TEST_F(SettingsTest, DefaultsWhenNothingIsSet) {
  StatusOr<Settings> settings = ResolveSettings({});
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_EQ(settings->server.ToString(), "http://127.0.0.1:3333");
  EXPECT_EQ(settings->server_source, "default");
  EXPECT_EQ(settings->token, "");
  EXPECT_EQ(settings->token_source, "");
  EXPECT_EQ(settings->config_path, "");  // no default file: fine
}

TEST_F(SettingsTest, FlagsBeatEnvironmentBeatsConfigFile) {
  const std::string config = WriteDefaultConfig(
      R"({"server": "http://config:1", "token": "config-token"})");
  setenv("HF_SERVER", "http://env:2", 1);
  setenv("HF_TOKEN", "env-token", 1);
  ConnectionFlags flags;
  flags.server = "http://flag:3";
  flags.token = "flag-token";

  StatusOr<Settings> settings = ResolveSettings(flags);
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_EQ(settings->server.ToString(), "http://flag:3");
  EXPECT_EQ(settings->server_source, "--server");
  EXPECT_EQ(settings->token, "flag-token");
  EXPECT_EQ(settings->token_source, "--token");

  settings = ResolveSettings({});
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->server.ToString(), "http://env:2");
  EXPECT_EQ(settings->server_source, "HF_SERVER");
  EXPECT_EQ(settings->token, "env-token");
  EXPECT_EQ(settings->token_source, "HF_TOKEN");

  unsetenv("HF_SERVER");
  unsetenv("HF_TOKEN");
  settings = ResolveSettings({});
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->server.ToString(), "http://config:1");
  EXPECT_EQ(settings->server_source, "config file " + config);
  EXPECT_EQ(settings->token, "config-token");
  EXPECT_EQ(settings->config_path, config);
}

TEST_F(SettingsTest, ServerAndTokenResolveIndependently) {
  WriteDefaultConfig(R"({"token": "config-token"})");
  setenv("HF_SERVER", "http://env:2", 1);
  StatusOr<Settings> settings = ResolveSettings({});
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->server.ToString(), "http://env:2");
  EXPECT_EQ(settings->token, "config-token");
}

TEST_F(SettingsTest, EmptyEnvironmentVariablesCountAsUnset) {
  WriteDefaultConfig(R"({"server": "http://config:1", "token": "t"})");
  setenv("HF_SERVER", "", 1);
  setenv("HF_TOKEN", "", 1);
  StatusOr<Settings> settings = ResolveSettings({});
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->server.ToString(), "http://config:1");
  EXPECT_EQ(settings->token, "t");
}

TEST_F(SettingsTest, TokenFileIsReadAndTrimmedAndBeatsEnvironment) {
  setenv("HF_TOKEN", "env-token", 1);
  ConnectionFlags flags;
  flags.token_file = files_.Write("token", "  file-token\n");
  StatusOr<Settings> settings = ResolveSettings(flags);
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_EQ(settings->token, "file-token");
  EXPECT_EQ(settings->token_source, "--token-file " + flags.token_file);
}

TEST_F(SettingsTest, TokenFileMissingOrEmptyIsAnError) {
  ConnectionFlags flags;
  flags.token_file = (files_.path() / "absent").string();
  StatusOr<Settings> settings = ResolveSettings(flags);
  ASSERT_FALSE(settings.ok());
  EXPECT_NE(settings.status().message().find("absent: no such file"),
            std::string::npos);

  flags.token_file = files_.Write("empty", "\n");
  settings = ResolveSettings(flags);
  ASSERT_FALSE(settings.ok());
  EXPECT_NE(settings.status().message().find("is empty"), std::string::npos);
}

TEST_F(SettingsTest, ExplicitConfigFlagBeatsEnvironmentAndDefault) {
  WriteDefaultConfig(R"({"server": "http://default:1"})");
  const std::string from_env =
      files_.Write("env.json", R"({"server": "http://hfctl-config:2"})");
  const std::string from_flag =
      files_.Write("flag.json", R"({"server": "http://flag-config:3"})");
  setenv("HFCTL_CONFIG", from_env.c_str(), 1);

  StatusOr<Settings> settings = ResolveSettings({});
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->server.ToString(), "http://hfctl-config:2");

  ConnectionFlags flags;
  flags.config = from_flag;
  settings = ResolveSettings(flags);
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->server.ToString(), "http://flag-config:3");
  EXPECT_EQ(settings->config_path, from_flag);
}

TEST_F(SettingsTest, MissingExplicitConfigIsAnErrorMissingDefaultIsNot) {
  ASSERT_TRUE(ResolveSettings({}).ok());

  ConnectionFlags flags;
  flags.config = (files_.path() / "nope.json").string();
  StatusOr<Settings> settings = ResolveSettings(flags);
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.status().message(),
            "config file " + flags.config + ": no such file");

  setenv("HFCTL_CONFIG", flags.config.c_str(), 1);
  EXPECT_FALSE(ResolveSettings({}).ok());
}

TEST_F(SettingsTest, BadConfigFilesAreErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"[1]", "must be a JSON object"},
      {R"({"sever": "http://x"})", "unknown key \"sever\""},
      {R"({"token": 5})", "\"token\" must be a string"},
      {R"({"server": "ftp://x"})", "scheme must be http or https"},
  };
  for (const auto& [content, expected] : cases) {
    ConnectionFlags flags;
    flags.config = files_.Write("bad.json", content);
    StatusOr<Settings> settings = ResolveSettings(flags);
    ASSERT_FALSE(settings.ok()) << content;
    EXPECT_NE(settings.status().message().find(expected), std::string::npos)
        << settings.status().message();
  }
}

TEST(ServerUrlTest, ParsesAndNormalises) {
  struct Case {
    std::string input, scheme, authority, host, base_path;
  };
  const std::vector<Case> cases = {
      {"http://127.0.0.1:3333", "http", "127.0.0.1:3333", "127.0.0.1", ""},
      {"localhost:3333", "http", "localhost:3333", "localhost", ""},
      {"HTTPS://hf.example/", "https", "hf.example", "hf.example", ""},
      {"https://gw.example:8443/hf//", "https", "gw.example:8443", "gw.example",
       "/hf"},
      {"http://[::1]:3333", "http", "[::1]:3333", "::1", ""},
  };
  for (const Case& c : cases) {
    StatusOr<ServerUrl> url = ParseServerUrl(c.input);
    ASSERT_TRUE(url.ok()) << c.input << ": " << url.status().ToString();
    EXPECT_EQ(url->scheme, c.scheme) << c.input;
    EXPECT_EQ(url->authority, c.authority) << c.input;
    EXPECT_EQ(url->host, c.host) << c.input;
    EXPECT_EQ(url->base_path, c.base_path) << c.input;
  }
  for (const char* bad :
       {"ftp://x", "http://", "http://x:0", "http://x:65536", "http://x:ab",
        "http://x/?q=1", "http://user:pw@x", "http://[::1"}) {
    EXPECT_FALSE(ParseServerUrl(bad).ok()) << bad;
  }
}

// ---------------------------------------------------------------------------
// Requests: hfctl run against a fake transport that records what it is sent.

struct FakeServer {
  std::vector<Request> requests;
  std::deque<StatusOr<HttpResponse>> replies;  // default: 200 "{}"
  std::optional<Settings> settings;

  void Reply(int status, std::string body) {
    replies.emplace_back(HttpResponse{status, std::move(body)});
  }
};

class FakeTransport final : public Transport {
 public:
  explicit FakeTransport(FakeServer* server) : server_(server) {}
  StatusOr<HttpResponse> Send(const Request& request) override {
    server_->requests.push_back(request);
    if (server_->replies.empty()) return HttpResponse{200, "{}"};
    StatusOr<HttpResponse> reply = server_->replies.front();
    server_->replies.pop_front();
    return reply;
  }

 private:
  FakeServer* server_;
};

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

RunResult Hfctl(const std::vector<std::string>& args, FakeServer& server) {
  std::ostringstream out;
  std::ostringstream err;
  RunResult result;
  result.exit_code = Run(
      args,
      [&server](const Settings& settings) {
        server.settings = settings;
        return std::make_unique<FakeTransport>(&server);
      },
      out, err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

// The body of the only request sent, parsed.
nlohmann::json OnlyBody(const FakeServer& server) {
  EXPECT_EQ(server.requests.size(), 1u);
  if (server.requests.empty() || !server.requests[0].body) return {};
  return nlohmann::json::parse(*server.requests[0].body);
}

using RequestTest = CliTest;

TEST_F(RequestTest, TasksCreateSendsEveryFieldUnderItsApiName) {
  FakeServer server;
  RunResult run = Hfctl({"tasks",
                         "create",
                         "--name",
                         "train",
                         "--image",
                         "pytorch:2",
                         "--command",
                         "python serve.py",
                         "--gpu-type",
                         "nvidia",
                         "--memory",
                         "4096",
                         "--compute",
                         "0.5",
                         "--gpu-compute-mode",
                         "strict",
                         "--preemptible",
                         "--env",
                         "A=1",
                         "--env",
                         "URL=http://x/?a=b=c",
                         "--env",
                         "EMPTY=",
                         "--label",
                         "team=ml",
                         "--tenant",
                         "acme"},
                        server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(server.requests[0].method, "POST");
  EXPECT_EQ(server.requests[0].Target(), "/api/v1/tasks");
  const nlohmann::json body = OnlyBody(server);
  const nlohmann::json expected = {
      {"name", "train"},
      {"image", "pytorch:2"},
      {"command", "python serve.py"},
      {"gpu_type", "nvidia"},
      {"gpu_memory_mb", 4096},
      {"gpu_compute_ratio", 0.5},
      {"gpu_compute_mode", "strict"},
      {"preemptible", true},
      {"env", {{"A", "1"}, {"URL", "http://x/?a=b=c"}, {"EMPTY", ""}}},
      {"labels", {{"team", "ml"}}},
      {"tenant", "acme"},
  };
  EXPECT_EQ(body, expected) << body.dump();
  EXPECT_TRUE(body["gpu_compute_ratio"].is_number_float());
  EXPECT_TRUE(body["gpu_memory_mb"].is_number_integer());
  // The wire text itself says 0.5 (not 0.50000000000000001).
  EXPECT_NE(server.requests[0].body->find("\"gpu_compute_ratio\":0.5"),
            std::string::npos);
}

TEST_F(RequestTest, TasksCreateSendsOnlyTheFieldsGiven) {
  FakeServer server;
  RunResult run =
      Hfctl({"tasks", "create", "--name", "whole", "--gpus", "2"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(OnlyBody(server),
            (nlohmann::json{{"name", "whole"}, {"gpu_required", 2}}));
}

TEST_F(RequestTest, GpuComputeModeIsSentAsGivenAndTheServerJudgesIt) {
  FakeServer server;
  RunResult run = Hfctl({"tasks", "create", "--name", "wc", "--compute", "0.25",
                         "--gpu-compute-mode", "work-conserving"},
                        server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(OnlyBody(server),
            (nlohmann::json{{"name", "wc"},
                            {"gpu_compute_ratio", 0.25},
                            {"gpu_compute_mode", "work-conserving"}}));
  // The rules live on the server: a bad value goes there and its 400,
  // naming the field, is what the user sees.
  server.requests.clear();
  server.Reply(400, R"({"error": "invalid_argument",
    "message": "must be \"strict\" or \"work-conserving\", got \"fast\"",
    "field": "gpu_compute_mode"})");
  run = Hfctl({"tasks", "create", "--name", "x", "--gpu-compute-mode", "fast"},
              server);
  EXPECT_EQ(run.exit_code, kExitServerError);
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(OnlyBody(server)["gpu_compute_mode"], "fast");
  EXPECT_EQ(run.err,
            "hfctl: 400 invalid_argument: must be \"strict\" or "
            "\"work-conserving\", got \"fast\" (field: gpu_compute_mode)\n");
  // Not with -f: the file is the whole body.
  const std::string file = files_.Write("mode.json", R"({"name": "f"})");
  run = Hfctl({"tasks", "create", "-f", file, "--gpu-compute-mode", "strict"},
              server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_EQ(server.requests.size(), 1u);
}

// A mistyped or missing command is named, with the commands there are
// (CLI11 alone said "A subcommand is required" for "hfctl tsks list").
TEST_F(RequestTest, AnUnknownOrMissingCommandIsNamed) {
  FakeServer server;
  RunResult run = Hfctl({"tsks", "list"}, server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_NE(run.err.find("unknown command 'tsks' for 'hfctl'; one of: whoami, "
                         "tasks, slices"),
            std::string::npos)
      << run.err;
  run = Hfctl({"tasks", "lst"}, server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_NE(run.err.find("unknown command 'lst' for 'hfctl tasks'; one of: "
                         "create, list, get, logs, cancel"),
            std::string::npos)
      << run.err;
  run = Hfctl({"defrag"}, server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_NE(run.err.find("'hfctl defrag' needs a command, one of: "),
            std::string::npos)
      << run.err;
  // A missing option is still CLI11's own message.
  run = Hfctl({"tasks", "logs"}, server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_EQ(run.err.find("command"), std::string::npos) << run.err;
  EXPECT_TRUE(server.requests.empty());
}

TEST_F(RequestTest, EnvWithoutEqualsIsAClearUsageError) {
  FakeServer server;
  RunResult run =
      Hfctl({"tasks", "create", "--name", "x", "--env", "FOO"}, server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_EQ(run.err,
            "hfctl: --env \"FOO\": expected KEY=VALUE (use KEY= for an empty "
            "value)\n");
  EXPECT_TRUE(server.requests.empty());

  run = Hfctl({"tasks", "create", "--name", "x", "--label", "=v"}, server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_NE(run.err.find("--label \"=v\": empty KEY"), std::string::npos);

  run =
      Hfctl({"tasks", "create", "--name", "x", "--env", "A=1", "--env", "A=2"},
            server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_NE(run.err.find("given more than once"), std::string::npos);
  EXPECT_TRUE(server.requests.empty());
}

TEST(ParseKeyValuesTest, SplitsAtTheFirstEquals) {
  StatusOr<std::map<std::string, std::string>> parsed =
      ParseKeyValues("--env", {"A=b=c", "B=", "C==="});
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, (std::map<std::string, std::string>{
                         {"A", "b=c"}, {"B", ""}, {"C", "=="}}));
}

TEST_F(RequestTest, TasksCreateFromFileSendsTheFileAsIs) {
  FakeServer server;
  const std::string text = "{\"name\": \"f\", \"qos\": \"gold\"}\n";
  const std::string file = files_.Write("task.json", text);
  RunResult run = Hfctl({"tasks", "create", "-f", file}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(server.requests[0].body, text);

  run = Hfctl({"tasks", "create", "-f", file, "--name", "x"}, server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_NE(run.err.find("-f sends the file as the whole body"),
            std::string::npos);

  run = Hfctl({"tasks", "create", "-f", (files_.path() / "none").string()},
              server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_NE(run.err.find("cannot be read"), std::string::npos);
  EXPECT_EQ(server.requests.size(), 1u);
}

TEST_F(RequestTest, TasksCreateNeedsANameOrAFile) {
  FakeServer server;
  RunResult run = Hfctl({"tasks", "create", "--gpus", "1"}, server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_NE(run.err.find("--name is required"), std::string::npos);
}

TEST_F(RequestTest, MalformedCommandLinesAreUsageErrors) {
  FakeServer server;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"tasks", "create", "--name", "x", "--compute", "half"},
           {"tasks", "create", "--name", "x", "--memory", "4GB"},
           {"tasks", "get", "abc"},
           {"tasks", "get", "0"},
           {"tasks", "list", "--limit", "ten"},
           {"tasks", "create", "--name", "x", "--env", "A=1", "B=2"},
           {"tasks", "create", "--name", "x", "--command", "python", "a.py"},
           {"-o", "yaml", "whoami"},
           {"tasks"},
           {},
       }) {
    RunResult run = Hfctl(args, server);
    EXPECT_EQ(run.exit_code, kExitLocalError) << ::testing::PrintToString(args);
    EXPECT_FALSE(run.err.empty());
  }
  EXPECT_TRUE(server.requests.empty());
}

TEST_F(RequestTest, OtherCreateCommandsSendTheirBodies) {
  struct Case {
    std::vector<std::string> args;
    std::string method, target;
    nlohmann::json body;
  };
  const std::vector<Case> cases = {
      {{"tenants", "create", "acme", "--group", "labs"},
       "POST",
       "/api/v1/tenants",
       {{"name", "acme"}, {"shared_group", "labs"}}},
      {{"tenants", "create", "solo"},
       "POST",
       "/api/v1/tenants",
       {{"name", "solo"}}},
      {{"tenants", "set-group", "acme", "labs"},
       "PATCH",
       "/api/v1/tenants/acme",
       {{"shared_group", "labs"}}},
      {{"tenants", "set-group", "acme", "--none"},
       "PATCH",
       "/api/v1/tenants/acme",
       {{"shared_group", nullptr}}},
      {{"groups", "create", "labs"},
       "POST",
       "/api/v1/groups",
       {{"name", "labs"}}},
      {{"tokens", "create", "--role", "user", "--tenant", "acme",
        "--description", "ci bot"},
       "POST",
       "/api/v1/tokens",
       {{"role", "user"}, {"tenant", "acme"}, {"description", "ci bot"}}},
      {{"tokens", "create", "--role", "admin"},
       "POST",
       "/api/v1/tokens",
       {{"role", "admin"}}},
      {{"slices", "create", "--tenant", "acme", "--node", "n1", "--gpu-index",
        "0", "--memory", "2048", "--compute", "0.25", "--reason", "debug"},
       "POST",
       "/api/v1/slices",
       {{"tenant", "acme"},
        {"node_id", "n1"},
        {"gpu_index", 0},
        {"gpu_memory_mb", 2048},
        {"gpu_compute_ratio", 0.25},
        {"reason", "debug"}}},
      {{"tasks", "cancel", "7"},
       "POST",
       "/api/v1/tasks/7/cancel",
       nlohmann::json::object()},
      {{"slices", "resize", "4", "--memory-mb", "8192"},
       "PATCH",
       "/api/v1/slices/4",
       {{"memory_mb", 8192}}},
      {{"slices", "resize", "4", "--memory-mb", "1024", "--reason", "shrink"},
       "PATCH",
       "/api/v1/slices/4",
       {{"memory_mb", 1024}, {"reason", "shrink"}}},
  };
  for (const Case& c : cases) {
    FakeServer server;
    RunResult run = Hfctl(c.args, server);
    const std::string label = ::testing::PrintToString(c.args);
    ASSERT_EQ(run.exit_code, 0) << label << ": " << run.err;
    ASSERT_EQ(server.requests.size(), 1u) << label;
    EXPECT_EQ(server.requests[0].method, c.method) << label;
    EXPECT_EQ(server.requests[0].Target(), c.target) << label;
    EXPECT_EQ(OnlyBody(server), c.body) << label;
  }
}

TEST_F(RequestTest, SetGroupNeedsExactlyOneOfGroupOrNone) {
  FakeServer server;
  EXPECT_EQ(Hfctl({"tenants", "set-group", "acme"}, server).exit_code,
            kExitLocalError);
  EXPECT_EQ(Hfctl({"tenants", "set-group", "acme", "labs", "--none"}, server)
                .exit_code,
            kExitLocalError);
  EXPECT_TRUE(server.requests.empty());
}

TEST_F(RequestTest, EveryCommandUsesItsMethodAndPath) {
  struct Case {
    std::vector<std::string> args;
    std::string method, target;
  };
  const std::vector<Case> cases = {
      {{"whoami"}, "GET", "/api/v1/whoami"},
      {{"tasks", "list"}, "GET", "/api/v1/tasks"},
      {{"tasks", "get", "12"}, "GET", "/api/v1/tasks/12"},
      {{"slices", "list"}, "GET", "/api/v1/slices"},
      {{"slices", "list", "--node", "n1", "--gpu-index", "3", "--state", "all",
        "--limit", "10"},
       "GET",
       "/api/v1/slices?node_id=n1&gpu_index=3&state=all&limit=10"},
      {{"slices", "get", "4"}, "GET", "/api/v1/slices/4"},
      {{"slices", "stats"}, "GET", "/api/v1/slices/stats"},
      {{"slices", "history", "--limit", "5", "--cursor", "c9", "--slice", "4",
        "--task", "12"},
       "GET",
       "/api/v1/slices/history?limit=5&cursor=c9&slice_id=4&task_id=12"},
      {{"slices", "delete", "4"}, "DELETE", "/api/v1/slices/4"},
      {{"nodes", "list"}, "GET", "/api/v1/nodes"},
      {{"nodes", "get", "gpu-node-1"}, "GET", "/api/v1/nodes/gpu-node-1"},
      {{"tenants", "list"}, "GET", "/api/v1/tenants"},
      {{"tenants", "get", "acme"}, "GET", "/api/v1/tenants/acme"},
      {{"groups", "list"}, "GET", "/api/v1/groups"},
      {{"groups", "delete", "labs"}, "DELETE", "/api/v1/groups/labs"},
      {{"tokens", "list"}, "GET", "/api/v1/tokens"},
      {{"tokens", "revoke", "3"}, "DELETE", "/api/v1/tokens/3"},
      {{"slice-requests", "list", "--node", "n1", "--state", "stuck"},
       "GET",
       "/api/v1/slice-requests?node_id=n1&state=stuck"},
  };
  for (const Case& c : cases) {
    FakeServer server;
    RunResult run = Hfctl(c.args, server);
    const std::string label = ::testing::PrintToString(c.args);
    ASSERT_EQ(run.exit_code, 0) << label << ": " << run.err;
    ASSERT_EQ(server.requests.size(), 1u) << label;
    EXPECT_EQ(server.requests[0].method, c.method) << label;
    EXPECT_EQ(server.requests[0].Target(), c.target) << label;
    EXPECT_FALSE(server.requests[0].body.has_value()) << label;
  }
}

TEST_F(RequestTest, QueryValuesAndPathNamesArePercentEncoded) {
  FakeServer server;
  ASSERT_EQ(Hfctl({"tasks", "list", "--status", "pending", "--tenant",
                   "a b&c=d", "--limit", "5", "--cursor", "x/y+z=="},
                  server)
                .exit_code,
            0);
  EXPECT_EQ(server.requests.back().Target(),
            "/api/v1/tasks?status=pending&tenant=a%20b%26c%3Dd&limit=5&"
            "cursor=x%2Fy%2Bz%3D%3D");

  ASSERT_EQ(
      Hfctl({"slices", "delete", "5", "--reason", "disk full: 100%"}, server)
          .exit_code,
      0);
  EXPECT_EQ(server.requests.back().Target(),
            "/api/v1/slices/5?reason=disk%20full%3A%20100%25");

  // A name cannot add path segments or a query.
  ASSERT_EQ(Hfctl({"tenants", "get", "../tokens?x"}, server).exit_code, 0);
  EXPECT_EQ(server.requests.back().Target(), "/api/v1/tenants/..%2Ftokens%3Fx");

  EXPECT_EQ(UrlEncode("AZaz09-._~ /?é"), "AZaz09-._~%20%2F%3F%C3%A9");
}

TEST_F(RequestTest, TheResolvedSettingsReachTheTransport) {
  FakeServer server;
  setenv("HF_TOKEN", "env-token", 1);
  ASSERT_EQ(Hfctl({"--server", "http://hf:9", "whoami"}, server).exit_code, 0);
  ASSERT_TRUE(server.settings.has_value());
  EXPECT_EQ(server.settings->server.ToString(), "http://hf:9");
  EXPECT_EQ(server.settings->token, "env-token");

  // Global options also work after the subcommand.
  ASSERT_EQ(Hfctl({"whoami", "--token", "flag-token"}, server).exit_code, 0);
  EXPECT_EQ(server.settings->token, "flag-token");

  // --token and --token-file together are a usage error.
  EXPECT_EQ(
      Hfctl({"--token", "a", "--token-file", "b", "whoami"}, server).exit_code,
      kExitLocalError);
}

TEST_F(RequestTest, BadSettingsStopBeforeAnyRequest) {
  FakeServer server;
  RunResult run =
      Hfctl({"--config", (files_.path() / "missing.json").string(), "whoami"},
            server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_NE(run.err.find("missing.json: no such file"), std::string::npos);
  EXPECT_FALSE(server.settings.has_value());
}

// ---------------------------------------------------------------------------
// Output

using OutputTest = CliTest;

TEST_F(OutputTest, JsonOutputIsTheServersJsonPrettyFromAnyPosition) {
  const std::string reply = R"({"id":12,"name":"t","env":{"B":"2","A":"1"}})";
  const std::string pretty =
      "{\n  \"id\": 12,\n  \"name\": \"t\",\n  \"env\": {\n    \"B\": "
      "\"2\",\n    \"A\": \"1\"\n  }\n}\n";
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"-o", "json", "tasks", "get", "12"},
           {"tasks", "-o", "json", "get", "12"},
           {"tasks", "get", "12", "-o", "json"},
           {"tasks", "get", "--output", "json", "12"},
       }) {
    FakeServer server;
    server.Reply(200, reply);
    RunResult run = Hfctl(args, server);
    ASSERT_EQ(run.exit_code, 0) << ::testing::PrintToString(args) << run.err;
    EXPECT_EQ(run.out, pretty) << ::testing::PrintToString(args);
  }
}

TEST_F(OutputTest, TaskTableShowsTheColumnsAndDashesForMissingFields) {
  const Json items = Json::parse(R"([
    {"id": 1, "name": "infer", "tenant": "acme", "status": "running",
     "gpu_required": 0, "gpu_memory_mb": 4096, "gpu_compute_ratio": 0.5,
     "gpu_compute_percent": 50, "qos_level": "silver", "node_id": "n1",
     "gpu_indices": [0], "pending_reason": null},
    {"id": 2, "name": "train", "tenant": "acme", "status": "pending",
     "gpu_required": 2, "gpu_memory_mb": null, "gpu_compute_percent": null,
     "qos_level": null, "node_id": null, "gpu_indices": [],
     "pending_reason": "insufficient GPU memory: 0 of 12 GPUs fit"},
    {"id": 3}
  ])");
  std::ostringstream out;
  RenderTable(Resource::kTask, items, out);
  EXPECT_EQ(out.str(),
            "ID  NAME   TENANT  STATUS   GPU(S)  MEMORY  COMPUTE  QOS     "
            "NODE  PENDING_REASON\n"
            "1   infer  acme    running  -       4096MB  50%      silver  "
            "n1:0  -\n"
            "2   train  acme    pending  2       -       -        -       "
            "-     insufficient GPU memory: 0 of 12 GPUs fit\n"
            "3   -      -       -        -       -       -        -       "
            "-     -\n");
}

TEST_F(OutputTest, EveryResourceTableHasItsColumns) {
  const std::vector<std::pair<Resource, std::string>> headers = {
      {Resource::kSlice,
       "ID  TASK  TENANT  NODE  GPU  KIND  MEMORY  COMPUTE  QOS  ENFORCEMENT  "
       "STATE  ORIGIN  CREATED"},
      {Resource::kHistoryEntry,
       "ID  AT  OP  SLICE  TASK  TENANT  NODE  GPU  MEMORY  COMPUTE  ACTOR  "
       "REASON"},
      {Resource::kNode,
       "NODE  CONTAINERIZED  GPUS  LAST_HEARTBEAT  AGE  RUNTIME"},
      {Resource::kTenant, "NAME  SHARED_GROUP  CREATED"},
      {Resource::kGroup, "NAME  TENANTS"},
      {Resource::kToken,
       "ID  ROLE  TENANT  NODE  DESCRIPTION  CREATED  REVOKED"},
      {Resource::kApproval,
       "ID  TENANT_A  TENANT_B  ACTIVE  EXPIRES  REVOKED  BY  REASON"},
      {Resource::kSliceRequest,
       "ID  NODE  ACTION  GPU  PROFILE  STATE  SLICE  TASK  DEVICE  CREATED  "
       "ERROR"},
  };
  for (const auto& [resource, header] : headers) {
    std::ostringstream out;
    RenderTable(resource, Json::array(), out);
    EXPECT_EQ(out.str(), header + "\n");
  }
}

TEST_F(OutputTest, SliceNodeAndRequestCellsAreDerived) {
  std::ostringstream slices;
  RenderTable(Resource::kSlice, Json::parse(R"([
    {"id": 4, "task_id": null, "tenant": "acme", "node_id": "n1",
     "gpu_index": 1, "gpu_indices": [], "memory_mb": 2048,
     "compute_percent": 25, "kind": "slice", "qos_level": "silver",
     "enforcement": "mps", "state": "allocated", "origin": "admin",
     "created_at": "2026-11-29T12:00:00.000Z"}])"),
              slices);
  EXPECT_NE(slices.str().find("4   -     acme    n1    1    slice  2048MB  "
                              "25%      silver  mps          allocated  admin"),
            std::string::npos)
      << slices.str();
  // Whole GPUs are exclusive and need no enforcement; an unenforced slice
  // shows "-".
  std::ostringstream whole;
  RenderTable(Resource::kSlice, Json::parse(R"([
    {"id": 5, "task_id": 9, "tenant": "acme", "node_id": "n1",
     "gpu_index": 0, "gpu_indices": [0, 1], "memory_mb": 163840,
     "compute_percent": 100, "kind": "whole", "qos_level": "exclusive",
     "enforcement": [], "state": "allocated", "origin": "scheduler",
     "created_at": "2026-11-29T12:00:00.000Z"},
    {"id": 6, "task_id": 10, "tenant": "acme", "node_id": "n1",
     "gpu_index": 2, "gpu_indices": [2], "memory_mb": 1024,
     "compute_percent": 50, "kind": "slice", "qos_level": "bronze",
     "enforcement": [], "state": "allocated", "origin": "scheduler",
     "created_at": "2026-11-29T12:00:00.000Z"}])"),
              whole);
  EXPECT_NE(whole.str().find("exclusive  none-needed"), std::string::npos)
      << whole.str();
  EXPECT_NE(whole.str().find("bronze     -  "), std::string::npos)
      << whole.str();

  std::ostringstream nodes;
  RenderTable(Resource::kNode, Json::parse(R"([
    {"node_id": "n1", "containerized": true, "runtime": "docker",
     "last_heartbeat_at": "2026-11-29T12:00:00.000Z", "heartbeat_age_s": 4.6,
     "gpus": [{"index": 0, "health": "ok"}, {"index": 1, "health": "lost"}]},
    {"node_id": "n2", "containerized": false, "runtime": null,
     "last_heartbeat_at": "2026-11-29T12:00:00.000Z", "heartbeat_age_s": 1,
     "gpus": []}
  ])"),
              nodes);
  EXPECT_NE(nodes.str().find("n1    yes            2 (1 lost)  "
                             "2026-11-29T12:00:00.000Z  5s   docker"),
            std::string::npos)
      << nodes.str();
  EXPECT_NE(nodes.str().find("1s   -\n"), std::string::npos) << nodes.str();

  std::ostringstream requests;
  RenderTable(Resource::kSliceRequest,
              Json::parse(R"([{"id": 1, "state": "stuck"}])"), requests);
  EXPECT_NE(requests.str().find("stuck (HARDWARE STATE UNKNOWN)"),
            std::string::npos);

  std::ostringstream groups;
  RenderTable(Resource::kGroup,
              Json::parse(R"([{"name": "labs", "tenants": ["a", "b"]}])"),
              groups);
  EXPECT_EQ(groups.str(), "NAME  TENANTS\nlabs  a,b\n");
}

TEST(CellTextTest, ShowsMissingNullAndEmptyAsDash) {
  const Json object = Json::parse(R"({"s": "x", "empty": "", "null": null,
    "none": [], "list": [1, "b"], "yes": true, "no": false, "n": 2.5,
    "obj": {"k": 1}, "ctl": "a\nb\u001b[31m"})");
  EXPECT_EQ(CellText(object, "s"), "x");
  EXPECT_EQ(CellText(object, "missing"), "-");
  EXPECT_EQ(CellText(object, "empty"), "-");
  EXPECT_EQ(CellText(object, "null"), "-");
  EXPECT_EQ(CellText(object, "none"), "-");
  EXPECT_EQ(CellText(object, "list"), "1,b");
  EXPECT_EQ(CellText(object, "yes"), "yes");
  EXPECT_EQ(CellText(object, "no"), "no");
  EXPECT_EQ(CellText(object, "n"), "2.5");
  EXPECT_EQ(CellText(object, "obj"), R"({"k":1})");
  EXPECT_EQ(CellText(object, "ctl"), "a b [31m");
  EXPECT_EQ(CellText(Json(nullptr), "s"), "-");
}

TEST_F(OutputTest, DetailViewShowsEveryFieldNestedIndented) {
  std::ostringstream out;
  RenderDetail(Json::parse(R"({"node_id": "n1", "containerized": false,
    "env": {"A": "1"}, "labels": {},
    "gpus": [{"index": 0, "model": "A100"}, {"index": 1, "health": "lost"}]})"),
               out);
  EXPECT_EQ(out.str(),
            "node_id:       n1\n"
            "containerized: no\n"
            "env:\n"
            "  A: 1\n"
            "labels:        -\n"
            "gpus:\n"
            "  INDEX  MODEL  HEALTH\n"
            "  0      A100   -\n"
            "  1      -      lost\n");
}

TEST_F(OutputTest, ListsShowTablesEmptyNoticesAndTheNextPageHint) {
  FakeServer server;
  server.Reply(200, R"({"items": [{"name": "acme", "shared_group": null,
    "created_at": "2026-11-29T12:00:00.000Z"}], "next_cursor": "abc"})");
  RunResult run = Hfctl({"tenants", "list"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out,
            "NAME  SHARED_GROUP  CREATED\n"
            "acme  -             2026-11-29T12:00:00.000Z\n");
  EXPECT_EQ(run.err,
            "hfctl: more tenants follow; add --cursor abc for the next page, "
            "or --all for every page\n");

  server.Reply(200, R"({"items": [], "next_cursor": null})");
  run = Hfctl({"tasks", "list"}, server);
  ASSERT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "No tasks found.\n");
}

TEST_F(OutputTest, AllFollowsNextCursorAndMergesThePages) {
  FakeServer server;
  server.Reply(200,
               R"({"items": [{"id": 1}, {"id": 2}], "next_cursor": "c1"})");
  server.Reply(200, R"({"items": [{"id": 3}], "next_cursor": null})");
  RunResult run = Hfctl({"tasks", "list", "--status", "running", "--limit", "2",
                         "--all", "-o", "json"},
                        server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(server.requests.size(), 2u);
  EXPECT_EQ(server.requests[0].Target(),
            "/api/v1/tasks?status=running&limit=2");
  EXPECT_EQ(server.requests[1].Target(),
            "/api/v1/tasks?status=running&limit=2&cursor=c1");
  const nlohmann::json merged = nlohmann::json::parse(run.out);
  EXPECT_EQ(merged["items"].size(), 3u);
  EXPECT_EQ(merged["items"][2]["id"], 3);
  EXPECT_TRUE(merged["next_cursor"].is_null());
  EXPECT_EQ(run.err, "");
}

TEST_F(OutputTest, AllStopsOnARepeatedCursorAndOnAnErrorPage) {
  FakeServer server;
  server.Reply(200, R"({"items": [{"id": 1}], "next_cursor": "same"})");
  server.Reply(200, R"({"items": [{"id": 2}], "next_cursor": "same"})");
  RunResult run = Hfctl({"slices", "history", "--all"}, server);
  EXPECT_EQ(run.exit_code, kExitServerError);
  EXPECT_NE(run.err.find("cursor \"same\" twice"), std::string::npos);

  FakeServer failing;
  failing.Reply(200, R"({"items": [{"id": 1}], "next_cursor": "c"})");
  failing.Reply(400, R"({"error": "invalid_argument", "message": "bad cursor",
    "field": "cursor"})");
  run = Hfctl({"slices", "history", "--all"}, failing);
  EXPECT_EQ(run.exit_code, kExitServerError);
  EXPECT_EQ(run.err,
            "hfctl: 400 invalid_argument: bad cursor (field: cursor)\n");
  EXPECT_EQ(run.out, "");
}

// --follow shows every page, then asks for what came after the last entry
// shown (resume_cursor), whether or not a poll found anything, until a
// request fails.
TEST_F(OutputTest, HistoryFollowResumesAfterTheLastEntryShown) {
  FakeServer server;
  server.Reply(200, R"({"items": [{"id": 1, "op": "allocate"}],
    "next_cursor": "1", "resume_cursor": "1"})");
  server.Reply(200, R"({"items": [{"id": 2, "op": "release"}],
    "next_cursor": null, "resume_cursor": "2"})");
  server.Reply(200, R"({"items": [], "next_cursor": null,
    "resume_cursor": "2"})");
  server.Reply(200, R"({"items": [{"id": 3, "op": "allocate"}],
    "next_cursor": null, "resume_cursor": "3"})");
  server.replies.emplace_back(Status::Unavailable("connection refused"));
  RunResult run = Hfctl({"slices", "history", "--follow", "--interval", "0",
                         "--task", "9", "-o", "json"},
                        server);
  EXPECT_EQ(run.exit_code, kExitLocalError) << run.err;
  ASSERT_EQ(server.requests.size(), 5u);
  EXPECT_EQ(server.requests[0].Target(), "/api/v1/slices/history?task_id=9");
  EXPECT_EQ(server.requests[1].Target(),
            "/api/v1/slices/history?task_id=9&cursor=1");
  EXPECT_EQ(server.requests[2].Target(),
            "/api/v1/slices/history?task_id=9&cursor=2");
  EXPECT_EQ(server.requests[3].Target(),
            "/api/v1/slices/history?task_id=9&cursor=2");
  EXPECT_EQ(server.requests[4].Target(),
            "/api/v1/slices/history?task_id=9&cursor=3");
  EXPECT_EQ(run.out,
            "{\"id\":1,\"op\":\"allocate\"}\n{\"id\":2,\"op\":\"release\"}\n"
            "{\"id\":3,\"op\":\"allocate\"}\n");

  // A server without resume_cursor cannot be followed.
  FakeServer old;
  old.Reply(200, R"({"items": [], "next_cursor": null})");
  run = Hfctl({"slices", "history", "-f", "--interval", "0"}, old);
  EXPECT_EQ(run.exit_code, kExitServerError);
  EXPECT_NE(run.err.find("resume_cursor"), std::string::npos) << run.err;
  EXPECT_EQ(old.requests.size(), 1u);
}

// ------------------------------------------------------ Idempotency-Key

std::string KeyOf(const Request& request) {
  for (const auto& [name, value] : request.headers) {
    if (name == "Idempotency-Key") return value;
  }
  return "";
}

TEST_F(RequestTest, EveryPostCarriesItsOwnIdempotencyKey) {
  FakeServer server;
  ASSERT_EQ(Hfctl({"tenants", "create", "a"}, server).exit_code, 0);
  ASSERT_EQ(Hfctl({"tenants", "create", "b"}, server).exit_code, 0);
  ASSERT_EQ(Hfctl({"tenants", "list"}, server).exit_code, 0);
  ASSERT_EQ(server.requests.size(), 3u);
  const std::string a = KeyOf(server.requests[0]);
  EXPECT_TRUE(a.starts_with("hfctl-")) << a;
  EXPECT_EQ(a.size(), 6u + 32u) << a;
  EXPECT_NE(KeyOf(server.requests[1]), a) << "a new key per invocation";
  EXPECT_EQ(KeyOf(server.requests[2]), "") << "GETs need none";
}

// A POST whose reply was lost, or that a follower or proxy could not pass
// on (502/503/504), is sent again with the same key.
TEST_F(RequestTest, APostWithoutAnAnswerIsSentAgainWithTheSameKey) {
  FakeServer server;
  server.replies.emplace_back(
      Status::Unavailable("the connection closed before a full reply arrived"));
  server.Reply(503, R"({"error": "unavailable", "message": "no leader"})");
  server.Reply(201, R"({"id": 5, "name": "t", "status": "pending"})");
  RunResult run = Hfctl(
      {"tasks", "create", "--name", "t", "--memory", "1024", "-o", "json"},
      server);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(server.requests.size(), 3u);
  const std::string key = KeyOf(server.requests[0]);
  EXPECT_FALSE(key.empty());
  EXPECT_EQ(KeyOf(server.requests[1]), key);
  EXPECT_EQ(KeyOf(server.requests[2]), key);
  EXPECT_EQ(server.requests[2].body, server.requests[0].body);
  EXPECT_NE(run.err.find("same Idempotency-Key"), std::string::npos) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["id"], 5);
}

TEST_F(RequestTest, PostRetriesAreBoundedAndSkipWhatNeverReachedTheServer) {
  FakeServer busy;
  for (int i = 0; i < 5; ++i) {
    busy.Reply(503, R"({"error": "unavailable", "message": "no leader"})");
  }
  RunResult run = Hfctl({"tenants", "create", "a"}, busy);
  EXPECT_EQ(run.exit_code, kExitServerError);
  EXPECT_EQ(busy.requests.size(), 3u);

  FakeServer refused;
  refused.replies.emplace_back(Status::Unavailable("connection refused"));
  run = Hfctl({"tenants", "create", "a"}, refused);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_EQ(refused.requests.size(), 1u);

  // A 4xx is an answer: never sent again.
  FakeServer conflict;
  conflict.Reply(409, R"({"error": "conflict", "message": "exists"})");
  run = Hfctl({"tenants", "create", "a"}, conflict);
  EXPECT_EQ(run.exit_code, kExitServerError);
  EXPECT_EQ(conflict.requests.size(), 1u);

  // GETs are not retried.
  FakeServer get;
  get.Reply(503, R"({"error": "unavailable", "message": "no leader"})");
  run = Hfctl({"tenants", "list"}, get);
  EXPECT_EQ(get.requests.size(), 1u);
}

TEST_F(OutputTest, TokenCreatePrintsTheSecretOnceAndClearly) {
  FakeServer server;
  server.Reply(201, R"({"id": 7, "role": "user", "tenant": "acme",
    "description": null, "created_at": "2026-11-29T12:00:00.000Z",
    "token": "hf_s3cret"})");
  RunResult run = Hfctl({"tokens", "create", "--role", "user"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out,
            "Created token 7 (role user, tenant acme).\n"
            "Its secret is shown only this once; store it now (for example "
            "in a file for --token-file):\n\n"
            "    hf_s3cret\n\n");
}

TEST_F(OutputTest, ResizeShowsTheSliceAndEveryWarning) {
  FakeServer server;
  server.Reply(200, R"({"id": 4, "task_id": 7, "tenant": "acme",
    "node_id": "n1", "gpu_index": 0, "gpu_indices": [0], "kind": "slice",
    "memory_mb": 1024, "compute_percent": 50, "qos_level": "bronze",
    "enforcement": ["hook"], "state": "allocated", "origin": "scheduler",
    "created_at": "2026-11-29T12:00:00.000Z",
    "warnings": ["the task may hit OOM"]})");
  RunResult run =
      Hfctl({"slices", "resize", "4", "--memory-mb", "1024"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("1024MB"), std::string::npos) << run.out;
  // Warnings are notes: on stderr, the row alone on stdout.
  EXPECT_EQ(run.out.find("warning"), std::string::npos) << run.out;
  EXPECT_EQ(run.err, "warning: the task may hit OOM\n");
  // --memory-mb is required.
  EXPECT_EQ(Hfctl({"slices", "resize", "4"}, server).exit_code,
            kExitLocalError);
  EXPECT_EQ(server.requests.size(), 1u);
}

TEST_F(OutputTest, TaskDetailsShowTheComputeMode) {
  FakeServer server;
  server.Reply(200, R"({"id": 12, "name": "x", "gpu_compute_percent": 25,
    "gpu_compute_mode": "strict", "status": "running"})");
  RunResult run = Hfctl({"tasks", "get", "12"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("gpu_compute_mode:    strict\n"), std::string::npos)
      << run.out;
}

// The agent's note that a process of the task uses the GPU without the hook.
constexpr const char* kNote =
    "process 4242 runs without the hook: libhfhook.so is not loaded in it "
    "(glibc too old, a static binary, or LD_PRELOAD cleared?)";

TEST_F(OutputTest, SliceTableMarksAndListsSlicesTheHookDoesNotEnforce) {
  Json items = Json::parse(R"([
    {"id": 4, "task_id": 7, "tenant": "acme", "node_id": "n1",
     "gpu_index": 0, "gpu_indices": [0], "memory_mb": 1024,
     "compute_percent": 50, "kind": "slice", "qos_level": "bronze",
     "enforcement": [], "state": "allocated", "origin": "scheduler",
     "created_at": "2026-11-29T12:00:00.000Z"},
    {"id": 5, "task_id": 8, "tenant": "acme", "node_id": "n1",
     "gpu_index": 0, "gpu_indices": [0], "memory_mb": 1024,
     "compute_percent": 50, "kind": "slice", "qos_level": "bronze",
     "enforcement": ["hook"], "state": "allocated", "origin": "scheduler",
     "created_at": "2026-11-29T12:00:00.000Z", "enforcement_note": null}])");
  items[0]["enforcement_note"] = kNote;
  std::ostringstream out;
  RenderTable(Resource::kSlice, items, out);
  EXPECT_NE(out.str().find("bronze  - (HOOK BYPASSED)  allocated"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("bronze  hook               allocated"),
            std::string::npos)
      << out.str();
  EXPECT_EQ(EnforcementWarnings(Resource::kSlice, items),
            std::string("warning: slice 4 (task 7) is not enforced by the "
                        "hook: ") +
                kNote + "\n");

  // Through hfctl: the table on stdout, the note on stderr.
  FakeServer server;
  server.Reply(200, Json{{"items", items}, {"next_cursor", nullptr}}.dump());
  RunResult run = Hfctl({"slices", "list"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("HOOK BYPASSED"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find(kNote), std::string::npos) << run.out;
  EXPECT_EQ(run.err, EnforcementWarnings(Resource::kSlice, items));
  // -o json is the server's reply, with no note added on stderr.
  server.Reply(200, Json{{"items", items}, {"next_cursor", nullptr}}.dump());
  run = Hfctl({"slices", "list", "-o", "json"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
}

TEST_F(OutputTest, TaskViewsShowTheEnforcementNote) {
  Json task = Json::parse(R"({"id": 7, "name": "infer", "tenant": "acme",
    "status": "running", "gpu_memory_mb": 1024, "gpu_compute_percent": 50,
    "qos_level": "bronze", "slice_id": 4, "node_id": "n1",
    "gpu_indices": [0], "cancel_requested": false})");
  task["enforcement_note"] = kNote;

  std::ostringstream table;
  RenderTable(Resource::kTask, Json::array({task}), table);
  EXPECT_NE(table.str().find("running (HOOK BYPASSED)"), std::string::npos)
      << table.str();

  FakeServer server;
  server.Reply(200, task.dump());
  RunResult run = Hfctl({"tasks", "get", "7"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find(std::string("enforcement_note:    ") + kNote),
            std::string::npos)
      << run.out;
  EXPECT_EQ(run.err,
            std::string("warning: task 7 (slice 4) is not enforced by the "
                        "hook: ") +
                kNote + "\n");

  // No note (null, or a task the hook enforces): no warning, no marker.
  task["enforcement_note"] = nullptr;
  server.Reply(200, task.dump());
  run = Hfctl({"tasks", "get", "7"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  std::ostringstream plain;
  RenderTable(Resource::kTask, Json::array({task}), plain);
  EXPECT_EQ(plain.str().find("HOOK BYPASSED"), std::string::npos);
  // Other resources never carry the warning.
  task["enforcement_note"] = kNote;
  EXPECT_EQ(EnforcementWarnings(Resource::kNode, Json::array({task})), "");
}

TEST_F(OutputTest, SliceGetWarnsAndControlCharactersInTheNoteAreBlanked) {
  FakeServer server;
  server.Reply(200, R"({"id": 4, "task_id": 7, "kind": "slice",
    "enforcement": [], "state": "allocated",
    "enforcement_note": "process 9 runs without the hook\u001b[2J"})");
  RunResult run = Hfctl({"slices", "get", "4"}, server);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err,
            "warning: slice 4 (task 7) is not enforced by the hook: process "
            "9 runs without the hook [2J\n");
}

TEST_F(OutputTest, CreateShowsARowAndGetShowsDetails) {
  FakeServer server;
  server.Reply(201, R"({"id": 9, "name": "x", "tenant": "default",
    "status": "pending"})");
  RunResult run = Hfctl({"tasks", "create", "--name", "x"}, server);
  ASSERT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out.substr(0, run.out.find('\n')),
            "ID  NAME  TENANT   STATUS   GPU(S)  MEMORY  COMPUTE  QOS  NODE  "
            "PENDING_REASON");
  EXPECT_NE(run.out.find("9   x     default  pending"), std::string::npos);

  server.Reply(200, R"({"role": "admin", "tenant": null, "token_id": 1})");
  run = Hfctl({"whoami"}, server);
  ASSERT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "role:     admin\ntenant:   -\ntoken_id: 1\n");

  server.Reply(200, "");
  run = Hfctl({"groups", "delete", "labs"}, server);
  ASSERT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "Deleted group labs.\n");
}

// ---------------------------------------------------------------------------
// Errors

Settings SettingsWithToken(std::string token, std::string source) {
  Settings settings;
  settings.server = *ParseServerUrl("http://127.0.0.1:3333");
  settings.server_source = "default";
  settings.token = std::move(token);
  settings.token_source = std::move(source);
  return settings;
}

TEST(ErrorFormatTest, BadRequestNamesTheField) {
  EXPECT_EQ(FormatHttpError(400,
                            R"({"error": "invalid_argument", "message":
      "gpu_compute_ratio must be in (0, 1]", "field": "gpu_compute_ratio"})",
                            SettingsWithToken("t", "HF_TOKEN")),
            "hfctl: 400 invalid_argument: gpu_compute_ratio must be in (0, 1] "
            "(field: gpu_compute_ratio)\n");
}

TEST(ErrorFormatTest, NotFoundHasNoFieldAndNoHint) {
  EXPECT_EQ(FormatHttpError(
                404, R"({"error": "not_found", "message": "task 9 not found"})",
                SettingsWithToken("t", "HF_TOKEN")),
            "hfctl: 404 not_found: task 9 not found\n");
}

TEST(ErrorFormatTest, UnauthenticatedHintsAtTheToken) {
  const std::string body =
      R"({"error": "unauthenticated", "message": "unknown token"})";
  const std::string with_token =
      FormatHttpError(401, body, SettingsWithToken("t", "HF_TOKEN"));
  EXPECT_EQ(with_token,
            "hfctl: 401 unauthenticated: unknown token\n"
            "hfctl: hint: the server did not accept the token from HF_TOKEN; "
            "it may be mistyped, revoked, or meant for another server\n");

  Settings no_token = SettingsWithToken("", "");
  no_token.config_path = "/cfg/hfctl.json";
  EXPECT_EQ(FormatHttpError(401, body, no_token),
            "hfctl: 401 unauthenticated: unknown token\n"
            "hfctl: hint: no token is set; pass --token or --token-file, set "
            "HF_TOKEN, or put \"token\" in the config file "
            "(/cfg/hfctl.json)\n");
}

TEST(ErrorFormatTest, ForbiddenPointsAtWhoami) {
  EXPECT_NE(
      FormatHttpError(403, R"({"error": "permission_denied", "message": "no"})",
                      SettingsWithToken("t", "--token"))
          .find("hfctl whoami"),
      std::string::npos);
}

TEST(ErrorFormatTest, NonApiBodiesShowTheReasonAndTheirFirstLine) {
  const Settings settings = SettingsWithToken("t", "--token");
  EXPECT_EQ(FormatHttpError(502, "<html>bad gateway</html>\nmore", settings),
            "hfctl: 502 Bad Gateway: <html>bad gateway</html>\n");
  EXPECT_EQ(FormatHttpError(503, "", settings),
            "hfctl: 503 Service Unavailable\n");
}

TEST(ErrorFormatTest, UnreachableNamesTheServerAndTheFix) {
  Settings settings = SettingsWithToken("", "");
  EXPECT_EQ(FormatUnreachable(settings, "connection refused"),
            "hfctl: cannot reach the server at http://127.0.0.1:3333 "
            "(connection refused); is hf-server running? set --server or "
            "HF_SERVER\n");
  settings.server_source = "config file /c.json";
  EXPECT_NE(FormatUnreachable(settings, "connection refused")
                .find("hfctl: (that address is from config file /c.json)"),
            std::string::npos);
}

TEST_F(RequestTest, ExitCodesFollowTheFailure) {
  FakeServer server;
  server.Reply(400, R"({"error": "invalid_argument",
    "message": "qos is derived, not requested", "field": "qos"})");
  RunResult run = Hfctl({"tasks", "create", "--name", "x"}, server);
  EXPECT_EQ(run.exit_code, kExitServerError);
  EXPECT_EQ(run.err,
            "hfctl: 400 invalid_argument: qos is derived, not requested "
            "(field: qos)\n");
  EXPECT_EQ(run.out, "");

  server.replies.emplace_back(Status::Unavailable("connection refused"));
  run = Hfctl({"--server", "http://127.0.0.1:9", "whoami"}, server);
  EXPECT_EQ(run.exit_code, kExitLocalError);
  EXPECT_EQ(run.err,
            "hfctl: cannot reach the server at http://127.0.0.1:9 (connection "
            "refused); is hf-server running? set --server or HF_SERVER\n");

  server.Reply(200, "<html>not an api</html>");
  run = Hfctl({"whoami"}, server);
  EXPECT_EQ(run.exit_code, kExitServerError);
  EXPECT_NE(run.err.find("is not JSON"), std::string::npos);

  server.Reply(200, R"({"ok": true})");
  run = Hfctl({"--help"}, server);
  EXPECT_EQ(run.exit_code, 0);
}

// ---------------------------------------------------------------------------
// The real HTTP transport against a loopback httplib server.

TEST_F(RequestTest, HttpTransportSendsMethodPathTokenAndBody) {
  httplib::Server http;
  std::vector<std::string> seen;  // "METHOD target | auth | type | body"
  auto record = [&seen](const httplib::Request& req, httplib::Response& res) {
    std::string target = req.path;
    if (!req.params.empty()) {
      target += "?";
      for (const auto& [key, value] : req.params) {
        target.append(key).append("=").append(value).append(";");
      }
    }
    seen.push_back(req.method + " " + target + " | " +
                   req.get_header_value("Authorization") + " | " +
                   req.get_header_value("Content-Type") + " | " + req.body +
                   (req.has_header("Idempotency-Key") ? " | keyed" : ""));
    if (req.path.ends_with("/tasks/404")) {
      res.status = 404;
      res.set_content(R"({"error": "not_found", "message": "no task 404"})",
                      "application/json");
      return;
    }
    res.status = req.method == "POST" ? 201 : 200;
    res.set_content(R"({"id": 5, "name": "t", "status": "pending"})",
                    "application/json");
  };
  http.Get(".*", record);
  http.Post(".*", record);
  const int port = http.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serve([&http] { http.listen_after_bind(); });

  const std::string server = "http://127.0.0.1:" + std::to_string(port) + "/hf";
  std::ostringstream out;
  std::ostringstream err;
  const int created =
      hf::cli::Run({"--server", server, "--token", "s3cret", "tasks", "create",
                    "--name", "t", "--compute", "0.5"},
                   MakeHttpTransport, out, err);
  const int listed = hf::cli::Run({"--server", server, "--token", "s3cret",
                                   "tasks", "list", "--tenant", "a b"},
                                  MakeHttpTransport, out, err);
  const int missing = hf::cli::Run({"--server", server, "tasks", "get", "404"},
                                   MakeHttpTransport, out, err);
  http.stop();
  serve.join();

  EXPECT_EQ(created, 0) << err.str();
  EXPECT_EQ(listed, 0) << err.str();
  EXPECT_EQ(missing, kExitServerError);
  EXPECT_NE(err.str().find("hfctl: 404 not_found: no task 404\n"),
            std::string::npos)
      << err.str();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0],
            "POST /hf/api/v1/tasks | Bearer s3cret | application/json | "
            R"({"name":"t","gpu_compute_ratio":0.5} | keyed)");
  EXPECT_EQ(seen[1], "GET /hf/api/v1/tasks?tenant=a b; | Bearer s3cret |  | ");
  EXPECT_EQ(seen[2], "GET /hf/api/v1/tasks/404 |  |  | ");
}

// ---------------------------------------------------------------------------
// The built binary.

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// Runs hfctl with `args` and an environment of only HOME (an empty dir) and
// PATH, capturing stdout and stderr.
ProcessResult RunHfctlBinary(const std::vector<std::string>& args) {
  TempDir dir;
  const std::string out_path = (dir.path() / "out").string();
  const std::string err_path = (dir.path() / "err").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> argv_storage = {HFCTL_PATH};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_storage.size() + 1);
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::string home = "HOME=" + dir.path().string();
  std::string path = "PATH=/usr/bin:/bin";
  std::vector<char*> envp = {home.data(), path.data(), nullptr};

  ProcessResult result;
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, HFCTL_PATH, &actions, nullptr,
                                  argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(spawned, 0) << "cannot start " << HFCTL_PATH;
  if (spawned != 0) return result;
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = ReadAll(out_path);
  result.err = ReadAll(err_path);
  return result;
}

TEST(HfctlBinaryTest, UnreachableServerExitsTwoWithTheHint) {
  // A socket bound but not listening: connecting to its port is refused, and
  // no other process can take the port while the test holds it.
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t length = sizeof(addr);
  ASSERT_EQ(getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const std::string url =
      "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  ProcessResult run = RunHfctlBinary({"--server", url, "tasks", "list"});
  close(sock);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "hfctl: cannot reach the server at " + url +
                         " (connection refused); is hf-server running? set "
                         "--server or HF_SERVER\n");
  EXPECT_EQ(run.out, "");
}

TEST(HfctlBinaryTest, HelpListsEveryCommandGroup) {
  ProcessResult run = RunHfctlBinary({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* group : {"whoami", "tasks", "slices", "nodes", "tenants",
                            "groups", "tokens", "slice-requests"}) {
    EXPECT_NE(run.out.find("\n  " + std::string(group) + " "),
              std::string::npos)
        << group << " missing from:\n"
        << run.out;
  }
}

TEST(HfctlBinaryTest, UsageErrorsExitTwo) {
  ProcessResult run = RunHfctlBinary({"tasks", "explode"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_FALSE(run.err.empty());
}

}  // namespace
}  // namespace hf::cli
