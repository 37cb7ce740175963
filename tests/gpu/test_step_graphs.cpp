// GPU tests of the step-graph runner and the staged upload (graphs/step_graphs.h,
// graphs/staged_upload.h) with a toy step: the inputs are token ids staged into a static device
// block, the launch sequence is an embedding gather (which reads the ids from that block) and a
// fill whose seed depends on the key. Replay equals eager to the byte, a captured graph reads
// whatever was staged last, fallbacks are counted, and the two staging buffers take turns.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "graphs/staged_upload.h"
#include "graphs/step_graphs.h"
#include "kernels/embedding.h"
#include "kernels/fill.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"

using namespace sg;

namespace {

constexpr int kV = 64, kH = 32, kMaxT = 32;

struct ToyStep {
  Stream stream;
  test::DevBuf table{sizeof(float) * kV * kH}, ids{sizeof(int32_t) * kMaxT};
  test::DevBuf y{sizeof(float) * kMaxT * kH}, aux{sizeof(float) * kMaxT};
  StagedUpload staging{sizeof(int32_t) * kMaxT};
  std::vector<GraphKey> recorded;  // keys launched under capture, in order
  StepGraphs graphs{stream.get(), [this](const GraphKey& key, NodeRecorder* rec) { launch(key, rec); }};

  ToyStep() {
    check(cudaDeviceSynchronize());  // the buffers' poison fills ran on the legacy stream
    check(fill_uniform(table.data(), DType::f32, int64_t{kV} * kH, 3, -1.f, 1.f, stream.get()));
    stream.sync();
  }

  void launch(const GraphKey& key, NodeRecorder* rec) {
    cudaStream_t s = stream.get();
    EmbeddingParams p;
    p.table = table.data();
    p.table_dtype = DType::f32;
    p.ids = ids.as<int32_t>();
    p.y = y.data();
    p.y_dtype = DType::f32;
    p.V = kV;
    p.H = kH;
    p.T = key.tokens;
    check(embedding(p, s));
    if (rec) rec->launched(s, {-1, "embedding", "-", key.tokens * (kH * 8.0 + 4)});
    const uint64_t seed = 1000 * static_cast<uint64_t>(key.kind) + static_cast<uint64_t>(key.tokens);
    check(fill_uniform(aux.data(), DType::f32, key.tokens, seed, 0.f, 1.f, s));
    if (rec) {
      rec->launched(s, {-1, "fill", "-", key.tokens * 4.0});
      recorded.push_back(key);
    }
  }

  void stage(const std::vector<int32_t>& tokens) {
    staging.upload(stream.get(), ids.data(), tokens.size() * sizeof(int32_t), [&](std::span<std::byte> host) {
      std::memcpy(host.data(), tokens.data(), tokens.size() * sizeof(int32_t));
    });
  }

  void capture(const std::vector<GraphKey>& keys) {
    graphs.capture_all(
        keys, [&](const GraphKey& key) { stage(std::vector<int32_t>(static_cast<size_t>(key.tokens), 0)); },
        [](const GraphKey& key) { return "toy " + describe(key); }, "toy arms");
  }

  // The outputs of the last step: y rows [0, T) and aux [0, T).
  std::vector<uint8_t> outputs(int T) {
    stream.sync();
    auto a = y.download(), b = aux.download();
    std::vector<uint8_t> out(a.begin(), a.begin() + sizeof(float) * T * kH);
    out.insert(out.end(), b.begin(), b.begin() + sizeof(float) * T);
    return out;
  }
  void poison() {
    y.fill(0xA5);
    aux.fill(0xA5);
    check(cudaDeviceSynchronize());  // cudaMemset on the legacy stream: done before the step's stream runs
  }
};

std::vector<int32_t> ids_for(int T, int salt) {
  std::vector<int32_t> v(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) v[static_cast<size_t>(t)] = (t * 7 + salt * 13 + 5) % kV;
  return v;
}

}  // namespace

