// ForwardToLeader against a real leader (ApiServer on a ControlPlane and a
// SQLite store) behind a TCP proxy that loses the leader's replies: the
// request reaches the leader and is carried out, the reply never reaches
// the follower. The follower's own retry, with the same Idempotency-Key,
// must get the leader's recorded reply, and nothing may happen twice.
#include "api/forward.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "api/http_api.h"
#include "common/clock.h"
#include "server/control_plane.h"
#include "store/store.h"
#include "store/testing/temp_store.h"

namespace hf::api {
namespace {

using nlohmann::json;

constexpr const char* kAdminSecret = "admin-secret-for-the-forward-test";

int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd, 16) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

// A TCP proxy to 127.0.0.1:upstream. The first `drop` connections reach
// the leader, but what the leader answers on them is read and thrown away
// and the follower's side is closed: a reply lost on the way back. Every
// request that passes is kept (its raw bytes) for the test to look at.
class ReplyLosingProxy {
 public:
  ReplyLosingProxy(int upstream, int drop) : upstream_(upstream), drop_(drop) {
    listen_fd_ = Listen(&port_);
    EXPECT_GE(listen_fd_, 0) << "proxy: cannot listen";
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~ReplyLosingProxy() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (std::thread& t : pumps_) t.join();
  }
  int port() const { return port_; }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void AcceptLoop() {
    int accepted = 0;
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const bool lose = accepted++ < drop_;
      std::lock_guard lock(mu_);
      const std::size_t slot = requests_.size();
      requests_.emplace_back();
      pumps_.emplace_back(
          [this, client, lose, slot] { Pump(client, lose, slot); });
    }
  }
  void Pump(int client, bool lose, std::size_t slot) {
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(upstream_));
    if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(server);
      close(client);
      return;
    }
    std::array<char, 16384> buf{};
    bool done = false;
    while (!stop_ && !done) {
      std::array<pollfd, 2> p{{{client, POLLIN, 0}, {server, POLLIN, 0}}};
      if (poll(p.data(), 2, 50) <= 0) continue;
      for (int i = 0; i < 2 && !done; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t got = read(p[i].fd, buf.data(), buf.size());
        if (got <= 0) {
          done = true;
          break;
        }
        if (i == 0) {
          {
            std::lock_guard lock(mu_);
            requests_[slot].append(buf.data(), static_cast<std::size_t>(got));
          }
          if (write(server, buf.data(), got) != got) done = true;
        } else {
          // lose: the leader answered; the follower never hears it.
          done = lose || write(client, buf.data(), got) != got;
        }
      }
    }
    close(server);
    close(client);
  }

  const int upstream_;
  const int drop_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::thread> pumps_;     // GUARDED_BY(mu_)
  std::vector<std::string> requests_;  // GUARDED_BY(mu_)
};

// The value of header `name` in a raw HTTP request ("" when absent).
std::string HeaderOf(const std::string& request, const std::string& name) {
  const std::string needle = "\r\n" + name + ": ";
  const auto at = request.find(needle);
  if (at == std::string::npos) return "";
  const auto begin = at + needle.size();
  return request.substr(begin, request.find("\r\n", begin) - begin);
}

class ForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    auto cp = server::ControlPlane::Create(store_.get(), &clock_, {});
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    cp_ = std::move(*cp);
    ASSERT_TRUE(cp_->BootstrapAdmin(std::string(kAdminSecret)).ok());
    auto admin = cp_->Authenticate(kAdminSecret);
    ASSERT_TRUE(admin.ok());
    ASSERT_TRUE(cp_->CreateTenant(*admin, "t1", std::nullopt).ok());
    server::NodeReport node;
    node.name = "n1";
    server::GpuReport gpu;
    gpu.uuid = "GPU-0";
    gpu.model = "NVIDIA A100-SXM4-80GB";
    gpu.memory_mib = 81920;
    gpu.cc_major = 8;
    node.gpus.push_back(gpu);
    ASSERT_TRUE(cp_->RegisterNode(*admin, node).ok());
    ApiOptions options;
    options.threads = 4;
    leader_ = std::make_unique<ApiServer>(cp_.get(), &clock_, options);
    ASSERT_TRUE(leader_->Bind("127.0.0.1", 0).ok());
    serving_ = std::thread([this] { (void)leader_->Serve(); });
  }
  void TearDown() override {
    if (leader_) leader_->Stop();
    if (serving_.joinable()) serving_.join();
    leader_.reset();
    cp_.reset();
    store_.reset();
  }

  // What a follower forwards: an operator reservation (a leader-only POST
  // whose repeat would be a second slice).
  static httplib::Request Reservation() {
    httplib::Request req;
    req.method = "POST";
    req.path = "/api/v1/slices";
    req.target = "/api/v1/slices";
    req.body =
        R"({"tenant": "t1", "gpu_memory_mb": 1024, "gpu_compute_ratio": 0.1})";
    req.headers.emplace("Authorization", std::string("Bearer ") + kAdminSecret);
    req.headers.emplace("Content-Type", "application/json");
    return req;
  }

  httplib::Response Forward(const httplib::Request& req, int proxy_port) const {
    ForwardOptions options;
    options.backoff = std::chrono::milliseconds(10);
    options.read_timeout = std::chrono::milliseconds(5'000);
    httplib::Response res;
    ForwardToLeader(
        req,
        ForwardTarget{"leader",
                      "http://127.0.0.1:" + std::to_string(proxy_port),
                      "follower"},
        res, options);
    return res;
  }

  int LiveSlices() const {
    int n = 0;
    EXPECT_TRUE(store_
                    ->Read([&](store::Txn& txn) -> Status {
                      store::SliceFilter f;
                      f.live_only = true;
                      f.limit = 100;
                      auto rows = txn.ListSlices(f);
                      if (!rows.ok()) return rows.status();
                      n = static_cast<int>(rows->size());
                      return Status::Ok();
                    })
                    .ok());
    return n;
  }

  SystemClock clock_;
  store::sqlite_testing::TempDir dir_{"hf-forward-test"};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<server::ControlPlane> cp_;
  std::unique_ptr<ApiServer> leader_;
  std::thread serving_;
};

