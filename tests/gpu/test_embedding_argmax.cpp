// GPU tests of the model step's embedding gather and argmax against their CPU references (tagged
// [norms] with the other elementwise kernels of the step). Poisoned outputs and guards: norm_fixture.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/argmax.h"
#include "kernels/embedding.h"
#include "kernels/ref/mlp_ref.h"
#include "kernels/ref/norm_ref.h"
#include "tests/gpu/norm_fixture.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;

using namespace sg::test::norms;  // NOLINT: the shared checks

TEST_CASE("embedding: rows are copied byte-exact, bad ids and padded tokens give zero rows", "[gpu][norms]") {
  struct Types {
    DType table, y;
  };
  const int64_t V = 1000;
  for (Types ty : {Types{DType::bf16, DType::bf16}, Types{DType::f32, DType::f32}, Types{DType::f32, DType::bf16},
                   Types{DType::bf16, DType::f32}}) {
    for (int H : {1, 127, 129, 2560}) {
      for (int T : {1, 17, 300}) {
        const int live = T > 1 ? T - 4 : T;
        const uint64_t seed = 4000 + H + T + 10 * static_cast<int>(ty.table) + static_cast<int>(ty.y);
        CAPTURE(dtype_name(ty.table), dtype_name(ty.y), H, T, live, seed);
        auto table = rnd(static_cast<size_t>(V) * H, seed, ty.table, -1.f, 1.f);
        std::mt19937_64 gen(seed);
        std::vector<int32_t> ids(T);
        for (auto& id : ids) id = static_cast<int32_t>(gen() % V);
        ids[0] = 0;
        if (T > 1) {
          ids[live - 1] = static_cast<int32_t>(V - 1);
          ids[1] = -1;                                  // outside [0, V): zero row
          if (T > 3) ids[2] = static_cast<int32_t>(V);  // outside [0, V): zero row
          for (int t = live; t < T; ++t) ids[t] = 7;    // padding: must not be read
        }
        const size_t N = static_cast<size_t>(T) * H;
        std::vector<float> want(N, 0.0f);
        for (int t = 0; t < live; ++t) {
          if (ids[t] < 0 || ids[t] >= V) continue;
          const int64_t id = ids[t];
          ref::embedding(table.data(), &id, want.data() + static_cast<size_t>(t) * H, 1, V, H);
        }
        for (auto& v : want) v = ref::store(v, store_of(ty.y));
        auto dt = test::DevBuf::from(table, ty.table), dids = test::DevBuf::from_i32(ids);
        auto dlive = test::DevBuf::from_i32({live});
        auto y = out_buf(N, ty.y);
        EmbeddingParams p;
        p.table = dt.data();
        p.table_dtype = ty.table;
        p.ids = dids.as<int32_t>();
        p.y = y.data();
        p.y_dtype = ty.y;
        p.V = V;
        p.H = H;
        p.T = T;
        p.live_rows = T > 1 ? dlive.as<int32_t>() : nullptr;
        check(embedding(p, nullptr));
        auto g = fetch(y, N, ty.y);
        CHECK(g.guard_ok);
        CHECK(test::byte_diff(g.bytes, test::to_bytes(want, ty.y), ty.y) == "");
      }
    }
  }
}

