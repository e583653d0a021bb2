// hfctl: the HeteroFlow command-line client for users and admins.
//
// A thin main(): everything it does lives in hf_cli (cli/client.h), where
// tests drive it with a fake transport. docs/CLI.md describes the commands.
//
// Thread-safety: single-threaded.
#include <iostream>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cli/request.h"
#include "common/main_guard.h"

int main(int argc, char** argv) {
  return hf::RunMain("hfctl", [&] {
    const std::vector<std::string> args(argv + 1, argv + argc);
    return hf::cli::Run(args, hf::cli::MakeHttpTransport, std::cout, std::cerr);
  });
}
