#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "common/strict_json.h"

namespace hf::sim {
namespace {

nlohmann::json StatJson(const Stat& s) {
  return {{"median", s.median}, {"p25", s.p25}, {"p75", s.p75}};
}

std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// The smallest of 1, 2, 2.5, 5 x 10^k that is >= v.
double NiceStep(double v) {
  const double base = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * base >= v) return m * base;
  }
  return 10 * base;
}

}  // namespace

std::string ToJson(const ExperimentResult& r) {
  nlohmann::json points = nlohmann::json::array();
  for (const Point& p : r.points) {
    points.push_back({{"x", p.x},
                      {"unallocated_pct", StatJson(p.unallocated_pct)},
                      {"frag_amount_pct", StatJson(p.frag_amount_pct)},
                      {"frag_ratio_pct", StatJson(p.frag_ratio_pct)}});
  }
  nlohmann::json doc = {{"policy", r.policy},
                        {"seeds", r.seeds},
                        {"inflate", r.inflate},
                        {"nodes", r.nodes_file},
                        {"pods", r.pods_file},
                        {"capacity_gpus", r.capacity_milli / 1000.0},
                        {"attempts", r.attempts},
                        {"placed", r.placed},
                        {"decisions_per_second", r.decisions_per_second},
                        {"points", points}};
  return doc.dump(2) + "\n";
}

std::string ToSvg(const ExperimentResult& result) {
  return ToSvg(std::vector<ExperimentResult>{result});
}