TEST_CASE("argmax: first index of the maximum with ties, NaN, infinities and padded rows as ref::argmax",
          "[gpu][norms]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t V : {int64_t{1}, int64_t{127}, int64_t{129}, int64_t{4099}, int64_t{248320}}) {
    // ld = V (float4 path only when V % 4 == 0) and ld = a multiple of 4 > V (float4 path + tail).
    for (int64_t ld : {V, (V + 4) / 4 * 4}) {
      const int rows = 14, live = 12;
      const uint64_t seed = 8000 + V + ld;
      CAPTURE(V, ld, rows, live, seed);
      auto x = test::uniform(static_cast<size_t>(rows) * ld, seed, -10.f, 10.f);
      auto at = [&](int r, int64_t i) -> float& { return x[static_cast<size_t>(r) * ld + std::min(i, V - 1)]; };
      auto fill_row = [&](int r, float v) { std::fill_n(x.begin() + static_cast<size_t>(r) * ld, V, v); };
      // Columns [V, ld) are NaN: reading past V would change the answer.
      for (int r = 0; r < rows; ++r)
        std::fill(x.begin() + static_cast<size_t>(r) * ld + V, x.begin() + static_cast<size_t>(r + 1) * ld, nan);
      // row 0: random. row 1: the maximum three times (lowest index wins).
      at(1, V / 3) = at(1, V / 2) = at(1, V - 1) = 50.f;
      // row 2: two NaNs and a +inf: the first NaN wins.
      at(2, V / 5) = inf;
      at(2, V - 1) = nan;
      at(2, V / 2) = nan;
      // row 3: all -inf -> 0.
      fill_row(3, -inf);
      // row 4: zeros of both signs tie -> 0.
      fill_row(4, 0.0f);
      at(4, 0) = -0.0f;
      // row 5: the maximum at the last index. row 6: tie between index 0 and the last index.
      at(5, V - 1) = 60.f;
      at(6, 0) = at(6, V - 1) = 60.f;
      // row 7: +inf twice. row 8: NaN at index 0. row 9: -inf but one finite value at the end.
      at(7, V - 2 >= 0 ? V - 2 : 0) = inf;
      at(7, V - 1) = inf;
      at(8, 0) = nan;
      fill_row(9, -inf);
      at(9, V - 1) = -3.f;
      // row 10: ties at every multiple of 97 (spread over all threads). row 11: negative only.
      for (int64_t i = 0; i < V; i += 97) at(10, i) = 11.f;
      for (int64_t i = 0; i < V; ++i) at(11, i) = -std::fabs(at(11, i)) - 1.f;
      // rows 12, 13: padding (>= live): 0 whatever they hold.
      at(12, V / 2) = 99.f;
      std::vector<int32_t> want(rows, 0);
      for (int r = 0; r < live; ++r)
        want[r] = static_cast<int32_t>(ref::argmax(x.data() + static_cast<size_t>(r) * ld, V));
      auto dx = test::DevBuf::from(x, DType::f32), dlive = test::DevBuf::from_i32({live});
      // One block per row, and split rows (slices ending inside the ties, the NaNs and the
      // infinities above; more chunks than float4s for small V), each launched twice: the
      // counters must come back to zero.
      for (int chunks : {1, 2, 7, 64, argmax_pick_chunks(rows, V, 132)}) {
        CAPTURE(chunks);
        test::DevBuf ws(std::max<size_t>(16, argmax_workspace_bytes(rows, chunks)), kPoison);
        test::DevBuf counters(rows * 4, 0);
        for (int launch = 0; launch < 2; ++launch) {
          test::DevBuf out((rows + kGuard) * 4, kPoison);
          // The second launch also hands out each row's (value, id + index_base), as a
          // tensor-parallel rank does (tp_argmax.h).
          test::DevBuf pairs(rows * sizeof(ArgmaxPair), kPoison);
          const int64_t base = 1000;
          ArgmaxParams p;
          p.logits = dx.as<float>();
          p.ld = ld;
          p.V = V;
          p.rows = rows;
          p.out = out.as<int32_t>();
          p.live_rows = dlive.as<int32_t>();
          p.chunks = chunks;
          p.workspace = ws.data();
          p.counters = counters.as<int32_t>();
          if (launch == 1) {
            p.pairs = static_cast<ArgmaxPair*>(pairs.data());
            p.index_base = base;
          }
          check(argmax(p, nullptr));
          auto g = fetch(out, rows, DType::i32);
          CHECK(g.guard_ok);
          std::vector<int32_t> got(rows);
          std::memcpy(got.data(), g.bytes.data(), rows * 4);
          for (int r = 0; r < rows; ++r) {
            CAPTURE(r);
            CHECK(got[r] == want[r]);
          }
          const auto cb = counters.download();
          CHECK(std::all_of(cb.begin(), cb.end(), [](uint8_t b) { return b == 0; }));
          if (launch == 1) {
            const std::vector<uint8_t> pb = pairs.download();
            for (int r = 0; r < rows; ++r) {
              CAPTURE(r);
              ArgmaxPair q;
              std::memcpy(&q, pb.data() + r * sizeof(ArgmaxPair), sizeof q);
              const float want_v = r < live ? x[static_cast<size_t>(r) * ld + want[r]] : 0.f;
              CHECK(q.index == (r < live ? want[r] + base : 0));
              CHECK(std::memcmp(&q.value, &want_v, sizeof(float)) == 0);  // the logit's bits, NaN included
            }
          }
        }
      }
    }
  }
}

TEST_CASE("argmax: split rows need a workspace and counters", "[gpu][norms]") {
  test::DevBuf x(4 * 4096, 0), out(4 * 2);
  ArgmaxParams p;
  p.logits = x.as<float>();
  p.V = 4096;
  p.rows = 2;
  p.out = out.as<int32_t>();
  p.chunks = 4;
  CHECK(argmax(p, nullptr) == cudaErrorInvalidValue);  // no workspace or counters
  p.chunks = 0;
  CHECK(argmax(p, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("argmax: many rows without live_rows at the vocabulary size", "[gpu][norms]") {
  const int64_t V = 248320;
  const int rows = 33;
  auto x = test::uniform(static_cast<size_t>(rows) * V, 77, -5.f, 5.f);
  std::vector<int32_t> want(rows);
  for (int r = 0; r < rows; ++r) want[r] = static_cast<int32_t>(ref::argmax(x.data() + static_cast<size_t>(r) * V, V));
  auto dx = test::DevBuf::from(x, DType::f32);
  test::DevBuf out((rows + kGuard) * 4, kPoison);
  ArgmaxParams p;
  p.logits = dx.as<float>();
  p.V = V;
  p.rows = rows;
  p.out = out.as<int32_t>();
  check(argmax(p, nullptr));
  auto g = fetch(out, rows, DType::i32);
  CHECK(g.guard_ok);
  std::vector<int32_t> got(rows);
  std::memcpy(got.data(), g.bytes.data(), rows * 4);
  CHECK(got == want);
}
