// libFuzzer target: the REST API end to end, in-process. LocalApi serves
// the whole route table (the same authentication, limits, codec and
// ControlPlane as hf-server, without a socket) over a real SQLite store in a
// temporary directory. One ControlPlane per process, set up once with
// tenants, tokens of every role, a node with GPUs and bound slices; inputs
// then change it further.
//
// An input is up to kMaxRequests requests, separated by lines "%%":
//
//   <who> <METHOD> <target>
//   <body, up to the separator>
//
// <who> picks the bearer token: admin, tadmin (tenant-admin of t1), user
// (t1), other (user of t3), node (bound to n1), fleet (an unbound node
// token), none, or anything else (sent as the token itself). Instead of a
// request, a line "bind", "gc" or "tick" runs the scheduler's bind, the
// orphan GC, or advances the fake clock by 61 s.
//
// Checked after every request: no 500 (an exception or an internal error
// on outside input is a bug), only documented statuses, JSON bodies that
// parse, error bodies {"error", "message"[, "field"]} whose code matches
// the status. After every input: the ledger equals the store
// (ControlPlane::CheckLedgerMatchesStore).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http_api.h"
#include "common/clock.h"
#include "server/control_plane.h"
#include "store/store.h"

namespace {

using nlohmann::json;

constexpr int kMaxRequests = 8;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "api_fuzz: %s\n", what.c_str());
  std::abort();
}

// The one ControlPlane of this process and the secrets of its tokens.
struct World {
  std::filesystem::path dir;
  hf::FakeClock clock{1'800'000'000'000};
  std::unique_ptr<hf::store::Store> store;
  std::unique_ptr<hf::server::ControlPlane> cp;
  std::unique_ptr<hf::api::LocalApi> api;
  std::string admin;
  // Token name -> {role, tenant, node, secret}; re-created when an input
  // revokes one, so later inputs keep every role.
  struct Token {
    std::string role;
    std::string tenant;
    std::string node;
    std::string secret;
  };
  std::map<std::string, Token> tokens;

