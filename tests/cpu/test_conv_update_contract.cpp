// CPU tests of conv.update's launch contract (kernels/contracts.h):
// - the grid arm's capped grid-stride grid and the fast arm's (ceil(C / (128 V)), rows) grid on the
//   model shapes and awkward C, spelled out, with V picked from the shape or forced (2, 4, 8);
// - the pick: the largest V whose rows x ceil(C / V) threads fill one wave, at its boundaries;
// - both arms cover every (row, channel); invalid shapes and V throw; the ArmSelection overload.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/contracts.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

std::string dims(const Dim3& d) { return to_string(d); }

template <class F>
std::string invalid_argument_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (...) {
    FAIL("threw something other than std::invalid_argument");
  }
  FAIL("did not throw");
  return {};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("conv.update contract: grid and fast arms", "[contracts]") {
  SECTION("Qwen3.5-4B decode: C = 8192, K = 4, rows 32") {
    auto g = conv_update_contract(ConvUpdateArm::grid, {32, 8192, 4});
    CHECK(g.arm == ConvUpdateArm::grid);
    CHECK(dims(g.block) == "(256, 1, 1)");
    CHECK(dims(g.grid) == "(1024, 1, 1)");  // 32*8192/256 = 1024 <= 1056
    CHECK(g.smem_bytes == 0);
    CHECK(g.kernel == "conv_update_grid");
    CHECK(g.per_thread == 0);
    CHECK(g.fallback_reason.empty());
    auto f = conv_update_contract(ConvUpdateArm::fast, {32, 8192, 4});
    CHECK(f.arm == ConvUpdateArm::fast);
    CHECK(dims(f.block) == "(128, 1, 1)");
    CHECK(f.per_thread == 2);              // 32 x 8192 / 2 = 131072 threads: under one wave, so V = 2
    CHECK(dims(f.grid) == "(32, 32, 1)");  // 8192 / (128 threads x 2 channels)
    CHECK(f.kernel == "conv_update_fast");
    CHECK(f.fallback_reason.empty());
    // Forced V (the benchmark's sweep): the grid follows.
    CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {32, 8192, 4, 4}).grid) == "(16, 32, 1)");
    CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {32, 8192, 4, 8}).grid) == "(8, 32, 1)");
    CHECK(conv_update_contract(ConvUpdateArm::fast, {32, 8192, 4, 8}).per_thread == 8);
  }
  SECTION("27B decode: C = 10240 (grid arm capped at 1056 blocks)") {
    CHECK(dims(conv_update_contract(ConvUpdateArm::grid, {32, 10240, 4}).grid) == "(1056, 1, 1)");  // 1280 capped
    CHECK(dims(conv_update_contract(ConvUpdateArm::grid, {512, 10240, 4}).grid) == "(1056, 1, 1)");
    CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {32, 10240, 4}).grid) == "(40, 32, 1)");  // V = 2
    CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {32, 10240, 4, 8}).grid) == "(10, 32, 1)");
    CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {512, 10240, 4}).grid) == "(10, 512, 1)");  // V = 8
    CHECK(dims(conv_update_contract(ConvUpdateArm::grid, {33, 8192, 4}).grid) == "(1056, 1, 1)");    // 1056 exactly
    CHECK(dims(conv_update_contract(ConvUpdateArm::grid, {1, 8192, 4}).grid) == "(32, 1, 1)");
  }
  SECTION("V: the largest of 8, 4, 2 that fills one wave (132 x 2048 threads), else 2") {
    CHECK(kConvUpdateFastWaveThreads == 270336);
    struct Row {
      int rows, C, v;
    };
    for (const Row& r :
         {Row{32, 8192, 2}, Row{32, 10240, 2}, Row{1, 1, 2}, Row{65535, 1, 2},  // 65535 threads whatever V: 2
          Row{131, 8192, 2},   // V = 4: 131 x 2048 = 268288 threads, short of a wave
          Row{132, 8192, 4},   // 132 x 2048 = 270336: exactly one wave
          Row{263, 8192, 4},   // V = 8: 263 x 1024 = 269312
          Row{264, 8192, 8},   // 264 x 1024 = 270336
          Row{1, 2162688, 8},  // 2162688 / 8 = 270336 threads in one row
          Row{1, 2162687, 8},  // ceil(2162687 / 8) = 270336: working threads, rounded up
          Row{1, 2162680, 4}, Row{1, 1081344, 4}, Row{1, 1081343, 4}, Row{1, 1081336, 2}}) {
      CAPTURE(r.rows, r.C);
      CHECK(conv_update_fast_channels(r.rows, r.C) == r.v);
      CHECK(conv_update_contract(ConvUpdateArm::fast, {r.rows, r.C, 4}).per_thread == r.v);
    }
    // More rows never give fewer channels per thread.
    for (int C : {1, 64, 1000, 8192, 10240, 100000}) {
      int prev = 0;
      for (int rows = 1; rows <= 65535; rows = rows * 3 + 1) {
        const int v = conv_update_fast_channels(rows, C);
        CAPTURE(C, rows);
        CHECK(v >= prev);
        prev = v;
      }
    }
  }
  SECTION("awkward C") {
    struct Row {
      int rows, C;
      const char *grid, *fast;  // fast with the pick (V = 2 for all of these)
    };
    for (const Row& r : {Row{1, 1, "(1, 1, 1)", "(1, 1, 1)"}, Row{1, 127, "(1, 1, 1)", "(1, 1, 1)"},
                         Row{1, 129, "(1, 1, 1)", "(1, 1, 1)"}, Row{1, 385, "(2, 1, 1)", "(2, 1, 1)"},
                         Row{3, 1, "(1, 1, 1)", "(1, 3, 1)"}, Row{3, 127, "(2, 1, 1)", "(1, 3, 1)"},
                         Row{3, 129, "(2, 1, 1)", "(1, 3, 1)"}, Row{3, 385, "(5, 1, 1)", "(2, 3, 1)"},
                         Row{32, 127, "(16, 1, 1)", "(1, 32, 1)"}, Row{32, 129, "(17, 1, 1)", "(1, 32, 1)"},
                         Row{32, 385, "(49, 1, 1)", "(2, 32, 1)"}, Row{1, 1024, "(4, 1, 1)", "(4, 1, 1)"},
                         Row{1, 1025, "(5, 1, 1)", "(5, 1, 1)"}, Row{2, 3000, "(24, 1, 1)", "(12, 2, 1)"}}) {
      CAPTURE(r.rows, r.C);
      for (int K = kConvMinK; K <= kConvMaxK; ++K) {
        CHECK(dims(conv_update_contract(ConvUpdateArm::grid, {r.rows, r.C, K}).grid) == r.grid);
        CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {r.rows, r.C, K}).grid) == r.fast);
      }
    }
    // Forced V on awkward C: ceil(C / (128 V)) blocks.
    CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {3, 385, 4, 4}).grid) == "(1, 3, 1)");
    CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {3, 513, 4, 4}).grid) == "(2, 3, 1)");
    CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {2, 3000, 4, 8}).grid) == "(3, 2, 1)");
    CHECK(dims(conv_update_contract(ConvUpdateArm::fast, {1, 1025, 4, 8}).grid) == "(2, 1, 1)");
  }
  SECTION("both arms cover every (row, channel): one pass, a grid-stride loop, or V channels a thread") {
    for (int rows : {1, 2, 7, 32, 64, 257, 300}) {
      for (int C : {1, 127, 129, 385, 1024, 1028, 1030, 8192, 10240}) {
        auto g = conv_update_contract(ConvUpdateArm::grid, {rows, C, 4});
        const int64_t n = int64_t(rows) * C;
        CAPTURE(rows, C);
        CHECK(g.grid.x >= 1);
        CHECK(g.grid.x <= kConvUpdateGridMaxBlocks);
        // Either one thread per element, or the cap (and the loop strides over the rest).
        CHECK((int64_t(g.grid.x) * g.block.x >= n || g.grid.x == kConvUpdateGridMaxBlocks));
        CHECK(int64_t(g.grid.x - 1) * g.block.x < n);  // no block entirely idle
        for (int v : {0, 2, 4, 8}) {
          for (int b : {0, 128, 256, 512}) {
            auto f = conv_update_contract(ConvUpdateArm::fast, {rows, C, 4, v, b});
            CAPTURE(v, b);
            CHECK(f.per_thread == (v != 0 ? v : conv_update_fast_channels(rows, C)));
            const int64_t per_block = int64_t(f.block.x) * f.per_thread;  // channels
            CHECK(int64_t(f.grid.x) * per_block >= C);
            CHECK(int64_t(f.grid.x - 1) * per_block < C);
            CHECK(f.grid.y == unsigned(rows));
            CHECK(f.block.x == (b != 0 ? unsigned(b) : kConvUpdateFastBlock));
          }
        }
      }
    }
  }
  SECTION("the ArmSelection overload uses the selection's arm") {
    ArmSelection s;
    CHECK(conv_update_contract(s, {32, 8192, 4}).kernel == "conv_update_fast");
    CHECK(conv_update_contract(s, {32, 8192, 4, 4}).per_thread == 4);
    s.conv_update = ConvUpdateArm::grid;
    CHECK(conv_update_contract(s, {32, 8192, 4}).kernel == "conv_update_grid");
  }
  SECTION("the grid arm ignores the channels knob") {
    for (int v : {2, 4, 8}) {
      auto g = conv_update_contract(ConvUpdateArm::grid, {32, 8192, 4, v});
      CHECK(dims(g.grid) == "(1024, 1, 1)");
      CHECK(g.per_thread == 0);
    }
  }
  SECTION("invalid shapes") {
    for (auto arm : {ConvUpdateArm::grid, ConvUpdateArm::fast}) {
      CHECK(contains(invalid_argument_of([&] {
                       conv_update_contract(arm, {32, 8192, 1});
                     }),
                     "K must be 2..8 (got K=1)"));
      CHECK(contains(invalid_argument_of([&] {
                       conv_update_contract(arm, {32, 8192, 9});
                     }),
                     "K must be 2..8 (got K=9)"));
      CHECK_THROWS_AS(conv_update_contract(arm, {0, 8192, 4}), std::invalid_argument);
      CHECK_THROWS_AS(conv_update_contract(arm, {-1, 8192, 4}), std::invalid_argument);
      CHECK_THROWS_AS(conv_update_contract(arm, {32, 0, 4}), std::invalid_argument);
      CHECK(contains(invalid_argument_of([&] { conv_update_contract(arm, {32, 0, 4}); }), "conv.update"));
      for (int v : {-1, 1, 3, 6, 16}) {
        CAPTURE(v);
        CHECK(contains(invalid_argument_of([&] {
                         conv_update_contract(arm, {32, 8192, 4, v});
                       }),
                       "conv.update: channels per thread must be 0 (pick), 2, 4 or 8 (got " + std::to_string(v) + ")"));
      }
      for (int b : {-1, 32, 64, 100, 1024}) {
        CAPTURE(b);
        CHECK(contains(
            invalid_argument_of([&] {
              conv_update_contract(arm, {32, 8192, 4, 0, b});
            }),
            "conv.update: block must be 0 (default), 128, 256 or 512 threads (got " + std::to_string(b) + ")"));
      }
    }
    // The fast arm puts rows on grid y.
    CHECK_THROWS_AS(conv_update_contract(ConvUpdateArm::fast, {65536, 128, 4}), std::invalid_argument);
    CHECK(conv_update_contract(ConvUpdateArm::fast, {65535, 128, 4}).grid.y == 65535);
    CHECK(conv_update_contract(ConvUpdateArm::grid, {65536, 128, 4}).grid.x == kConvUpdateGridMaxBlocks);
  }
}
