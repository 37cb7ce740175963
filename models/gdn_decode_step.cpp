// gdn_decode_step.cpp: layout, upload, the launch sequence (the GDN decode path of gdn_mixer.h), capture.
#include "models/gdn_decode_step.h"

#include <cstring>
#include <random>
#include <span>

#include "engine/error.h"
#include "graphs/capture_sizes.h"
#include "graphs/node_timer.h"
#include "kernels/fault.h"

namespace sg {
namespace {

size_t align_up(size_t x) { return (x + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign; }

void put(void* dst, DType t, size_t i, float v) {
  if (t == DType::bf16) {
    static_cast<bf16_t*>(dst)[i] = f32_to_bf16(v);
  } else {
    static_cast<float*>(dst)[i] = v;
  }
}

}  // namespace

GdnDecodeStep::GdnDecodeStep(const GdnDims& dims, const GdnDecodeOptions& opts)
    : dims_(dims),
      opts_(opts),
      graphs_(stream_.get(), [this](const GraphKey& key, NodeRecorder* rec) { launch_sequence(key.tokens, rec); }) {
  require(opts.max_seqs >= 1 && opts.graph_max >= 1 && opts.graph_max <= opts.max_seqs,
          "need 1 <= graph_max ({}) <= max_seqs ({})", opts.graph_max, opts.max_seqs);
  require(opts.num_slots >= opts.max_seqs, "num_slots ({}) must be >= max_seqs ({})", opts.num_slots, opts.max_seqs);
  require(opts.act == DType::bf16 || opts.act == DType::f32, "activations must be bf16 or f32, got {}",
          dtype_name(opts.act));
  require(dims.Hk >= 1 && dims.Hv % dims.Hk == 0, "Hv ({}) must be a multiple of Hk ({})", dims.Hv, dims.Hk);
  require(delta_rule_decode_supports(dims.Dk, dims.Dv), "delta-rule decode does not support Dk={} Dv={}", dims.Dk,
          dims.Dv);
  keys_ = decode_capture_sizes(opts.graph_max);
  drill_runs_.arm(checks_, opts.layer_index, opts.fault_op, opts.fault_run, &fault_inject);

  Arena m = Arena::measure();
  layout(m);
  arena_.emplace(m.used(), "gdn-decode");
  layout(*arena_);
  arena_->freeze();
  arena_->zero(stream_.get());
  staging_ = StagedUpload(io_layout(opts.max_seqs).total);

  // Synthetic weights: conv taps around 1/K so activations stay O(1); A_log, dt_bias as in a
  // trained model's range.
  const int C = dims.C(), K = dims.K;
  std::mt19937_64 rng(opts.seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  w_host_.resize(static_cast<size_t>(C) * K);
  for (auto& x : w_host_) x = round_bf16(u(rng) * (1.5f / static_cast<float>(K)));
  A_log_host_.resize(static_cast<size_t>(dims.Hv));
  dt_bias_host_.resize(static_cast<size_t>(dims.Hv));
  for (auto& x : A_log_host_) x = std::log(1.0f + 15.0f * (0.5f * (u(rng) + 1.f)));
  for (auto& x : dt_bias_host_) x = u(rng);
  check(cudaMemcpyAsync(v_.w.data, w_host_.data(), v_.w.bytes(), cudaMemcpyHostToDevice, stream_.get()));
  check(cudaMemcpyAsync(v_.A_log.data, A_log_host_.data(), v_.A_log.bytes(), cudaMemcpyHostToDevice, stream_.get()));
  check(cudaMemcpyAsync(v_.dt_bias.data, dt_bias_host_.data(), v_.dt_bias.bytes(), cudaMemcpyHostToDevice,
                        stream_.get()));
  stream_.sync();
}

void GdnDecodeStep::layout(Arena& a) {
  const int64_t C = dims_.C(), K = dims_.K, Hk = dims_.Hk, Hv = dims_.Hv, Dk = dims_.Dk, Dv = dims_.Dv;
  const int64_t S = opts_.num_slots, R = opts_.max_seqs;
  v_.w = a.take("conv.weight", DType::f32, {C, K});
  v_.A_log = a.take("A_log", DType::f32, {Hv});
  v_.dt_bias = a.take("dt_bias", DType::f32, {Hv});
  v_.conv_state = a.take("conv_state", DType::bf16, {S, C, K - 1});
  v_.ssm_state = a.take("ssm_state", DType::f32, {S, Hv, Dk, Dv});
  v_.io = a.take("step inputs", DType::i8, {static_cast<int64_t>(io_layout(opts_.max_seqs).total)});
  v_.conv_out = a.take("conv_out", opts_.act, {R, C});
  v_.q = a.take("q", opts_.act, {R, Hk, Dk});
  v_.k = a.take("k", opts_.act, {R, Hk, Dk});
  v_.v = a.take("v", opts_.act, {R, Hv, Dv});
  v_.g = a.take("g", DType::f32, {R, Hv});
  v_.beta = a.take("beta", DType::f32, {R, Hv});
  v_.out = a.take("out", opts_.act, {R, Hv, Dv});
}

GdnDecodeStep::IoLayout GdnDecodeStep::io_layout(int rows) const {
  const size_t es = dtype_size(opts_.act);
  IoLayout l;
  l.slots = 0;
  l.x = align_up(l.slots + sizeof(int32_t) * rows);
  l.a = align_up(l.x + es * rows * dims_.C());
  l.b = align_up(l.a + es * rows * dims_.Hv);
  l.total = align_up(l.b + es * rows * dims_.Hv);
  return l;
}

void GdnDecodeStep::upload(const DecodeBatch& batch, int rows) {
  const int B = batch.rows(), C = dims_.C(), Hv = dims_.Hv;
  require(batch.x.size() == static_cast<size_t>(B) * C, "batch x has {} values, expected {} x {}", batch.x.size(), B,
          C);
  require(batch.a.size() == static_cast<size_t>(B) * Hv && batch.b.size() == static_cast<size_t>(B) * Hv,
          "batch a/b must have {} x {} values", B, Hv);
  validate_slots(batch.slots, opts_.num_slots);
  const IoLayout l = io_layout(rows);
  staging_.upload(stream_.get(), v_.io.data, l.total, [&](std::span<std::byte> host) {
    char* h = reinterpret_cast<char*>(host.data());
    std::memset(h, 0, l.total);  // padding rows: zero inputs
    auto slots = pad_slots(batch.slots, rows);
    std::memcpy(h + l.slots, slots.data(), sizeof(int32_t) * rows);
    for (size_t i = 0; i < batch.x.size(); ++i) put(h + l.x, opts_.act, i, batch.x[i]);
    for (size_t i = 0; i < batch.a.size(); ++i) put(h + l.a, opts_.act, i, batch.a[i]);
    for (size_t i = 0; i < batch.b.size(); ++i) put(h + l.b, opts_.act, i, batch.b[i]);
  });
}

void GdnDecodeStep::stage_padding(int rows) {
  const IoLayout l = io_layout(rows);
  staging_.upload(stream_.get(), v_.io.data, l.total, [&](std::span<std::byte> host) {
    char* h = reinterpret_cast<char*>(host.data());
    const std::vector<int32_t> pad(static_cast<size_t>(rows), -1);
    std::memset(h, 0, l.total);
    std::memcpy(h + l.slots, pad.data(), sizeof(int32_t) * rows);
  });
}

double GdnDecodeStep::step_bytes(int rows) const { return path(rows).bytes(); }

GdnDecodePath GdnDecodeStep::path(int rows) const {
  const IoLayout l = io_layout(rows);
  char* io = static_cast<char*>(v_.io.data);
  GdnIo p;
  p.x = io + l.x;  // [rows, C]
  p.x_stride = dims_.C();
  p.a = io + l.a;  // [rows, Hv]
  p.b = io + l.b;  // [rows, Hv]
  p.ab_stride = dims_.Hv;
  p.slots = reinterpret_cast<const int32_t*>(io + l.slots);
  p.conv_w = v_.w.ptr<float>();
  p.A_log = v_.A_log.ptr<float>();
  p.dt_bias = v_.dt_bias.ptr<float>();
  p.conv_state = v_.conv_state.data;
  p.conv_state_dtype = v_.conv_state.dtype;
  p.ssm_state = v_.ssm_state.data;
  p.ssm_state_dtype = v_.ssm_state.dtype;
  p.conv_out = v_.conv_out.data;
  p.q = v_.q.data;
  p.k = v_.k.data;
  p.v = v_.v.data;
  p.g = v_.g.ptr<float>();
  p.beta = v_.beta.ptr<float>();
  p.out = v_.out.data;  // [rows, Hv, Dv]
  return gdn_decode_path(dims_, opts_.act, opts_.arms, rows, p);
}

void GdnDecodeStep::launch_sequence(int rows, NodeRecorder* rec) {
  // The drill's kernel goes into captured graphs only (no sync_each: eager steps do not fault).
  const NodeCheckScope scope(opts_.fault_op.empty() ? nullptr : &checks_);
  path(rows).launch(stream_.get(), rec, opts_.layer_index);
}

uint64_t GdnDecodeStep::fault_drill_runs() const {
  if (opts_.fault_op.empty()) return 0;
  sync();
  return drill_runs_.runs();
}

void GdnDecodeStep::capture_all(bool for_timing) {
  if (for_timing) NodeTimer::instance().attach();
  std::vector<GraphKey> keys;
  for (int key : keys_) keys.push_back(GraphKey::decode(key));
  graphs_.capture_all(
      keys, [&](const GraphKey& key) { stage_padding(key.tokens); },
      [](const GraphKey& key) { return fmt::format("gdn-decode b={}", key.tokens); }, opts_.arms.describe());
}

int GdnDecodeStep::run(const DecodeBatch& batch, RunMode mode) {
  const int B = batch.rows();
  require(B >= 1 && B <= opts_.max_seqs, "batch of {} rows: must be 1..{} (the static buffers' size)", B,
          opts_.max_seqs);
  auto key = pad_to_key(keys_, B);
  const int rows = key ? *key : B;
  bool replayed = false;
  try {
    upload(batch, rows);
    replayed = graphs_.run(GraphKey::decode(rows), mode);
  } catch (const KernelFault&) {
    throw;
  } catch (const Error&) {
    faults_.earlier();  // the upload or launch met the sticky error of a step that faulted
    throw;
  }
  faults_.ran(GraphKey::decode(rows), replayed);
  return rows;
}

void GdnDecodeStep::replay(int key) const {
  try {
    graphs_.replay(GraphKey::decode(key));
  } catch (const Error&) {
    faults_.earlier();
    throw;
  }
  faults_.ran(GraphKey::decode(key), true);
}

void GdnDecodeStep::sync() const { faults_.check(cudaStreamSynchronize(stream_.get())); }

namespace {
// The copy waits for the steps before it: an error there is their fault (StepFaults::check).
std::vector<uint8_t> download(const TensorView& t, size_t bytes, cudaStream_t s, const StepFaults& faults) {
  std::vector<uint8_t> out(bytes);
  cudaError_t e = cudaMemcpyAsync(out.data(), t.data, bytes, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  faults.check(e);
  return out;
}
void upload_bytes(const TensorView& t, const std::vector<uint8_t>& b, cudaStream_t s) {
  require(b.size() == t.bytes(), "expected {} bytes, got {}", t.bytes(), b.size());
  check(cudaMemcpyAsync(t.data, b.data(), b.size(), cudaMemcpyHostToDevice, s));
  check(cudaStreamSynchronize(s));
}
}  // namespace

std::vector<uint8_t> GdnDecodeStep::output_bytes(int rows) const {
  return download(v_.out, static_cast<size_t>(rows) * dims_.Hv * dims_.Dv * dtype_size(opts_.act), stream_.get(),
                  faults_);
}
std::vector<uint8_t> GdnDecodeStep::conv_state_bytes() const {
  return download(v_.conv_state, v_.conv_state.bytes(), stream_.get(), faults_);
}
std::vector<uint8_t> GdnDecodeStep::ssm_state_bytes() const {
  return download(v_.ssm_state, v_.ssm_state.bytes(), stream_.get(), faults_);
}
void GdnDecodeStep::set_conv_state_bytes(const std::vector<uint8_t>& b) {
  upload_bytes(v_.conv_state, b, stream_.get());
}
void GdnDecodeStep::set_ssm_state_bytes(const std::vector<uint8_t>& b) { upload_bytes(v_.ssm_state, b, stream_.get()); }

void GdnDecodeStep::randomize_states(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint8_t> cs(v_.conv_state.bytes()), ss(v_.ssm_state.bytes());
  auto* c = reinterpret_cast<bf16_t*>(cs.data());
  for (size_t i = 0; i < cs.size() / 2; ++i) c[i] = f32_to_bf16(u(rng));
  auto* f = reinterpret_cast<float*>(ss.data());
  for (size_t i = 0; i < ss.size() / 4; ++i) f[i] = 0.1f * u(rng);
  set_conv_state_bytes(cs);
  set_ssm_state_bytes(ss);
}

}  // namespace sg
