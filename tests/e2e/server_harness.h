// The end-to-end test harness: starts the REAL hf-server binary on loopback
// in a fresh temporary directory and talks to it over HTTP, the way an
// operator, `hfctl` or an agent would. Nothing here links the server's
// libraries; the binary is found through the HF_SERVER_PATH compile
// definition (CMake: HF_SERVER_PATH="$<TARGET_FILE:hf-server>").
//
// Pieces:
//  - `ServerProcess`: one hf-server process (fork/exec) with its own temp
//    directory, SQLite database, admin-token file and log file; Start,
//    Stop (SIGTERM, expects exit code 0), Kill (SIGKILL) and Restart (same
//    database, same port when it is still free).
//  - `HttpClient`: small cpp-httplib wrapper returning status, parsed JSON
//    and raw body, with an optional Bearer token.
//  - `Api`: an admin-authenticated client with helpers that create tenants
//    and tokens with unique names, and poll tasks.
//  - `SimNode`: a simulated agent (POST /api/v1/nodes/register, heartbeats,
//    assignments, task-states, the MIG command channel) with GPUs described
//    by `SimGpu`.
//  - `SharedServer`: one server for a whole test suite (cheaper than one
//    per test where tests do not disturb each other, e.g. with fresh
//    tenants).
//  - Checks and waits: `IsApiError`/`IsInvalid`/`HasStatus` (the API's
//    error contract), `WaitFor` (polling), `PickFreePort`, `UniqueName`.
//
// Failures are reported as `::testing::AssertionResult` (use
// `ASSERT_TRUE(server.Start())`), so a helper never aborts a test by itself
// and every message carries the server's log where it helps.
//
// Environment: HF_E2E_KEEP=1 keeps the temporary directories (database and
// log) after the test for inspection; their paths are printed.
//
// Thread-safety: a ServerProcess is driven from one thread, and should be
// started from a thread that outlives it (the child gets PR_SET_PDEATHSIG,
// which fires when the *thread* that forked it ends, so a crashed test
// never leaves a server behind). HttpClient, Api and SimNode hold no
// mutable state: share them or copy them across threads freely.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace hf::e2e {

using json = nlohmann::json;
using std::chrono::milliseconds;

// One HTTP exchange. `status` is 0 when no reply came (connection refused,
// timeout); `error` then says why. `body` is the parsed JSON, or null when
// the reply is not JSON.
struct HttpReply {
  int status = 0;
  json body;        // parsed JSON (null when not JSON)
  std::string raw;  // the body as received
  std::string content_type;
  std::string error;  // transport error, when status == 0
  std::string www_authenticate;
  std::string allow;  // the Allow header (a 405 lists the served methods)

  // "METHOD path -> status body" (body cut to 2000 bytes), for messages.
  std::string Describe() const;
  std::string request_line;  // "GET /api/v1/tasks"
};

class HttpClient {
 public:
  HttpClient(std::string host, int port);

  // `token` empty: no Authorization header.
  HttpReply Get(const std::string& path, const std::string& token = "") const;
  HttpReply Post(const std::string& path, const json& body,
                 const std::string& token = "") const;
  // Sends `body` byte for byte.
  HttpReply PostRaw(const std::string& path, const std::string& body,
                    const std::string& token = "",
                    const std::string& content_type = "application/json") const;
  HttpReply Patch(const std::string& path, const json& body,
                  const std::string& token = "") const;
  HttpReply Delete(const std::string& path,
                   const std::string& token = "") const;
  // Any method with a raw body (empty: none) and extra headers.
  HttpReply Send(const std::string& method, const std::string& path,
                 const std::string& body, const std::string& token,
                 const std::vector<std::pair<std::string, std::string>>&
                     extra_headers = {}) const;

  // A request with no body and neither Content-Length nor
  // Transfer-Encoding, written to the socket as `curl -X POST URL` does
  // (cpp-httplib's client always sends a length). Connection: close.
  HttpReply SendBare(const std::string& method, const std::string& path,
                     const std::string& token = "") const;

  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  std::string host_;
  int port_;
};

