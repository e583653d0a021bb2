#include "agent/server_client.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <utility>

namespace hf::agent {

namespace {

// A node name or id goes into a path as it is: names are [a-z0-9._-].
std::string NodePath(const std::string& node, std::string_view rest) {
  return "/api/v1/nodes/" + node + std::string(rest);
}

}  // namespace

Status StatusFromHttp(int status, const json& body, const std::string& what) {
  std::string message = what + ": HTTP " + std::to_string(status);
  std::string field;
  if (body.is_object()) {
    if (body.contains("message") && body["message"].is_string()) {
      message += ": " + body["message"].get<std::string>();
    }
    if (body.contains("field") && body["field"].is_string()) {
      field = body["field"].get<std::string>();
    }
  }
  switch (status) {
    case 400:
    case 413:
      return Status::InvalidArgument(message, field);
    case 401:
      return Status::Unauthenticated(message);
    case 403:
      return Status::PermissionDenied(message);
    case 404:
      return Status::NotFound(message);
    case 409:
      return Status::FailedPrecondition(message);
    default:
      return Status::Unavailable(message);
  }
}

namespace {

// A client of one instance, from "http://HOST:PORT".
StatusOr<std::unique_ptr<httplib::Client>> ClientFor(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme) || url.size() == kScheme.size()) {
    return Status::InvalidArgument(
        "must be http://HOST:PORT, or several separated by commas (got '" +
            url + "')",
        "server");
  }
  std::string host = url.substr(kScheme.size());
  while (!host.empty() && host.back() == '/') host.pop_back();
  if (host.find('/') != std::string::npos) {
    return Status::InvalidArgument(
        "must be http://HOST:PORT without a path (got '" + url + "')",
        "server");
  }
  auto client = std::make_unique<httplib::Client>(std::string(kScheme) + host);
  if (!client->is_valid()) {
    return Status::InvalidArgument("is not a usable URL: " + url, "server");
  }
  client->set_connection_timeout(5, 0);
  client->set_read_timeout(30, 0);
  client->set_write_timeout(30, 0);
  client->set_keep_alive(true);
  return client;
}

}  // namespace

std::string EncodeBase64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

StatusOr<std::unique_ptr<HttpTransport>> HttpTransport::Create(
    const std::string& server) {
  std::vector<std::unique_ptr<httplib::Client>> clients;
  std::vector<std::string> urls;
  std::size_t start = 0;
  do {
    const std::size_t comma = server.find(',', start);
    std::string one = server.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? server.size() + 1 : comma + 1;
    auto client = ClientFor(one);
    if (!client.ok()) return client.status();
    clients.push_back(std::move(*client));
    urls.push_back(std::move(one));
  } while (start <= server.size());
  return std::unique_ptr<HttpTransport>(
      new HttpTransport(std::move(clients), std::move(urls)));
}

HttpTransport::HttpTransport(
    std::vector<std::unique_ptr<httplib::Client>> clients,
    std::vector<std::string> urls)
    : clients_(std::move(clients)), urls_(std::move(urls)) {}

HttpTransport::~HttpTransport() = default;

void HttpTransport::Interrupt() {
  for (const auto& client : clients_) client->stop();
}

StatusOr<WireReply> HttpTransport::RoundTrip(const WireRequest& request) {
  const std::string what = request.method + " " + request.path;
  const httplib::Headers headers = {
      {"Authorization", "Bearer " + request.token}};
  std::string unreachable;
  for (std::size_t tried = 0; tried < clients_.size(); ++tried) {
    httplib::Client& client = *clients_[current_];
    httplib::Result result =
        request.method == "GET" ? client.Get(request.path, headers)
                                : client.Post(request.path, headers,
                                              request.body, "application/json");
    if (!result) {
      const std::string why =
          urls_[current_] + ": " + httplib::to_string(result.error());
      const bool never_sent = result.error() == httplib::Error::Connection;
      if (clients_.size() > 1) {
        spdlog::warn("control plane instance {}: {}", urls_[current_],
                     never_sent ? "unreachable, trying the next one"
                                : "reply lost; the next call goes to the "
                                  "next instance");
      }
      current_ = (current_ + 1) % clients_.size();
      if (!never_sent) {
        std::string message = what;
        message += " to ";
        message += why;
        return Status::Unavailable(message);
      }
      if (!unreachable.empty()) unreachable += "; ";
      unreachable += why;
      continue;
    }
    if (result->status >= 502 && result->status <= 504) {
      // An instance that cannot serve now (a follower without a leader):
      // the agent's next call tries another one.
      current_ = (current_ + 1) % clients_.size();
    }
    return WireReply{result->status, result->body};
  }
  return Status::Unavailable(what + ": no control plane instance reachable (" +
                             unreachable + ")");
}

