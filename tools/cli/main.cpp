// `tessera` command-line entry point: dispatches to the registered subcommands.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "command.h"
#include "tessera/version.h"

static void usage() {
  std::fprintf(stderr, "usage: tessera <command> [options]\n\ncommands:\n");
  for (const auto& c : tessera::cli::commands())
    if (!c.hidden) std::fprintf(stderr, "  %-12s %s\n", c.name, c.summary);
  std::fprintf(stderr, "  %-12s %s\n", "version", "print version and build features");
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    std::printf("%s\n", tessera::build_description());
    return 0;
  }
  for (const auto& c : tessera::cli::commands()) {
    if (std::strcmp(c.name, argv[1]) != 0) continue;
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "tessera: unknown command '%s'\n\n", argv[1]);
  usage();
  return 2;
}