// Issue 14: the follower answered 503 "retry" when the leader's reply was
// lost, and the client's retry made a second slice.
TEST_F(ForwardTest, ALostReplyIsRetriedWithOneKeyAndNothingHappensTwice) {
  ReplyLosingProxy proxy(leader_->port(), /*drop=*/1);
  const httplib::Response res = Forward(Reservation(), proxy.port());
  EXPECT_EQ(res.status, 201) << res.body;
  EXPECT_EQ(LiveSlices(), 1);
  const std::vector<std::string> sent = proxy.requests();
  ASSERT_EQ(sent.size(), 2u);
  const std::string key = HeaderOf(sent[0], "Idempotency-Key");
  EXPECT_TRUE(key.starts_with(kForwardedKeyPrefix)) << sent[0];
  EXPECT_EQ(HeaderOf(sent[1], "Idempotency-Key"), key) << sent[1];
  EXPECT_EQ(res.get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ(HeaderOf(sent[1], "X-HeteroFlow-Forwarded-By"), "follower");
}

TEST_F(ForwardTest, TheClientsOwnKeyIsForwardedAndKept) {
  ReplyLosingProxy proxy(leader_->port(), /*drop=*/1);
  httplib::Request req = Reservation();
  req.headers.emplace("Idempotency-Key", "client-key-1");
  const httplib::Response res = Forward(req, proxy.port());
  EXPECT_EQ(res.status, 201) << res.body;
  const std::vector<std::string> sent = proxy.requests();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(HeaderOf(sent[0], "Idempotency-Key"), "client-key-1");
  EXPECT_EQ(HeaderOf(sent[1], "Idempotency-Key"), "client-key-1");
  // The client's own retry through the follower later: the same reply.
  ReplyLosingProxy clean(leader_->port(), /*drop=*/0);
  const httplib::Response again = Forward(req, clean.port());
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(json::parse(again.body)["id"], json::parse(res.body)["id"]);
  EXPECT_EQ(LiveSlices(), 1);
}

// Every reply lost: 503 after the bounded retries, and still one slice.
TEST_F(ForwardTest, RetriesAreBoundedAndStillDoItOnce) {
  ReplyLosingProxy proxy(leader_->port(), /*drop=*/100);
  const httplib::Response res = Forward(Reservation(), proxy.port());
  EXPECT_EQ(res.status, 503) << res.body;
  EXPECT_NE(res.body.find("after 3 attempts"), std::string::npos) << res.body;
  EXPECT_EQ(proxy.requests().size(), 3u);
  EXPECT_EQ(LiveSlices(), 1);
}

// Other methods than GET and POST are sent once, as before.
TEST_F(ForwardTest, OtherMethodsAreSentOnce) {
  ReplyLosingProxy proxy(leader_->port(), /*drop=*/100);
  httplib::Request req;
  req.method = "DELETE";
  req.path = req.target = "/api/v1/slices/1";
  req.headers.emplace("Authorization", std::string("Bearer ") + kAdminSecret);
  const httplib::Response res = Forward(req, proxy.port());
  EXPECT_EQ(res.status, 503) << res.body;
  EXPECT_EQ(proxy.requests().size(), 1u);
}

}  // namespace
}  // namespace hf::api
