// GPU tests of the engine's device layer: the probe, RAII buffers, events and the arena.
#include <vector>

#include "engine/arena.h"
#include "engine/cuda_handles.h"
#include "engine/device.h"
#include "engine/error.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("device probe finds the GPU and describes it", "[gpu][engine]") {
  DeviceInfo d = probe_device();
  REQUIRE(d.ok);
  CHECK(d.sm_count > 0);
  CHECK(!d.describe().empty());
}

TEST_CASE("arena carves aligned device views and round-trips data", "[gpu][engine][arena]") {
  Stream s;
  Arena m = Arena::measure();
  m.take("a", DType::f32, {1000});
  m.take("b", DType::bf16, {7});
  Arena a(m.used(), "test");
  auto va = a.take("a", DType::f32, {1000});
  auto vb = a.take("b", DType::bf16, {7});
  CHECK(reinterpret_cast<uintptr_t>(va.data) % Arena::kAlign == 0);
  CHECK(reinterpret_cast<uintptr_t>(vb.data) % Arena::kAlign == 0);
  CHECK_THROWS_AS(a.take("c", DType::f32, {1}), Error);  // full: exactly the measured size
  std::vector<float> h(1000), back(1000);
  for (int i = 0; i < 1000; ++i) h[i] = static_cast<float>(i) * 0.5f;
  check(cudaMemcpyAsync(va.data, h.data(), va.bytes(), cudaMemcpyHostToDevice, s.get()));
  check(cudaMemcpyAsync(back.data(), va.data, va.bytes(), cudaMemcpyDeviceToHost, s.get()));
  s.sync();
  CHECK(back == h);
}

TEST_CASE("an impossible allocation is a clear error, not a crash", "[gpu][engine]") {
  try {
    DeviceBuffer b(size_t{1} << 50);  // 1 PiB
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("device allocation of") != std::string::npos);
  }
  // The failed allocation must not poison later calls.
  DeviceBuffer ok(1024);
  CHECK(ok.data() != nullptr);
}