struct ServerOptions {
  // Extra hf-server flags, e.g. {"--gc-interval", "1"}.
  std::vector<std::string> flags;
  // The --db URL; empty: a SQLite database in the server's directory.
  // Several servers may share one PostgreSQL URL (issue 8).
  std::string db;
  // How long Start waits for GET /healthz.
  milliseconds start_timeout{20'000};
  // How long Stop waits for the process to exit after SIGTERM.
  milliseconds stop_timeout{20'000};
  // Tries with a fresh port when the chosen one was taken meanwhile.
  int port_attempts = 5;
};

class ServerProcess {
 public:
  explicit ServerProcess(ServerOptions options = {});
  ~ServerProcess();  // SIGKILLs a running server; removes the temp dir
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts the server on a free loopback port and waits until /healthz
  // answers. The first start creates the database; later starts reuse it.
  ::testing::AssertionResult Start();
  // SIGTERM, waits, and expects exit code 0.
  ::testing::AssertionResult Stop();
  // SIGKILL and reap (a crash, as far as the database can tell).
  ::testing::AssertionResult Kill();
  // Stop (or Kill when `kill`) then Start on the same database, on the same
  // port when it is still free.
  ::testing::AssertionResult Restart(bool kill = false);

  // Waits up to `timeout` for the server to exit by itself (it is reaped;
  // `*status` gets its wait status). False when it still runs.
  bool WaitExit(milliseconds timeout, int* status);

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string url() const;  // http://127.0.0.1:PORT
  const std::string& admin_token() const { return admin_token_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path db_path() const { return dir_ / "heteroflow.db"; }
  std::filesystem::path log_path() const { return dir_ / "server.log"; }
  // The whole log (stdout and stderr of every start), or its last
  // `max_bytes`.
  std::string Log(std::size_t max_bytes = 16'384) const;
  // The flags the server is started with (after the fixed ones); may be
  // changed between Stop and Start.
  std::vector<std::string>& flags() { return options_.flags; }

  HttpClient client() const { return HttpClient("127.0.0.1", port_); }

 private:
  ::testing::AssertionResult StartOnPort(int port, bool* port_in_use);
  // Reaps the child if it exited; returns true and its wait status then.
  bool Reap(int* status, milliseconds timeout);

  ServerOptions options_;
  std::filesystem::path dir_;
  std::string admin_token_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// --- child processes (ServerProcess, AgentProcess) ---
std::string ReadFile(const std::filesystem::path& path);
// The last `max_bytes` of `text`, marked "[...]" when cut.
std::string Tail(const std::string& text, std::size_t max_bytes);
// "exit code 3", "killed by signal Killed", ...
std::string DescribeWaitStatus(int status);
// HF_E2E_KEEP is set: keep temporary directories for inspection.
bool KeepDirs();
// Waits up to `timeout` for child `pid` to end; true when it did (its wait
// status in `status`, `pid` set to -1).
bool ReapChild(pid_t& pid, int* status, milliseconds timeout);
// SIGTERM, then expects exit code 0 within `timeout` (SIGKILL after it);
// `log` is shown on failure.
::testing::AssertionResult TerminateChild(
    pid_t& pid, const std::string& program, milliseconds timeout,
    const std::function<std::string()>& log);
// SIGKILL and reap.
::testing::AssertionResult KillChild(pid_t& pid, const std::string& program);

// Picks a loopback TCP port that was free a moment ago (bind to port 0,
// read it back, close). Another process may take it before it is used; the
// harness retries then.
int PickFreePort();

// Polls `done` every `interval` until it returns true or `timeout` passes;
// returns its last result.
bool WaitFor(const std::function<bool()>& done,
             milliseconds timeout = milliseconds(10'000),
             milliseconds interval = milliseconds(20));

// Names unique within the test binary: "<prefix>-<n>" (lower case, valid
// as tenant, group and node names).
std::string UniqueName(const std::string& prefix);

// An admin-authenticated client with helpers. Helpers that must succeed
// record a test failure (with the reply) and return an empty value when the
// server says otherwise.
class Api {
 public:
  explicit Api(const ServerProcess& server)
      : Api(server.client(), server.admin_token()) {}
  Api(HttpClient client, std::string admin_token)
      : http_(std::move(client)), admin_(std::move(admin_token)) {}

  const HttpClient& http() const { return http_; }
  const std::string& admin() const { return admin_; }

  // POST /api/v1/tenants; returns the name ("" on failure).
  std::string CreateTenant(const std::string& name,
                           const std::optional<std::string>& group = {}) const;
  // A tenant with a fresh unique name.
  std::string NewTenant(const std::string& prefix = "t",
                        const std::optional<std::string>& group = {}) const;
  // POST /api/v1/tokens as `as` (default: admin); returns the secret.
  std::string CreateToken(const std::string& role,
                          const std::optional<std::string>& tenant,
                          const std::string& as = "",
                          json* reply = nullptr) const;

  // POST /api/v1/tasks; returns the task JSON (null on failure).
  json CreateTask(const json& body, const std::string& token) const;
  json GetTask(std::int64_t id, const std::string& token) const;
  // Polls until the task's status is not `pending` (or timeout); returns
  // the last task JSON seen.
  json WaitNotPending(std::int64_t id, const std::string& token,
                      milliseconds timeout = milliseconds(10'000)) const;
  // Polls until `pred(task)` holds (or timeout); returns the last task seen.
  json WaitTask(std::int64_t id, const std::string& token,
                const std::function<bool(const json&)>& pred,
                milliseconds timeout = milliseconds(10'000)) const;
  // Polls until the pending task has a pending_reason other than the
  // initial "waiting for the scheduler" (the scheduler tried it).
  json WaitTried(std::int64_t id, const std::string& token,
                 milliseconds timeout = milliseconds(10'000)) const;
  json GetSlice(std::int64_t id, const std::string& token) const;
  // GET and merge every page of a list (`path` may hold a query already).
  json ListAll(const std::string& path, const std::string& token) const;

 private:
  HttpClient http_;
  std::string admin_;
};

// A simulated GPU as an agent reports it.
struct SimGpu {
  int index = 0;
  std::string model = "NVIDIA A100-SXM4-80GB";
  std::int64_t memory_mb = 81920;
  bool mig_capable = false;
  bool mps_capable = true;
  std::string compute_capability = "8.0";
  std::string vendor = "nvidia";
  std::string uuid;  // empty: "GPU-<node>-<index>"
  bool lost = false;

  json ToJson(const std::string& node) const;
};

// A simulated agent. Uses a `node` token it creates through `api` unless
// one is given.
class SimNode {
 public:
  SimNode(Api api, std::string name, std::vector<SimGpu> gpus,
          std::string token = "");

  const std::string& name() const { return name_; }
  const std::string& token() const { return token_; }
  // Node-level facts sent with every report.
  bool containerized = false;
  bool hook_available = false;
  std::vector<SimGpu>& gpus() { return gpus_; }
  std::string GpuUuid(int index) const;

  // The body an agent sends (register: with node_id; heartbeat: plus tasks).
  json ReportBody() const;
  // POST /api/v1/nodes/register; records a failure unless 200.
  ::testing::AssertionResult Register() const;
  HttpReply RegisterReply() const;
  // POST /api/v1/nodes/{node}/heartbeat with the current GPUs and `tasks`
  // (array of {"task_id","state","gpu_indices"}).
  HttpReply Heartbeat(const json& tasks = json::array()) const;
  HttpReply Assignments() const;
  // POST task-states with one entry.
  HttpReply ReportState(std::int64_t task_id, const std::string& state,
                        std::optional<int> exit_code = {},
                        const std::string& message = "") const;
  HttpReply Claim() const;
  HttpReply Result(std::int64_t request_id, const json& body) const;

 private:
  Api api_;
  std::string name_;
  std::vector<SimGpu> gpus_;
  std::string token_;
};

// True when `j` contains `needle` anywhere in its serialisation.
bool JsonMentions(const json& j, const std::string& needle);

// Checks an API error reply (docs/API.md, Conventions): HTTP `status`, a
// JSON body with `error` == `code`, a non-empty `message`, and `field` ==
// `*field` when given (absent when `field` is the empty string).
::testing::AssertionResult IsApiError(
    const HttpReply& reply, int status, const std::string& code,
    const std::optional<std::string>& field = std::nullopt);
// Shorthand: 400 invalid_argument naming `field`.
::testing::AssertionResult IsInvalid(const HttpReply& reply,
                                     const std::string& field);
// Checks an HTTP status, with the reply in the message.
::testing::AssertionResult HasStatus(const HttpReply& reply, int status);

// One hf-server shared by a test suite. In the fixture:
//   static void SetUpTestSuite() { shared().Start({...flags}); }
//   static void TearDownTestSuite() { shared().Reset(); }
//   void SetUp() override { ASSERT_TRUE(shared().ok()) << shared().why(); }
class SharedServer {
 public:
  void Start(std::vector<std::string> flags = {});
  void Reset();  // stops (expecting exit 0) and removes the server
  bool ok() const { return server_ != nullptr && server_->running(); }
  const std::string& why() const { return why_; }
  ServerProcess& server() { return *server_; }
  Api api() const { return Api(*server_); }

 private:
  std::unique_ptr<ServerProcess> server_;
  std::string why_;
};

}  // namespace hf::e2e
