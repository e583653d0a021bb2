// hf-sim-plot: draws several hf-sim results (one per policy) into one SVG,
// for comparing policies (docs/PLACEMENT.md).
//   hf-sim-plot --json a.json b.json ... --plot OUT.svg [--min-x 75]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/main_guard.h"
#include "sim/report.h"

static int Main(int argc, char** argv) {
  CLI::App app{"hf-sim-plot: draw several hf-sim JSON results in one SVG"};
  std::vector<std::string> inputs;
  std::string output;
  int min_x = 0;
  app.add_option("--json", inputs, "hf-sim result files (one per policy)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--plot", output, "SVG file to write")->required();
  app.add_option("--min-x", min_x, "first arrived-% shown")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  CLI11_PARSE(app, argc, argv);
  std::vector<hf::sim::ExperimentResult> results;
  for (const std::string& path : inputs) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    auto result = hf::sim::FromJson(text.str(), path);
    if (!result.ok()) {
      std::fprintf(stderr, "hf-sim-plot: %s\n",
                   result.status().message().c_str());
      return 2;
    }
    results.push_back(std::move(result).value());
  }
  std::ofstream out(output, std::ios::trunc);
  out << hf::sim::ToSvg(results, min_x);
  if (!out.flush()) {
    std::fprintf(stderr, "hf-sim-plot: cannot write %s\n", output.c_str());
    return 2;
  }
  return 0;
}

int main(int argc, char** argv) {
  return hf::RunMain("hf-sim-plot", [&] { return Main(argc, argv); });
}
