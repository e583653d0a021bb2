// Forwarding a request from a follower hf-server instance to the leader
// (several instances on one database, issue 8). A follower serves what the
// database alone can answer; a request that needs the ledger is sent to the
// leader's advertised URL as it came (method, path and query, headers
// including Authorization, body) and the leader's reply is passed back
// verbatim. docs/OPERATIONS.md ("Several instances") has the table of which
// routes go where.
//
// Thread-safety: pure functions; each call uses its own connection.
#pragma once

#include <httplib.h>

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

// Sends `req` to the leader and copies its reply into `res`. When the
// leader cannot be reached: 503 with a JSON error naming it.
void ForwardToLeader(const httplib::Request& req, const ForwardTarget& target,
                     httplib::Response& res);

// The 503 JSON error a follower answers when it cannot forward: `why`
// explains (no leader yet, leader unreachable, ...).
void WriteNoLeader(httplib::Response& res, const std::string& why);

}  // namespace hf::api
