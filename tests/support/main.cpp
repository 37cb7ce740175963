// main.cpp: the test programs' main for Catch2 v2 and v3. The GPU program (SG_GPU_TESTS) first
// probes for a CUDA device; without one it prints why and exits 77, which ctest counts as
// "skipped" (listing the tests still works, so ctest can discover them on any machine).
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/device.h"
#if SG_CATCH2_V3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) {
#if SG_GPU_TESTS
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strcmp(argv[i], "-h") == 0 ||
        std::strcmp(argv[i], "--help") == 0) {
      listing = true;
    }
  }
  if (!listing) {
    sg::DeviceInfo dev = sg::probe_device();
    if (!dev.ok) {
      std::printf("SKIPPED (GPU test): %s\n", dev.reason.c_str());
      return 77;
    }
    std::printf("GPU: %s\n", dev.describe().c_str());
  }
#endif
  return Catch::Session().run(argc, argv);
}
