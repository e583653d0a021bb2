// End-to-end tests of the real `hfctl` binary (docs/CLI.md) against the
// real hf-server: identity, tenants, tokens, tasks, slices, nodes, `-o
// json` output, and the error paths with their exit codes (1: the server
// said no; 2: hfctl could not send the request).
//
// One server (with one simulated node) is shared by the suite; tests use
// fresh tenants.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/e2e/server_harness.h"

namespace hf::e2e {
namespace {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  json Json() const {
    json j = json::parse(out, nullptr, false);
    return j.is_discarded() ? json(nullptr) : j;
  }
  std::string Describe() const {
    return "exit " + std::to_string(exit_code) + "\nstdout:\n" + out +
           "\nstderr:\n" + err;
  }
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class HfctlTest : public ::testing::Test {
 protected:
  static SharedServer& shared() {
    static SharedServer s;
    return s;
  }
  static void SetUpTestSuite() {
    shared().Start();
    if (!shared().ok()) return;
    Api api(shared().server());
    SimNode node(api, "cli-node", {SimGpu{.index = 0}, SimGpu{.index = 1}});
    EXPECT_TRUE(node.Register());
  }
  static void TearDownTestSuite() { shared().Reset(); }
  void SetUp() override {
    ASSERT_TRUE(shared().ok()) << shared().why();
    api_ = std::make_unique<Api>(shared().server());
  }

  // Runs hfctl with `args` and a clean environment (HOME in the server's
  // temp dir, so no developer config is read) plus `env`.
  CliResult Run(const std::vector<std::string>& args,
                const std::vector<std::string>& env = {},
                const std::string& stdin_text = "") const {
    const std::string dir = shared().server().dir().string();
    static int counter = 0;
    const std::string base = dir + "/hfctl-" + std::to_string(++counter);
    const std::string out_path = base + ".out";
    const std::string err_path = base + ".err";
    const std::string in_path = base + ".in";
    std::ofstream(in_path) << stdin_text;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, in_path.c_str(),
                                     O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> argv_storage = {HFCTL_PATH};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_storage = {"HOME=" + dir,
                                            "PATH=/usr/bin:/bin"};
    env_storage.insert(env_storage.end(), env.begin(), env.end());
    std::vector<char*> envp;
    for (std::string& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);
    CliResult result;
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
  // hfctl --server URL --token TOKEN args...
  CliResult As(const std::string& token,
               const std::vector<std::string>& args) const {
    std::vector<std::string> all = {"--server", shared().server().url(),
                                    "--token", token};
    all.insert(all.end(), args.begin(), args.end());
    return Run(all);
  }
  CliResult Admin(const std::vector<std::string>& args) const {
    return As(api_->admin(), args);
  }

  std::unique_ptr<Api> api_;
};

TEST_F(HfctlTest, Whoami) {
  CliResult table = Admin({"whoami"});
  ASSERT_EQ(table.exit_code, 0) << table.Describe();
  EXPECT_NE(table.out.find("role:"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("admin"), std::string::npos) << table.out;
  CliResult j = Admin({"-o", "json", "whoami"});
  ASSERT_EQ(j.exit_code, 0) << j.Describe();
  EXPECT_EQ(j.Json().value("role", ""), "admin") << j.out;
  // Global options after the command, and the token from HF_TOKEN.
  CliResult env = Run(
      {"whoami", "-o", "json"},
      {"HF_SERVER=" + shared().server().url(), "HF_TOKEN=" + api_->admin()});
  ASSERT_EQ(env.exit_code, 0) << env.Describe();
  EXPECT_EQ(env.Json().value("role", ""), "admin");
}

TEST_F(HfctlTest, TenantsTokensAndAUsersTasks) {
  const std::string tenant = UniqueName("cli");
  const std::string group = UniqueName("cli-grp");
  CliResult created = Admin({"tenants", "create", tenant, "--group", group});
  ASSERT_EQ(created.exit_code, 0) << created.Describe();
  EXPECT_NE(created.out.find(tenant), std::string::npos) << created.out;
  CliResult got = Admin({"-o", "json", "tenants", "get", tenant});
  ASSERT_EQ(got.exit_code, 0) << got.Describe();
  EXPECT_EQ(got.Json().value("shared_group", ""), group);
  CliResult list = Admin({"tenants", "list", "--all", "-o", "json"});
  ASSERT_EQ(list.exit_code, 0) << list.Describe();
  EXPECT_TRUE(JsonMentions(list.Json()["items"], tenant)) << list.out;
  EXPECT_TRUE(list.Json()["next_cursor"].is_null());
  CliResult table = Admin({"tenants", "list"});
  ASSERT_EQ(table.exit_code, 0) << table.Describe();
  EXPECT_EQ(table.out.rfind("NAME", 0), 0u) << table.out;
  EXPECT_NE(table.out.find(group), std::string::npos) << table.out;
  CliResult dup = Admin({"tenants", "create", tenant});
  EXPECT_EQ(dup.exit_code, 1) << dup.Describe();
  EXPECT_NE(dup.err.find("409 conflict"), std::string::npos) << dup.err;

  // A token: the secret on a line of its own, shown once.
  CliResult token = Admin({"tokens", "create", "--role", "user", "--tenant",
                           tenant, "--description", "ci bot"});
  ASSERT_EQ(token.exit_code, 0) << token.Describe();
  EXPECT_NE(token.out.find("Created token"), std::string::npos) << token.out;
  std::string secret;
  std::istringstream lines(token.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("    hf_", 0) == 0) secret = line.substr(4);
  }
  ASSERT_FALSE(secret.empty()) << token.out;
  CliResult who = As(secret, {"-o", "json", "whoami"});
  ASSERT_EQ(who.exit_code, 0) << who.Describe();
  EXPECT_EQ(who.Json().value("role", ""), "user");
  EXPECT_EQ(who.Json().value("tenant", ""), tenant);
  CliResult tokens = Admin({"-o", "json", "tokens", "list", "--all"});
  ASSERT_EQ(tokens.exit_code, 0) << tokens.Describe();
  EXPECT_EQ(tokens.out.find(secret), std::string::npos);
  CliResult tokens_json = Admin(
      {"-o", "json", "tokens", "create", "--role", "user", "--tenant", tenant});
  ASSERT_EQ(tokens_json.exit_code, 0) << tokens_json.Describe();
  EXPECT_TRUE(tokens_json.Json()["token"].is_string()) << tokens_json.out;

  // Tasks as that user.
  CliResult task = As(
      secret, {"-o", "json", "tasks", "create", "--name", "infer", "--memory",
               "4096", "--compute", "0.5", "--env", "URL=http://x/?a=b"});
  ASSERT_EQ(task.exit_code, 0) << task.Describe();
  const json t = task.Json();
  ASSERT_TRUE(t["id"].is_number_integer()) << task.out;
  EXPECT_EQ(t["gpu_compute_percent"], 50);
  EXPECT_EQ(t["env"]["URL"], "http://x/?a=b");
  const std::string id = t["id"].dump();
  json bound = api_->WaitNotPending(t["id"].get<std::int64_t>(), secret);
  EXPECT_EQ(bound.value("status", ""), "scheduled") << bound.dump();
  CliResult get = As(secret, {"tasks", "get", id, "-o", "json"});
  ASSERT_EQ(get.exit_code, 0) << get.Describe();
  EXPECT_EQ(get.Json()["id"], t["id"]);
  CliResult get_table = As(secret, {"tasks", "get", id});
  ASSERT_EQ(get_table.exit_code, 0) << get_table.Describe();
  EXPECT_NE(get_table.out.find("scheduled"), std::string::npos)
      << get_table.out;
  CliResult tl = As(secret, {"tasks", "list"});
  ASSERT_EQ(tl.exit_code, 0) << tl.Describe();
  EXPECT_EQ(tl.out.rfind("ID", 0), 0u) << tl.out;
  EXPECT_NE(tl.out.find("infer"), std::string::npos) << tl.out;
  EXPECT_NE(tl.out.find("4096MB"), std::string::npos) << tl.out;
  EXPECT_NE(tl.out.find("50%"), std::string::npos) << tl.out;
  EXPECT_NE(tl.out.find("cli-node:"), std::string::npos) << tl.out;
  CliResult tlj =
      As(secret, {"tasks", "list", "-o", "json", "--status", "scheduled"});
  ASSERT_EQ(tlj.exit_code, 0) << tlj.Describe();
  ASSERT_EQ(tlj.Json()["items"].size(), 1u) << tlj.out;

  // Slices of the bound task.
  CliResult sl = As(secret, {"-o", "json", "slices", "list"});
  ASSERT_EQ(sl.exit_code, 0) << sl.Describe();
  ASSERT_EQ(sl.Json()["items"].size(), 1u) << sl.out;
  const std::string slice_id = sl.Json()["items"][0]["id"].dump();
  CliResult sl_table = As(secret, {"slices", "list"});
  ASSERT_EQ(sl_table.exit_code, 0) << sl_table.Describe();
  EXPECT_NE(sl_table.out.find("silver"), std::string::npos) << sl_table.out;
  CliResult sg = As(secret, {"slices", "get", slice_id});
  ASSERT_EQ(sg.exit_code, 0) << sg.Describe();
  CliResult stats = As(secret, {"slices", "stats"});
  ASSERT_EQ(stats.exit_code, 0) << stats.Describe();
  CliResult stats_json = As(secret, {"slices", "stats", "-o", "json"});
  ASSERT_EQ(stats_json.exit_code, 0) << stats_json.Describe();
  EXPECT_EQ(stats_json.Json()["scope"], "tenant");
  EXPECT_EQ(stats_json.Json()["totals"]["accounted_memory_mb"], 4096);
  CliResult history =
      As(secret, {"-o", "json", "slices", "history", "--task", id});
  ASSERT_EQ(history.exit_code, 0) << history.Describe();
  ASSERT_EQ(history.Json()["items"].size(), 1u) << history.out;
  EXPECT_EQ(history.Json()["items"][0]["op"], "allocate");

  // Its output, as an agent shipped it.
  HttpReply shipped = api_->http().Post(
      "/api/v1/nodes/cli-node/tasks/" + id + "/logs",
      {{"offset", 0}, {"data", "aGVsbG8Kd29ybGQK"}}, api_->admin());
  ASSERT_TRUE(HasStatus(shipped, 200));
  CliResult logs = As(secret, {"tasks", "logs", id});
  ASSERT_EQ(logs.exit_code, 0) << logs.Describe();
  EXPECT_EQ(logs.out, "hello\nworld\n");
  CliResult tail = As(secret, {"tasks", "logs", id, "--offset", "6"});
  EXPECT_EQ(tail.out, "world\n") << tail.Describe();
  CliResult logs_json = As(secret, {"-o", "json", "tasks", "logs", id});
  EXPECT_EQ(logs_json.Json()["size"], 12) << logs_json.Describe();

  // Cancel: the node is asked to stop it; once it says so, the slice is
  // gone from the live list.
  CliResult cancel = As(secret, {"tasks", "cancel", id});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.Describe();
  EXPECT_NE(cancel.out.find("scheduled (cancelling)"), std::string::npos)
      << cancel.out;
  ASSERT_TRUE(HasStatus(
      api_->http().Post("/api/v1/nodes/cli-node/task-states",
                        {{"states", json::array({{{"task_id", std::stoll(id)},
                                                  {"state", "cancelled"}}})}},
                        api_->admin()),
      200));
  CliResult done = As(secret, {"tasks", "get", id});
  EXPECT_NE(done.out.find("cancelled"), std::string::npos) << done.out;
  CliResult empty = As(secret, {"slices", "list"});
  ASSERT_EQ(empty.exit_code, 0) << empty.Describe();
  EXPECT_EQ(empty.out, "");
  EXPECT_NE(empty.err.find("No "), std::string::npos) << empty.err;
}

TEST_F(HfctlTest, NodesAndSliceRequests) {
  CliResult nodes = Admin({"nodes", "list"});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.Describe();
  EXPECT_EQ(nodes.out.rfind("NODE", 0), 0u) << nodes.out;
  EXPECT_NE(nodes.out.find("cli-node"), std::string::npos) << nodes.out;
  CliResult node = Admin({"-o", "json", "nodes", "get", "cli-node"});
  ASSERT_EQ(node.exit_code, 0) << node.Describe();
  EXPECT_EQ(node.Json()["gpus"].size(), 2u) << node.out;
  CliResult detail = Admin({"nodes", "get", "cli-node"});
  ASSERT_EQ(detail.exit_code, 0) << detail.Describe();
  EXPECT_NE(detail.out.find("GPU-cli-node-1"), std::string::npos) << detail.out;
  CliResult requests = Admin({"-o", "json", "slice-requests", "list"});
  ASSERT_EQ(requests.exit_code, 0) << requests.Describe();
  EXPECT_TRUE(requests.Json()["items"].is_array()) << requests.out;
}

TEST_F(HfctlTest, AdminMutations) {
  const std::string group = UniqueName("cli-g");
  CliResult g = Admin({"groups", "create", group});
  ASSERT_EQ(g.exit_code, 0) << g.Describe();
  const std::string tenant = UniqueName("cli-m");
  ASSERT_EQ(Admin({"tenants", "create", tenant}).exit_code, 0);
  CliResult set = Admin({"tenants", "set-group", tenant, group});
  ASSERT_EQ(set.exit_code, 0) << set.Describe();
  EXPECT_NE(set.out.find(group), std::string::npos) << set.out;
  CliResult groups = Admin({"groups", "list"});
  ASSERT_EQ(groups.exit_code, 0) << groups.Describe();
  EXPECT_NE(groups.out.find(tenant), std::string::npos) << groups.out;
  CliResult none =
      Admin({"-o", "json", "tenants", "set-group", tenant, "--none"});
  ASSERT_EQ(none.exit_code, 0) << none.Describe();
  EXPECT_TRUE(none.Json()["shared_group"].is_null()) << none.out;
  CliResult del = Admin({"groups", "delete", group});
  EXPECT_EQ(del.exit_code, 0) << del.Describe();

  // Operator slices.
  CliResult slice = Admin({"-o", "json", "slices", "create", "--tenant", tenant,
                           "--node", "cli-node", "--gpu-index", "1", "--memory",
                           "2048", "--compute", "0.1", "--reason", "cli test"});
  ASSERT_EQ(slice.exit_code, 0) << slice.Describe();
  EXPECT_EQ(slice.Json()["origin"], "admin");
  EXPECT_EQ(slice.Json()["gpu_index"], 1);
  const std::string id = slice.Json()["id"].dump();
  // Dynamic quota: raise, lower (warned), refuse a bad size.
  CliResult raised = Admin(
      {"slices", "resize", id, "--memory-mb", "4096", "--reason", "more"});
  ASSERT_EQ(raised.exit_code, 0) << raised.Describe();
  EXPECT_NE(raised.out.find("4096MB"), std::string::npos) << raised.out;
  EXPECT_EQ(raised.err, "") << raised.Describe();
  CliResult lowered = Admin({"slices", "resize", id, "--memory-mb", "1024"});
  ASSERT_EQ(lowered.exit_code, 0) << lowered.Describe();
  EXPECT_NE(lowered.err.find("warning: "), std::string::npos)
      << lowered.Describe();
  CliResult odd = Admin({"slices", "resize", id, "--memory-mb", "1000"});
  EXPECT_EQ(odd.exit_code, 1) << odd.Describe();
  EXPECT_NE(odd.err.find("(field: memory_mb)"), std::string::npos)
      << odd.Describe();
  CliResult gone = Admin({"slices", "delete", id, "--reason", "cli done"});
  ASSERT_EQ(gone.exit_code, 0) << gone.Describe();
  EXPECT_NE(gone.out.find("released"), std::string::npos) << gone.out;
  CliResult history = Admin({"-o", "json", "slices", "history", "--slice", id});
  ASSERT_EQ(history.exit_code, 0) << history.Describe();
  ASSERT_EQ(history.Json()["items"].size(), 4u) << history.out;
  EXPECT_EQ(history.Json()["items"][1]["op"], "slice_resized");
  EXPECT_EQ(history.Json()["items"][1]["reason"],
            "memory_mb 2048 -> 4096: more");
  EXPECT_EQ(history.Json()["items"][3]["reason"], "cli done");

  // Token revocation.
  CliResult token = Admin(
      {"-o", "json", "tokens", "create", "--role", "user", "--tenant", tenant});
  ASSERT_EQ(token.exit_code, 0) << token.Describe();
  const std::string secret = token.Json()["token"].get<std::string>();
  CliResult revoke = Admin({"tokens", "revoke", token.Json()["id"].dump()});
  ASSERT_EQ(revoke.exit_code, 0) << revoke.Describe();
  CliResult rejected = As(secret, {"whoami"});
  EXPECT_EQ(rejected.exit_code, 1) << rejected.Describe();
  EXPECT_NE(rejected.err.find("401"), std::string::npos) << rejected.err;

  // Sharing approvals.
  const std::string other = UniqueName("cli-o");
  ASSERT_EQ(Admin({"tenants", "create", other}).exit_code, 0);
  CliResult approve = Admin({"-o", "json", "approvals", "create", tenant, other,
                             "--reason", "cli test", "--ttl", "600"});
  ASSERT_EQ(approve.exit_code, 0) << approve.Describe();
  EXPECT_EQ(approve.Json()["active"], true);
  CliResult both =
      Admin({"approvals", "create", tenant, other, "--reason", "x", "--ttl",
             "600", "--expires-at", "2030-01-01T00:00:00Z"});
  EXPECT_NE(both.exit_code, 0) << both.Describe();
  CliResult approvals = Admin({"approvals", "list"});
  ASSERT_EQ(approvals.exit_code, 0) << approvals.Describe();
  EXPECT_NE(approvals.out.find("cli test"), std::string::npos) << approvals.out;
  CliResult withdrawn =
      Admin({"-o", "json", "approvals", "revoke", approve.Json()["id"].dump()});
  ASSERT_EQ(withdrawn.exit_code, 0) << withdrawn.Describe();
  EXPECT_EQ(withdrawn.Json()["active"], false);

  // A node token bound to one node.
  CliResult node = Admin({"-o", "json", "tokens", "create", "--role", "node",
                          "--node", "cli-bound"});
  ASSERT_EQ(node.exit_code, 0) << node.Describe();
  EXPECT_EQ(node.Json()["node"], "cli-bound");
}

TEST_F(HfctlTest, ErrorsAndExitCodes) {
  const std::string tenant = api_->NewTenant("cli-err");
  const std::string user = api_->CreateToken("user", tenant);
  // 400 names the field.
  CliResult invalid =
      As(user, {"tasks", "create", "--name", "x", "--memory", "31"});
  EXPECT_EQ(invalid.exit_code, 1) << invalid.Describe();
  EXPECT_NE(invalid.err.find("hfctl: 400 invalid_argument:"), std::string::npos)
      << invalid.err;
  EXPECT_NE(invalid.err.find("(field: gpu_memory_mb)"), std::string::npos)
      << invalid.err;
  EXPECT_EQ(invalid.out, "");
  // A body from a file is sent as is; the server names the bad field.
  const std::string file = shared().server().dir().string() + "/task.json";
  std::ofstream(file) << R"({"name": "f", "gpu_memory_mb": 64, "qos": "gold"})";
  CliResult from_file = As(user, {"tasks", "create", "-f", file});
  EXPECT_EQ(from_file.exit_code, 1) << from_file.Describe();
  EXPECT_NE(from_file.err.find("(field: qos)"), std::string::npos)
      << from_file.err;
  CliResult from_stdin = Run({"--server", shared().server().url(), "--token",
                              user, "-o", "json", "tasks", "create", "-f", "-"},
                             {}, R"({"name": "stdin", "gpu_memory_mb": 64})");
  ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.Describe();
  EXPECT_EQ(from_stdin.Json()["name"], "stdin");
  // 401 with a clear message and a hint at where the token came from.
  CliResult bad = As("hf_wrong", {"tasks", "list"});
  EXPECT_EQ(bad.exit_code, 1) << bad.Describe();
  EXPECT_NE(bad.err.find("401 unauthenticated"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("--token"), std::string::npos) << bad.err;
  CliResult none = Run({"--server", shared().server().url(), "whoami"});
  EXPECT_EQ(none.exit_code, 1) << none.Describe();
  EXPECT_NE(none.err.find("401"), std::string::npos) << none.err;
  // 403 points at whoami.
  CliResult forbidden = As(user, {"nodes", "list"});
  EXPECT_EQ(forbidden.exit_code, 1) << forbidden.Describe();
  EXPECT_NE(forbidden.err.find("403 permission_denied"), std::string::npos)
      << forbidden.err;
  EXPECT_NE(forbidden.err.find("whoami"), std::string::npos) << forbidden.err;
  // 404.
  CliResult missing = As(user, {"tasks", "get", "999999"});
  EXPECT_EQ(missing.exit_code, 1) << missing.Describe();
  EXPECT_NE(missing.err.find("404 not_found"), std::string::npos)
      << missing.err;
  // Unreachable server: exit 2.
  const int port = PickFreePort();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  CliResult down = Run({"--server", url, "--token", user, "tasks", "list"});
  EXPECT_EQ(down.exit_code, 2) << down.Describe();
  EXPECT_NE(down.err.find("cannot reach the server at " + url),
            std::string::npos)
      << down.err;
  // Usage errors: exit 2 before anything is sent.
  CliResult usage =
      As(user, {"tasks", "create", "--name", "x", "--env", "NOEQUALS"});
  EXPECT_EQ(usage.exit_code, 2) << usage.Describe();
}

}  // namespace
}  // namespace hf::e2e
