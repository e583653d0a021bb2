#include "cli/request.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

namespace hf::cli {

std::string Request::Target() const {
  std::string target = path;
  char separator = '?';
  for (const auto& [key, value] : query) {
    target += separator;
    target += UrlEncode(key);
    target += '=';
    target += UrlEncode(value);
    separator = '&';
  }
  return target;
}

void Request::SetQuery(const std::string& key, std::string value) {
  auto it = std::find_if(query.begin(), query.end(),
                         [&](const auto& entry) { return entry.first == key; });
  if (it == query.end()) {
    query.emplace_back(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
}

std::string UrlEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    const bool unreserved = (byte >= 'A' && byte <= 'Z') ||
                            (byte >= 'a' && byte <= 'z') ||
                            (byte >= '0' && byte <= '9') || byte == '-' ||
                            byte == '.' || byte == '_' || byte == '~';
    if (unreserved) {
      out += c;
    } else {
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 0x0F];
    }
  }
  return out;
}

std::string ApiPath(std::initializer_list<std::string_view> segments) {
  std::string path = "/api/v1";
  for (std::string_view segment : segments) {
    path += '/';
    path += UrlEncode(segment);
  }
  return path;
}

StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    std::string_view flag, const std::vector<std::string>& entries) {
  std::map<std::string, std::string> out;
  for (const std::string& entry : entries) {
    const std::string quoted =
        std::string(flag) + " \"" + entry + "\": ";  // --env "FOO": ...
    const size_t equals = entry.find('=');
    if (equals == std::string::npos) {
      return Status::InvalidArgument(
          quoted + "expected KEY=VALUE (use KEY= for an empty value)");
    }
    if (equals == 0) return Status::InvalidArgument(quoted + "empty KEY");
    std::string key = entry.substr(0, equals);
    if (out.contains(key)) {
      std::string message = quoted;
      message.append("KEY \"").append(key).append("\" is given more than once");
      return Status::InvalidArgument(std::move(message));
    }
    out.emplace(std::move(key), entry.substr(equals + 1));
  }
  return out;
}

namespace {

// cpp-httplib reports a refused connection and an unknown host name alike
// (Error::Connection); a fresh lookup tells the two apart for the message.
std::string ConnectionFailureReason(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) freeaddrinfo(found);
  if (rc != 0) return "cannot resolve host name \"" + host + "\"";
  return "connection refused";
}

std::string TransportFailureReason(httplib::Error error,
                                   const std::string& host) {
  switch (error) {
    case httplib::Error::Connection:
      return ConnectionFailureReason(host);
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "the connection closed before a full reply arrived";
    case httplib::Error::Write:
      return "the connection closed while sending the request";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLLoadingCerts:
      return "cannot load the system's CA certificates";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate was not accepted";
    default:
      return "HTTP client error: " + httplib::to_string(error);
  }
}

class HttpTransport final : public Transport {
 public:
  explicit HttpTransport(const Settings& settings)
      : server_(settings.server),
        token_(settings.token),
        client_(server_.scheme + "://" + server_.authority) {
    // httplib's default waits 300 s for a connection; a person is waiting.
    client_.set_connection_timeout(10, 0);
    client_.set_read_timeout(60, 0);
    client_.set_write_timeout(60, 0);
    client_.set_url_encode(false);  // Request::Target() already encodes
    client_.set_keep_alive(true);   // --all sends several requests
  }

  StatusOr<HttpResponse> Send(const Request& request) override {
    httplib::Request out;
    out.method = request.method;
    out.path = server_.base_path + request.Target();
    out.set_header("Accept", "application/json");
    out.set_header("User-Agent", "hfctl/0.1");
    if (!token_.empty()) out.set_header("Authorization", "Bearer " + token_);
    for (const auto& [name, value] : request.headers) {
      out.set_header(name, value);
    }
    if (request.body) {
      out.set_header("Content-Type", "application/json");
      out.body = *request.body;
    }
    httplib::Result result = client_.send(out);
    if (!result) {
      return Status::Unavailable(
          TransportFailureReason(result.error(), server_.host));
    }
    return HttpResponse{result->status, result->body};
  }

 private:
  const ServerUrl server_;
  const std::string token_;
  httplib::Client client_;
};

}  // namespace

std::unique_ptr<Transport> MakeHttpTransport(const Settings& settings) {
  return std::make_unique<HttpTransport>(settings);
}

}  // namespace hf::cli
