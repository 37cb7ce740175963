// kernel_bench_delta.cpp: the delta_rule.prefill case of `stepgraph kernels`: every form of the
// --delta-prefill setting that runs on this device (scan, chunked, mma, wgmma, wgmma-t), on a
// prefill shape, timed side by side. The forms are values of a setting, not arms: they sum in
// other orders (docs/ARMS.md), so each row's outputs and final states are compared with the
// scan's (the sequential recurrence, first row) by the L2-normalised error the GPU tests bound
// (kernels/ref/delta_rule_ref.h), not by bytes.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "kernels/delta_rule_prefill.h"
#include "kernels/delta_rule_prefill_chunked.h"
#include "kernels/delta_rule_prefill_mma.h"
#include "kernels/delta_rule_prefill_wgmma.h"
#include "kernels/delta_rule_prefill_wgmma_t.h"
#include "kernels/fill.h"
#include "kernels/numeric.h"
#include "kernels/op_bytes.h"
#include "models/step_settings.h"
#include "tools/cli/kernel_bench_cases.h"

namespace sg::bench {

namespace {

// Each [Dk] row of a bf16 [rows, Dk] buffer scaled to unit L2 norm and rounded to bf16 again, as
// the post-conv step hands q and k to the delta rule (the tolerances of delta_rule_ref.h were
// measured on unit-norm q and k; a longer k makes the recurrence grow without bound).
void normalise_rows(void* p, int64_t rows, int Dk) {
  std::vector<bf16_t> h(static_cast<size_t>(rows * Dk));
  check(cudaDeviceSynchronize());
  check(cudaMemcpy(h.data(), p, h.size() * 2, cudaMemcpyDeviceToHost));
  for (int64_t r = 0; r < rows; ++r) {
    bf16_t* row = h.data() + r * Dk;
    double ss = 0;
    for (int i = 0; i < Dk; ++i) ss += double(bf16_to_f32(row[i])) * bf16_to_f32(row[i]);
    const float inv = ss > 0 ? static_cast<float>(1.0 / std::sqrt(ss)) : 0.0f;
    for (int i = 0; i < Dk; ++i) row[i] = f32_to_bf16(bf16_to_f32(row[i]) * inv);
  }
  check(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
}

}  // namespace

OpCase delta_prefill_case(const KernelShape& s, Buffers& buf, cudaStream_t st,
                          const std::function<void(const std::string&)>& progress) {
  const GdnDims& d = s.dims;
  const int N = s.rows, T = s.tokens(), Hk = d.Hk, Hv = d.Hv, Dk = d.Dk, Dv = d.Dv;
  const DType act = DType::bf16;
  const size_t qb = size_t(T) * Hk * Dk * 2, vb = size_t(T) * Hv * Dv * 2, gb = size_t(T) * Hv * 4;
  const size_t ob = size_t(T) * Hv * Dv * 2, sb = size_t(N) * Hv * Dk * Dv * 4;

  // Metadata: N sequences of seq_len tokens without history, slot n for sequence n.
  std::vector<int32_t> cu(static_cast<size_t>(N) + 1), slots(static_cast<size_t>(N));
  for (int n = 0; n <= N; ++n) cu[static_cast<size_t>(n)] = n * s.seq_len;
  for (int n = 0; n < N; ++n) slots[static_cast<size_t>(n)] = n;
  const std::vector<uint8_t> hist(static_cast<size_t>(N), 0);
  auto* dcu = static_cast<int32_t*>(buf.make(cu.size() * 4));
  auto* dslots = static_cast<int32_t*>(buf.make(slots.size() * 4));
  auto* dhist = static_cast<uint8_t*>(buf.make(hist.size()));
  auto* dn = static_cast<int32_t*>(buf.make(4));
  check(cudaMemcpy(dcu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  check(cudaMemcpy(dslots, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
  check(cudaMemcpy(dhist, hist.data(), hist.size(), cudaMemcpyHostToDevice));
  check(cudaMemcpy(dn, &N, 4, cudaMemcpyHostToDevice));

  // Inputs in the ranges delta_rule_ref.h's bounds were measured on: unit-norm q and k, v in
  // [-1, 1], beta in (0, 1), log decays g in [-1, 0].
  DeltaRulePrefillParams p;
  p.q = buf.make(qb);
  p.k = buf.make(qb);
  p.v = buf.make(vb);
  p.qkv_dtype = act;
  p.g = static_cast<float*>(buf.make(gb));
  p.beta = static_cast<float*>(buf.make(gb));
  p.cu_seqlens = dcu;
  p.slots = dslots;
  p.has_history = dhist;
  p.n_seqs = dn;
  p.state = buf.make(sb);
  p.state_dtype = DType::f32;
  p.out = buf.make(ob);
  p.out_dtype = act;
  p.max_seqs = N;
  p.Hk = Hk, p.Hv = Hv, p.Dk = Dk, p.Dv = Dv;
  check(fill_uniform(const_cast<void*>(p.q), act, int64_t{T} * Hk * Dk, 800, -1.f, 1.f, st));
  check(fill_uniform(const_cast<void*>(p.k), act, int64_t{T} * Hk * Dk, 801, -1.f, 1.f, st));
  check(fill_uniform(const_cast<void*>(p.v), act, int64_t{T} * Hv * Dv, 802, -1.f, 1.f, st));
  check(fill_uniform(const_cast<float*>(p.g), DType::f32, int64_t{T} * Hv, 803, -1.f, 0.f, st));
  check(fill_uniform(const_cast<float*>(p.beta), DType::f32, int64_t{T} * Hv, 804, 0.f, 1.f, st));
  normalise_rows(const_cast<void*>(p.q), int64_t{T} * Hk, Dk);
  normalise_rows(const_cast<void*>(p.k), int64_t{T} * Hk, Dk);

  OpCase oc;
  oc.op = "delta_rule.prefill";
  oc.sets = 1;
  oc.bytes = op_bytes::delta_rule(T, N, Hk, Hv, Dk, Dv, dtype_size(act), 4);
  oc.flops = double(N) * op_bytes::delta_rule_wy_flops(s.seq_len, Hv, Dk, Dv);
  oc.setting = true;
  // Against the scan (the first row): bf16 outputs within two bf16 steps, the f32 final state within
  // the tensor-core forms' 1e-4 against the exact chunked reference plus the scan's own 1e-5.
  oc.out_tolerance = 8e-3;
  oc.state_tolerance = 1.1e-4;
  const DeviceLimits dl = DeviceLimits::current();
  for (DeltaPrefill form :
       {DeltaPrefill::scan, DeltaPrefill::chunked, DeltaPrefill::mma, DeltaPrefill::wgmma, DeltaPrefill::wgmma_t}) {
    try {
      resolve_delta_prefill(form, d, /*prefill=*/true, act, dl);  // throws where the form cannot run
    } catch (const Error& e) {
      progress(fmt::format("  delta_rule.prefill {}: not run ({})", delta_prefill_name(form), e.what()));
      continue;
    }
    const std::string name = delta_prefill_name(form);
    switch (form) {
      case DeltaPrefill::scan:
        oc.arms.push_back(
            {name, "delta_rule_prefill", {}, {}, [p](int, cudaStream_t x) { check(delta_rule_prefill(p, x)); }});
        break;
      case DeltaPrefill::chunked:
        oc.arms.push_back({name, "delta_rule_prefill_chunked", {}, {}, [p](int, cudaStream_t x) {
                             check(delta_rule_prefill_chunked(p, x));
                           }});
        break;
      case DeltaPrefill::mma:
        oc.arms.push_back({name, "delta_rule_prefill_mma", {}, {}, [p](int, cudaStream_t x) {
                             check(delta_rule_prefill_mma(p, x));
                           }});
        break;
      case DeltaPrefill::wgmma:
        oc.arms.push_back({name, "delta_rule_prefill_wgmma", {}, {}, [p](int, cudaStream_t x) {
                             check(delta_rule_prefill_wgmma(p, x));
                           }});
        break;
      case DeltaPrefill::wgmma_t: {
        const size_t wb = delta_rule_prefill_wgmma_t_workspace(T, N, Hv);
        void* ws = buf.make(wb);
        oc.arms.push_back({name, "delta_chunk_t+delta_rule_wgmma_t", {}, {}, [p, ws, wb, T](int, cudaStream_t x) {
                             check(delta_rule_prefill_wgmma_t(p, ws, wb, T, x));
                           }});
        break;
      }
      case DeltaPrefill::automatic: break;
    }
  }
  oc.reset = [p, ob, sb](cudaStream_t x) {
    check(cudaMemsetAsync(p.state, 0x5A, sb, x));  // no history: never read, every slot written
    check(cudaMemsetAsync(p.out, 0xA5, ob, x));
  };
  oc.values = [p, ob, sb] {
    Values v{download_bf16(p.out, ob), std::vector<float>(sb / 4)};
    const auto st8 = download(p.state, sb);
    std::memcpy(v.state.data(), st8.data(), sb);
    return v;
  };
  oc.outputs = [p, ob, sb] {
    auto o = download(p.out, ob);
    append(o, download(p.state, sb));
    return o;
  };
  return oc;
}

}  // namespace sg::bench
