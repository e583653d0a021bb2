#include "metrics/metrics.h"

#include <prometheus/text_serializer.h>

#include <charconv>
#include <sstream>

namespace hf::metrics {

FamilyBuilder::FamilyBuilder(std::string name, std::string help,
                             prometheus::MetricType type) {
  family_.name = std::move(name);
  family_.help = std::move(help);
  family_.type = type;
}

FamilyBuilder& FamilyBuilder::Add(const Labels& labels, double value) {
  prometheus::ClientMetric m;
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  if (family_.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  family_.metric.push_back(std::move(m));
  return *this;
}

std::vector<double> SecondsBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5,   1,      2.5,   5,    10,    30,   60};
}

void Exposition::AddRegistry(std::shared_ptr<prometheus::Registry> registry) {
  registries_.push_back(std::move(registry));
}

void Exposition::AddSource(Source source) {
  sources_.push_back(std::move(source));
}

std::string Exposition::Render() const {
  Families all;
  for (const auto& r : registries_) {
    Families f = r->Collect();
    all.insert(all.end(), std::make_move_iterator(f.begin()),
               std::make_move_iterator(f.end()));
  }
  for (const Source& s : sources_) {
    Families f = s();
    all.insert(all.end(), std::make_move_iterator(f.begin()),
               std::make_move_iterator(f.end()));
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, all);
  return out.str();
}

StatusOr<std::pair<std::string, int>> ParseListen(const std::string& address,
                                                  const std::string& flag) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("must be HOST:PORT, got '" + address + "'",
                                   flag);
  }
  std::string host = address.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = -1;
  const std::string p = address.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || ptr != p.data() + p.size() || port < 0 ||
      port > 65535) {
    return Status::InvalidArgument("has no valid port: '" + address + "'",
                                   flag);
  }
  return std::make_pair(host, port);
}

MetricsListener::MetricsListener(std::function<std::string()> render)
    : render_(std::move(render)) {
  http_.new_task_queue = [] { return new httplib::ThreadPool(2); };
  http_.Get("/metrics",
            [this](const httplib::Request&, httplib::Response& res) {
              res.set_content(render_(), kContentType);
            });
}

MetricsListener::~MetricsListener() { Stop(); }

Status MetricsListener::Start(const std::string& host, int port) {
  if (port == 0) {
    port_ = http_.bind_to_any_port(host);
    if (port_ <= 0) return Status::Unavailable("cannot bind " + host);
  } else {
    if (!http_.bind_to_port(host, port)) {
      return Status::Unavailable("cannot listen on " + host + ":" +
                                 std::to_string(port) + " for metrics");
    }
    port_ = port;
  }
  thread_ = std::thread([this] { http_.listen_after_bind(); });
  return Status::Ok();
}

void MetricsListener::Stop() {
  http_.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace hf::metrics