std::string ToSvg(const std::vector<ExperimentResult>& results, int min_x) {
  struct Panel {
    const char* title;
    Stat Point::*stat;
  };
  const Panel panels[] = {
      {"Unallocated GPU (%)", &Point::unallocated_pct},
      {"Fragment amount (% of capacity)", &Point::frag_amount_pct},
      {"Fragment ratio (% of idle GPU)", &Point::frag_ratio_pct}};
  static const char* kColours[] = {"#4e79a7", "#f28e2b", "#e15759",
                                   "#76b7b2", "#59a14f", "#edc948",
                                   "#b07aa1", "#ff9da7", "#9c755f"};
  const int width = 420, height = 300, left = 50, top = 40, plot_w = 340,
            plot_h = 210;
  int max_x = min_x + 1;
  for (const auto& r : results) {
    if (!r.points.empty()) max_x = std::max(max_x, r.points.back().x);
  }
  const auto in_range = [&](const Point& p) { return p.x >= min_x; };
  std::string policies;
  std::size_t seeds = 0;
  for (const auto& r : results) {
    policies += (policies.empty() ? "" : ", ") + r.policy;
    seeds = std::max(seeds, r.seeds.size());
  }
  const int legend_h = 16 * static_cast<int>(results.size());
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << 3 * width
      << "' height='" << height + 30 + legend_h
      << "' font-family='sans-serif' font-size='11'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='10' y='18' font-size='14'>hf-sim: " << policies << "; "
      << seeds << " seeds, median and 25-75% range</text>\n";
  for (int i = 0; i < 3; ++i) {
    const Panel& panel = panels[i];
    double y_max = 1;
    for (const auto& r : results) {
      for (const Point& p : r.points) {
        if (in_range(p)) y_max = std::max(y_max, (p.*panel.stat).p75);
      }
    }
    y_max = 4 * NiceStep(y_max / 4);
    const int ox = i * width + left, oy = top;
    const auto X = [&](double x) {
      return ox + plot_w * (x - min_x) / (max_x - min_x);
    };
    const auto Y = [&](double y) { return oy + plot_h * (1 - y / y_max); };
    svg << "<g>\n<text x='" << ox << "' y='" << oy - 8 << "' font-size='12'>"
        << panel.title << "</text>\n";
    svg << "<rect x='" << ox << "' y='" << oy << "' width='" << plot_w
        << "' height='" << plot_h << "' fill='none' stroke='#888'/>\n";
    for (int t = 0; t <= 4; ++t) {
      const double yv = y_max * t / 4;
      svg << "<line x1='" << ox << "' x2='" << ox + plot_w << "' y1='" << Y(yv)
          << "' y2='" << Y(yv) << "' stroke='#eee'/>"
          << "<text x='" << ox - 6 << "' y='" << Y(yv) + 4
          << "' text-anchor='end'>" << Fmt(yv) << "</text>\n";
    }
    const int step = (max_x - min_x) > 60 ? 10 : 5;
    for (int xv = min_x; xv <= max_x; xv += step) {
      svg << "<text x='" << X(xv) << "' y='" << oy + plot_h + 14
          << "' text-anchor='middle'>" << xv << "</text>\n";
    }
    svg << "<text x='" << ox + plot_w / 2 << "' y='" << oy + plot_h + 30
        << "' text-anchor='middle'>arrived GPU request (% of capacity)"
        << "</text>\n";
    for (std::size_t k = 0; k < results.size(); ++k) {
      const auto& points = results[k].points;
      const char* colour = kColours[k % std::size(kColours)];
      std::ostringstream band, line;
      for (const Point& p : points) {
        if (!in_range(p)) continue;
        band << X(p.x) << "," << Y((p.*panel.stat).p75) << " ";
        line << X(p.x) << "," << Y((p.*panel.stat).median) << " ";
      }
      for (auto it = points.rbegin(); it != points.rend(); ++it) {
        if (!in_range(*it)) continue;
        band << X(it->x) << "," << Y(((*it).*panel.stat).p25) << " ";
      }
      svg << "<polygon points='" << band.str() << "' fill='" << colour
          << "' fill-opacity='0.2' stroke='none'/>\n"
          << "<polyline fill='none' stroke='" << colour
          << "' stroke-width='1.5' points='" << line.str() << "'/>\n";
    }
    svg << "</g>\n";
  }
  for (std::size_t k = 0; k < results.size(); ++k) {
    const int y = height + 30 + 16 * static_cast<int>(k) - 4;
    svg << "<rect x='" << left << "' y='" << y - 9 << "' width='14' "
        << "height='10' fill='" << kColours[k % std::size(kColours)]
        << "'/><text x='" << left + 20 << "' y='" << y << "'>"
        << results[k].policy << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

StatusOr<ExperimentResult> FromJson(const std::string& text,
                                    const std::string& source) {
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(source + ": not an hf-sim result: " + why);
  };
  StrictJsonOptions options;
  options.top_level = "(document)";
  auto parsed = ParseStrictJson(text, options);
  if (!parsed.ok()) {
    return bad(parsed.status().field() + ": " + parsed.status().message());
  }
  const nlohmann::json& doc = *parsed;
  try {
    ExperimentResult r;
    r.policy = doc.at("policy").get<std::string>();
    r.seeds = doc.at("seeds").get<std::vector<std::uint64_t>>();
    r.decisions_per_second = doc.value("decisions_per_second", 0.0);
    // Numbers are checked before they are converted (a double beyond int's
    // range is undefined as an int) and drawn (x is a loop bound).
    const auto number = [&](const nlohmann::json& j, const char* name) {
      const nlohmann::json& v = j.at(name);
      if (!v.is_number() || !std::isfinite(v.get<double>())) {
        throw std::invalid_argument(std::string(name) + " must be a number");
      }
      return v.get<double>();
    };
    const auto stat = [&](const nlohmann::json& j) {
      return Stat{number(j, "median"), number(j, "p25"), number(j, "p75")};
    };
    for (const auto& p : doc.at("points")) {
      Point point;
      const nlohmann::json& x = p.at("x");
      if (!x.is_number_integer() || x.get<std::int64_t>() < 0 ||
          x.get<std::int64_t>() > 1000 ||
          (!r.points.empty() && x.get<std::int64_t>() <= r.points.back().x)) {
        return bad("points[" + std::to_string(r.points.size()) +
                   "].x must be an integer 0..1000, ascending");
      }
      point.x = static_cast<int>(x.get<std::int64_t>());
      point.unallocated_pct = stat(p.at("unallocated_pct"));
      point.frag_amount_pct = stat(p.at("frag_amount_pct"));
      point.frag_ratio_pct = stat(p.at("frag_ratio_pct"));
      r.points.push_back(point);
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  } catch (const std::invalid_argument& e) {
    return bad(e.what());
  }
}

}  // namespace hf::sim
