// Prometheus exposition for hf-server and hf-agent (docs/METRICS.md).
//
// Everything is rendered by prometheus-cpp's TextSerializer: counters and
// histograms live in a prometheus::Registry and are updated where the event
// happens; gauges that describe state (slices, GPUs, nodes) are built at
// scrape time as prometheus::MetricFamily values by a Source. Nothing here
// writes exposition text by hand.
//
// Thread-safety: Exposition::Render may run concurrently with the updates
// of its registries; Sources must be safe to call from any thread.
#pragma once

#include <httplib.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace hf::metrics {

using Families = std::vector<prometheus::MetricFamily>;
using Labels = std::map<std::string, std::string>;

// The Content-Type of the text exposition format.
inline constexpr char kContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";

// A family of gauges (or counters) built at scrape time.
class FamilyBuilder {
 public:
  FamilyBuilder(std::string name, std::string help,
                prometheus::MetricType type = prometheus::MetricType::Gauge);
  FamilyBuilder& Add(const Labels& labels, double value);
  // The family; an empty one is still listed (HELP and TYPE only).
  prometheus::MetricFamily Take() { return std::move(family_); }

 private:
  prometheus::MetricFamily family_;
};

// Seconds buckets from 1 ms to about 1 min (latencies of binds, HTTP
// requests, commits, MIG commands).
std::vector<double> SecondsBuckets();

class Exposition {
 public:
  using Source = std::function<Families()>;
  void AddRegistry(std::shared_ptr<prometheus::Registry> registry);
  void AddSource(Source source);
  // Every registry's and source's families, serialised.
  std::string Render() const;

 private:
  std::vector<std::shared_ptr<prometheus::Registry>> registries_;
  std::vector<Source> sources_;
};

// "HOST:PORT" (":PORT" is 0.0.0.0) into its parts; InvalidArgument naming
// `flag` otherwise.
StatusOr<std::pair<std::string, int>> ParseListen(const std::string& address,
                                                  const std::string& flag);

// GET /metrics on an address of its own (the `--metrics-listen` of both
// binaries): no token, so whoever can reach the address reads everything;
// it is meant for a port only the monitoring network reaches.
class MetricsListener {
 public:
  explicit MetricsListener(std::function<std::string()> render);
  ~MetricsListener();
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;

  // Binds (port 0: any free port) and serves on a thread of its own.
  Status Start(const std::string& host, int port);
  int port() const { return port_; }
  void Stop();

 private:
  std::function<std::string()> render_;
  httplib::Server http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace hf::metrics
