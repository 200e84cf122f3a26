// `tessera` command-line entry point: dispatches to subcommands.
#include <cstdio>
#include <cstring>
#include <string>

#include "tessera/version.h"

int main(int argc, char** argv) {
  if (argc >= 2 && (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version"))) {
    std::printf("%s\n", tessera::build_description());
    return 0;
  }
  std::fprintf(stderr, "usage: tessera <command> [args]\n");
  return 2;
}
