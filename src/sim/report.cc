#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

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

std::string ToSvg(const ExperimentResult& r) {
  struct Panel {
    const char* title;
    Stat Point::*stat;
  };
  const Panel panels[] = {
      {"Unallocated GPU (%)", &Point::unallocated_pct},
      {"Fragment amount (% of capacity)", &Point::frag_amount_pct},
      {"Fragment ratio (% of idle GPU)", &Point::frag_ratio_pct}};
  const int width = 420, height = 300, left = 50, top = 40, plot_w = 340,
            plot_h = 210;
  const int max_x = r.points.empty() ? 130 : r.points.back().x;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << 3 * width
      << "' height='" << height + 30 << "' font-family='sans-serif' "
      << "font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='10' y='18' font-size='14'>hf-sim: policy " << r.policy
      << ", seeds " << r.seeds.size() << ", median and 25-75% range</text>\n";
  for (int i = 0; i < 3; ++i) {
    const Panel& panel = panels[i];
    double y_max = 1;
    for (const Point& p : r.points)
      y_max = std::max(y_max, (p.*panel.stat).p75);
    y_max = std::ceil(y_max / 5.0) * 5.0;
    const int ox = i * width + left, oy = top;
    const auto X = [&](double x) { return ox + plot_w * x / max_x; };
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
    for (int xv = 0; xv <= max_x; xv += 10) {
      svg << "<text x='" << X(xv) << "' y='" << oy + plot_h + 14
          << "' text-anchor='middle'>" << xv << "</text>\n";
    }
    svg << "<text x='" << ox + plot_w / 2 << "' y='" << oy + plot_h + 30
        << "' text-anchor='middle'>arrived GPU request (% of capacity)"
        << "</text>\n";
    // 25-75% band, then the median line.
    std::ostringstream band;
    for (const Point& p : r.points) {
      band << X(p.x) << "," << Y((p.*panel.stat).p75) << " ";
    }
    for (auto it = r.points.rbegin(); it != r.points.rend(); ++it) {
      band << X(it->x) << "," << Y(((*it).*panel.stat).p25) << " ";
    }
    svg << "<polygon points='" << band.str()
        << "' fill='#4e79a7' fill-opacity='0.25' stroke='none'/>\n";
    svg << "<polyline fill='none' stroke='#4e79a7' stroke-width='1.5' "
        << "points='";
    for (const Point& p : r.points) {
      svg << X(p.x) << "," << Y((p.*panel.stat).median) << " ";
    }
    svg << "'/>\n</g>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace hf::sim