StatusOr<std::unique_ptr<ServerClient>> ServerClient::Create(
    const std::string& server, std::string token) {
  if (token.empty()) {
    return Status::InvalidArgument("the node token is empty", "token_file");
  }
  auto transport = HttpTransport::Create(server);
  if (!transport.ok()) return transport.status();
  return std::make_unique<ServerClient>(std::move(*transport),
                                        std::move(token));
}

ServerClient::ServerClient(std::unique_ptr<Transport> transport,
                           std::string token)
    : transport_(std::move(transport)), token_(std::move(token)) {}

ServerClient::~ServerClient() = default;

StatusOr<json> ServerClient::Send(const std::string& method,
                                  const std::string& path, const json* body) {
  const std::string what = method + " " + path;
  // Invalid UTF-8 (a name or message read off the machine) is replaced,
  // never a throw.
  WireRequest request{
      method, path,
      body ? body->dump(-1, ' ', false, json::error_handler_t::replace)
           : std::string("{}"),
      token_};
  auto reply = transport_->RoundTrip(request);
  if (!reply.ok()) return reply.status();
  json parsed = json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
  if (reply->status < 200 || reply->status >= 300) {
    return StatusFromHttp(reply->status, parsed, what);
  }
  if (parsed.is_discarded()) {
    return Status::Unavailable(what + ": the reply is not JSON");
  }
  // Every node endpoint answers an object; anything else is not a reply
  // the agent can act on.
  if (!parsed.is_object()) {
    return Status::Unavailable(what + ": the reply is not a JSON object");
  }
  return parsed;
}

StatusOr<json> ServerClient::Register(const json& report) {
  return Send("POST", "/api/v1/nodes/register", &report);
}

StatusOr<json> ServerClient::Heartbeat(const std::string& node,
                                       const json& report) {
  return Send("POST", NodePath(node, "/heartbeat"), &report);
}

StatusOr<json> ServerClient::Assignments(const std::string& node) {
  return Send("GET", NodePath(node, "/assignments"), nullptr);
}

StatusOr<json> ServerClient::WaitForWork(const std::string& node,
                                         std::uint64_t after, int wait_s) {
  return Send("GET",
              NodePath(node, "/work?after=" + std::to_string(after) +
                                 "&wait_s=" + std::to_string(wait_s)),
              nullptr);
}

StatusOr<json> ServerClient::ReportTaskStates(const std::string& node,
                                              const json& states) {
  const json body = {{"states", states}};
  return Send("POST", NodePath(node, "/task-states"), &body);
}

StatusOr<json> ServerClient::ClaimSliceRequests(const std::string& node) {
  return Send("POST", NodePath(node, "/slice-requests/claim"), nullptr);
}

StatusOr<json> ServerClient::ReportSliceRequest(std::int64_t id,
                                                const json& result) {
  return Send("POST",
              "/api/v1/slice-requests/" + std::to_string(id) + "/result",
              &result);
}

StatusOr<std::int64_t> ServerClient::ShipLog(const std::string& node,
                                             std::int64_t task_id,
                                             std::int64_t offset,
                                             std::string_view data) {
  const json body = {{"offset", offset}, {"data", EncodeBase64(data)}};
  auto reply = Send(
      "POST", NodePath(node, "/tasks/" + std::to_string(task_id) + "/logs"),
      &body);
  if (!reply.ok()) return reply.status();
  if (!reply->contains("size") || !(*reply)["size"].is_number_integer()) {
    return Status::Unavailable("log reply without a size");
  }
  return (*reply)["size"].get<std::int64_t>();
}

}  // namespace hf::agent