  ~World() {
    api.reset();
    cp.reset();
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  hf::api::LocalResponse Call(const std::string& bearer,
                              const std::string& method,
                              const std::string& target,
                              const std::string& body = "") const {
    return api->Handle({method, target, bearer, body, {}});
  }

  // A setup request that must succeed.
  json Must(const std::string& method, const std::string& target,
            const json& body = nullptr, const std::string& bearer = "") const {
    const auto r = Call(bearer.empty() ? admin : bearer, method, target,
                        body.is_null() ? "" : body.dump());
    if (r.status != 200 && r.status != 201) {
      Fail("setup " + method + " " + target + ": " + r.body);
    }
    return json::parse(r.body);
  }

  // A new token of `role`, made by the control plane itself (an input may
  // have revoked every admin token there was).
  std::string NewToken(const std::string& role, const std::string& tenant,
                       const std::string& node) const {
    hf::server::Caller root;
    root.role = hf::store::Role::kAdmin;
    auto made = cp->CreateToken(
        root, *hf::store::ParseRole(role),
        tenant.empty() ? std::nullopt : std::optional<std::string>(tenant),
        "fuzz", node.empty() ? std::nullopt : std::optional<std::string>(node));
    if (!made.ok()) Fail("token: " + made.status().ToString());
    return made->second;
  }

  void MakeToken(const std::string& name) {
    Token& t = tokens[name];
    t.secret = NewToken(t.role, t.tenant, t.node);
  }

  // Every setup token still authenticates (an input may revoke any).
  void KeepTokens() {
    if (!cp->Authenticate(admin).ok()) admin = NewToken("admin", "", "");
    for (auto& [name, t] : tokens) {
      if (!cp->Authenticate(t.secret).ok()) MakeToken(name);
    }
  }

  static json Gpu(int index, const std::string& uuid, bool mig, bool mps) {
    return {{"index", index},
            {"uuid", uuid},
            {"model", "NVIDIA A100-SXM4-80GB"},
            {"memory_mb", 81920},
            {"compute_capability", "8.0"},
            {"mig_capable", mig},
            {"mps_capable", mps},
            {"health", "ok"}};
  }

  void SetUp() {
    char tmpl[] = "/tmp/hf-api-fuzz-XXXXXX";
    std::string base = "/dev/shm/hf-api-fuzz-XXXXXX";
    char* made = access("/dev/shm", W_OK) == 0 ? mkdtemp(base.data()) : nullptr;
    if (made == nullptr) made = mkdtemp(tmpl);
    if (made == nullptr) Fail("mkdtemp");
    dir = made;
    auto opened = hf::store::OpenStore("sqlite:" + (dir / "hf.db").string());
    if (!opened.ok()) Fail("store: " + opened.status().ToString());
    store = std::move(*opened);
    hf::server::ControlPlaneOptions options;
    options.gc_min_age_ms = 1000;
    auto created =
        hf::server::ControlPlane::Create(store.get(), &clock, options);
    if (!created.ok()) Fail("control plane: " + created.status().ToString());
    cp = std::move(*created);
    auto secret = cp->BootstrapAdmin(std::nullopt);
    if (!secret.ok() || !secret->has_value()) Fail("bootstrap admin");
    admin = **secret;
    api = std::make_unique<hf::api::LocalApi>(cp.get(), &clock);

    Must("POST", "/api/v1/groups", {{"name", "g1"}});
    Must("POST", "/api/v1/tenants", {{"name", "t1"}, {"shared_group", "g1"}});
    Must("POST", "/api/v1/tenants", {{"name", "t2"}, {"shared_group", "g1"}});
    Must("POST", "/api/v1/tenants", {{"name", "t3"}});
    tokens["tadmin"] = {"tenant-admin", "t1", "", ""};
    tokens["user"] = {"user", "t1", "", ""};
    tokens["other"] = {"user", "t3", "", ""};
    tokens["node"] = {"node", "", "n1", ""};
    tokens["fleet"] = {"node", "", "", ""};
    for (const auto& [name, t] : tokens) MakeToken(name);

    Must("POST", "/api/v1/nodes/register",
         {{"node_id", "n1"},
          {"cpu_milli", 64000},
          {"host_memory_mb", 262144},
          {"gpus",
           {Gpu(0, "GPU-n1-0", true, false), Gpu(1, "GPU-n1-1", false, true),
            Gpu(2, "GPU-n1-2", false, false)}}},
         tokens["node"].secret);
    Must("POST", "/api/v1/nodes/register",
         {{"node_id", "n2"}, {"gpus", {Gpu(0, "GPU-n2-0", false, false)}}},
         tokens["fleet"].secret);
    const std::string user = tokens["user"].secret;
    Must("POST", "/api/v1/tasks", {{"name", "a"}, {"gpu_memory_mb", 4096}},
         user);
    Must("POST", "/api/v1/tasks",
         {{"name", "b"}, {"gpu_memory_mb", 8192}, {"gpu_compute_ratio", 0.5}},
         user);
    Must("POST", "/api/v1/tasks", {{"name", "c"}, {"gpu_required", 1}}, user);
    if (!cp->BindPendingOnce().ok()) Fail("bind");
    Must("POST", "/api/v1/slices",
         {{"tenant", "t3"}, {"gpu_memory_mb", 1024}, {"reason", "fuzz"}});
    Must("POST", "/api/v1/sharing-approvals",
         {{"tenant_a", "t1"},
          {"tenant_b", "t3"},
          {"reason", "fuzz"},
          {"ttl_s", 3600}});
  }
};

World* g_world = nullptr;

void CheckResponse(const std::string& request,
                   const hf::api::LocalResponse& r) {
  const auto fail = [&](const std::string& what) {
    Fail(what + "\n  request: " + request.substr(0, 2000) + "\n  response " +
         std::to_string(r.status) + ": " + r.body.substr(0, 2000));
  };
  switch (r.status) {
    case 200:
    case 201:
    case 400:
    case 401:
    case 403:
    case 404:
    case 405:  // a path served with other methods (docs/API.md)
    case 409:
    case 413:
      break;
    case 500:
      fail("500 on outside input");
    default:
      fail("an undocumented status");
  }
  if (r.content_type.find("application/json") == std::string::npos) {
    if (r.status >= 400) fail("an error without a JSON body");
    return;
  }
  const json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) fail("a JSON reply that does not parse");
  if (r.status < 400) return;
  if (!body.is_object() || !body.contains("error") ||
      !body["error"].is_string() || !body.contains("message") ||
      !body["message"].is_string()) {
    fail("an error body without error and message");
  }
  static const std::map<int, std::string> kCodes = {
      {400, "invalid_argument"},   {401, "unauthenticated"},
      {403, "permission_denied"},  {404, "not_found"},
      {405, "method_not_allowed"}, {409, "conflict"},
      {413, "payload_too_large"}};
  if (body["error"] != kCodes.at(r.status)) fail("error code and status");
  if (body.contains("field") && !body["field"].is_string()) {
    fail("a field that is not a string");
  }
}

std::string Bearer(World& w, std::string_view who) {
  if (who == "admin") return w.admin;
  if (who == "none") return "";
  auto it = w.tokens.find(std::string(who));
  return it != w.tokens.end() ? it->second.secret : std::string(who);
}

// Splits the input at lines "%%".
std::vector<std::string_view> Requests(std::string_view input) {
  std::vector<std::string_view> out;
  while (static_cast<int>(out.size()) < kMaxRequests) {
    const auto sep = input.find("\n%%\n");
    out.push_back(input.substr(0, sep));
    if (sep == std::string_view::npos) break;
    input.remove_prefix(sep + 4);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  spdlog::set_level(spdlog::level::off);
  g_world = new World();  // lives as long as the process
  g_world->SetUp();
  std::atexit([] {
    delete g_world;
    g_world = nullptr;
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  World& w = *g_world;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (std::string_view request : Requests(input)) {
    const auto eol = request.find('\n');
    const std::string_view line = request.substr(0, eol);
    const std::string body(eol == std::string_view::npos
                               ? std::string_view()
                               : request.substr(eol + 1));
    if (line == "bind") {
      (void)w.cp->BindPendingOnce();
      continue;
    }
    if (line == "gc") {
      (void)w.cp->RunGcOnce();
      continue;
    }
    if (line == "tick") {
      w.clock.Advance(61'000);
      continue;
    }
    const auto a = line.find(' ');
    const auto b = a == std::string_view::npos ? a : line.find(' ', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string method(line.substr(a + 1, b - a - 1));
    const std::string target(line.substr(b + 1));
    const auto r = w.Call(Bearer(w, line.substr(0, a)), method, target, body);
    CheckResponse(std::string(request), r);
  }
  w.clock.Advance(1000);
  const hf::Status consistent = w.cp->CheckLedgerMatchesStore();
  if (!consistent.ok()) {
    Fail("the ledger no longer equals the store: " + consistent.ToString());
  }
  w.KeepTokens();
  return 0;
}
