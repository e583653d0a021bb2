// Forwarding a request from a follower hf-server instance to the leader
// (several instances on one database, issue 8). A follower serves what the
// database alone can answer; a request that needs the ledger is sent to the
// leader's advertised URL as it came (method, path and query, headers
// including Authorization, body) and the leader's reply is passed back
// verbatim. docs/OPERATIONS.md ("Several instances") has the table of which
// routes go where.
//
// Thread-safety: pure functions; each send uses its own connection.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

namespace hf::api {

// Marks a forwarded request (its value: the forwarding instance's id). An
// instance that is not the leader answers such a request with 503 instead
// of forwarding it again, so a stale view of who leads cannot loop.
inline constexpr const char* kForwardedHeader = "X-HeteroFlow-Forwarded-By";

struct ForwardTarget {
  std::string leader_id;
  std::string leader_url;  // "http://host:port"
  std::string self_id;
};

struct ForwardOptions {
  // Sends of one GET or POST at most: a send whose reply does not come back
  // (connection refused, reset, timed out) is made again, and so is a POST
  // the leader answers 409 + Retry-After (its first send is still being
  // carried out there). Other methods are sent once.
  int attempts = 3;
  std::chrono::milliseconds backoff{200};  // before the second; then doubled
  std::chrono::milliseconds connect_timeout{2'000};
  std::chrono::milliseconds read_timeout{30'000};
};

// Sends `req` to the leader and copies its reply into `res`. A POST goes
// with the client's Idempotency-Key, or one made up here when it has none
// (idempotency.h, kForwardedKeyPrefix), the same on every send, so a reply
// lost between this instance and the leader is answered from the leader's
// record instead of being carried out twice. When the leader cannot be
// reached after every attempt: 503 with a JSON error naming it.
void ForwardToLeader(const httplib::Request& req, const ForwardTarget& target,
                     httplib::Response& res,
                     const ForwardOptions& options = {});

// The 503 JSON error a follower answers when it cannot forward: `why`
// explains (no leader yet, leader unreachable, ...).
void WriteNoLeader(httplib::Response& res, const std::string& why);

}  // namespace hf::api