TEST_CASE("the runner captures largest first and replays byte-identically to eager", "[gpu][runner]") {
  ToyStep step;
  const GraphKey d8 = GraphKey::decode(8), p32 = GraphKey::prefill(32);
  step.capture({d8, p32});
  CHECK(step.recorded == std::vector<GraphKey>{p32, d8});
  for (const GraphKey key : {d8, p32}) {
    INFO(describe(key));
    const Manifest& m = step.graphs.manifest(key);
    CHECK(m.graph == "toy " + describe(key));
    CHECK(m.arms == "toy arms");
    REQUIRE(m.nodes.size() == 2);
    CHECK(m.nodes[0].label.op == "embedding");
    CHECK(m.nodes[1].label.op == "fill");
    CHECK(m.unlabelled() == 0);
    CHECK(step.graphs.graph(key).exec() != nullptr);

    const auto tokens = ids_for(key.tokens, 1);
    step.poison();
    step.stage(tokens);
    CHECK_FALSE(step.graphs.run(key, RunMode::eager));
    const auto eager = step.outputs(key.tokens);
    step.poison();
    step.stage(tokens);
    CHECK(step.graphs.run(key, RunMode::graph));
    CHECK(test::byte_diff(step.outputs(key.tokens), eager, DType::f32) == "");
    // The graph reads what was staged last: new ids, new rows, still equal to eager.
    const auto other = ids_for(key.tokens, 2);
    step.stage(other);
    step.graphs.replay(key);
    const auto replayed = step.outputs(key.tokens);
    step.stage(other);
    step.graphs.run(key, RunMode::eager);
    CHECK(test::byte_diff(replayed, step.outputs(key.tokens), DType::f32) == "");
    CHECK(test::byte_diff(replayed, eager, DType::f32) != "");
  }
  CHECK(step.graphs.eager_fallbacks() == 0);
}

TEST_CASE("the runner counts eager fallbacks and names missing keys", "[gpu][runner]") {
  ToyStep step;
  step.capture({GraphKey::decode(8), GraphKey::prefill(32)});
  step.stage(ids_for(16, 3));
  CHECK_FALSE(step.graphs.run(GraphKey::decode(16), RunMode::graph));  // not captured: eager
  CHECK(step.graphs.eager_fallbacks() == 1);
  CHECK_FALSE(step.graphs.run(GraphKey::decode(8), RunMode::eager));  // eager by choice
  CHECK(step.graphs.eager_fallbacks() == 1);
  CHECK(step.graphs.run(GraphKey::prefill(32), RunMode::graph));
  CHECK_FALSE(step.graphs.run(GraphKey::prefill(8), RunMode::graph));  // decode 8 is not prefill 8
  CHECK(step.graphs.eager_fallbacks() == 2);
  step.stream.sync();
  try {
    step.graphs.replay(GraphKey::decode(16));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "no graph captured for decode 16 (captured: decode 8, prefill 32)");
  }
}

namespace {
void CUDART_CB sleep_then_set(void* flag) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  static_cast<std::atomic<bool>*>(flag)->store(true);
}
}  // namespace

TEST_CASE("staged uploads take two pinned buffers in turn and wait only for the copy two back", "[gpu][runner]") {
  Stream stream;
  cudaStream_t s = stream.get();
  StagedUpload st(64);
  CHECK(st.capacity() == 64);
  test::DevBuf a(64), b(64);
  check(cudaDeviceSynchronize());  // their poison fills ran on the legacy stream
  std::atomic<bool> passed{false};
  // The stream is held for 300 ms before the first copy; the first copy's event follows it.
  check(cudaLaunchHostFunc(s, sleep_then_set, &passed));

  std::vector<const std::byte*> used;
  std::vector<bool> stream_passed;
  auto upload = [&](void* dst, uint8_t value) {
    st.upload(s, dst, 64, [&](std::span<std::byte> host) {
      CHECK(host.size() == 64);
      used.push_back(host.data());
      stream_passed.push_back(passed.load());
      std::memset(host.data(), value, host.size());
    });
  };
  CHECK(st.next() == 0);
  upload(a.data(), 1);
  CHECK(st.next() == 1);
  upload(b.data(), 2);  // the other buffer: no wait, while the stream is still held
  CHECK(st.next() == 0);
  upload(a.data(), 3);  // the first buffer again: waits for the first copy (after the hold)
  CHECK(st.next() == 1);
  REQUIRE(used.size() == 3);
  CHECK(used[0] != used[1]);
  CHECK(used[2] == used[0]);
  CHECK(stream_passed == std::vector<bool>{false, false, true});
  stream.sync();
  CHECK(a.download() == std::vector<uint8_t>(64, 3));
  CHECK(b.download() == std::vector<uint8_t>(64, 2));

  CHECK_THROWS_AS(st.upload(s, a.data(), 65, [](std::span<std::byte>) {}), Error);
}
