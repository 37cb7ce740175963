// kernel_bench_attention.cpp: the attention.prefill case of `stepgraph kernels`: every form of the
// --attn-prefill setting that runs on this device (simt, mma, wgmma), on a prefill shape with the
// preset's attention heads, timed side by side. The forms are values of a setting, not arms (the
// tensor-core forms split P into bf16 parts and sum in other orders), so each row's outputs are
// compared with simt's (the f32 CUDA-core kernel, first row) by their L2-normalised error, not by
// bytes.
#include <fmt/format.h>

#include <vector>

#include "engine/error.h"
#include "kernels/attention.h"
#include "kernels/attention_prefill_mma.h"
#include "kernels/attention_prefill_wgmma.h"
#include "kernels/fill.h"
#include "kernels/op_bytes.h"
#include "models/step_settings.h"
#include "tools/cli/kernel_bench_cases.h"

namespace sg::bench {

OpCase attention_prefill_case(const KernelShape& s, Buffers& buf, cudaStream_t st,
                              const std::function<void(const std::string&)>& progress) {
  const Qwen35Config cfg = preset(s.model);
  const int N = s.rows, L = s.seq_len, T = s.tokens(), Hq = cfg.Hq, Hkv = cfg.Hkv, D = cfg.D;
  const DType act = DType::bf16;
  const size_t qb = size_t(T) * Hq * D * 2;       // q, gate, out [T, Hq, D]
  const size_t cb = size_t(N) * L * Hkv * D * 2;  // k, v caches [N slots, L positions, Hkv, D]

  // Metadata: N sequences of L tokens without history, token t of sequence n at row n L + t, slot n.
  std::vector<int32_t> pos(static_cast<size_t>(T)), seq(static_cast<size_t>(T)), slots(static_cast<size_t>(N));
  for (int t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = t % L, seq[static_cast<size_t>(t)] = t / L;
  for (int n = 0; n < N; ++n) slots[static_cast<size_t>(n)] = n;
  auto upload = [&](const std::vector<int32_t>& h) {
    auto* d = static_cast<int32_t*>(buf.make(h.size() * 4));
    check(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    return d;
  };
  AttentionParams p;
  p.meta.positions = upload(pos);
  p.meta.token_seq = upload(seq);
  p.meta.slots = upload(slots);
  p.meta.num_tokens = upload({T});
  // The cache as attn_prep leaves it: each sequence's keys and values at its positions (here random).
  p.q = buf.make(qb);
  p.gate = buf.make(qb);
  p.q_dtype = act;
  p.k_cache = buf.make(cb);
  p.v_cache = buf.make(cb);
  p.cache_dtype = act;
  p.out = buf.make(qb);
  p.out_dtype = act;
  p.T = T;
  p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.max_context = L;
  check(fill_uniform(const_cast<void*>(p.q), act, int64_t{T} * Hq * D, 900, -1.f, 1.f, st));
  check(fill_uniform(const_cast<void*>(p.gate), act, int64_t{T} * Hq * D, 901, -2.f, 2.f, st));
  check(fill_uniform(const_cast<void*>(p.k_cache), act, int64_t{N} * L * Hkv * D, 902, -1.f, 1.f, st));
  check(fill_uniform(const_cast<void*>(p.v_cache), act, int64_t{N} * L * Hkv * D, 903, -1.f, 1.f, st));

  OpCase oc;
  oc.op = "attention.prefill";
  oc.sets = 1;
  // q and gate read and out written once; each sequence's keys and values read once (the floor:
  // every form re-reads them per query tile, from L2).
  oc.bytes = 3.0 * double(qb) + 2.0 * double(cb);
  oc.flops = 4.0 * Hq * D * double(N) * op_bytes::causal_pairs(L, 0);  // q K^T and P V
  oc.setting = true;
  // The GPU tests hold every form within 2^-6 |r| + 1e-5 of the f32 reference r, element by element,
  // so ||a - b|| <= 2 (2^-6 ||r|| + 1e-5 sqrt(n)) with ||r|| <= ||b|| / (1 - 2^-6): about 0.0317 ||b||
  // plus an absolute term far below 1e-3 for outputs of these magnitudes; there is no state.
  oc.out_tolerance = 3.2e-2;
  oc.state_tolerance = 0;
  const DeviceLimits dl = DeviceLimits::current();
  for (AttnPrefill form : {AttnPrefill::simt, AttnPrefill::mma, AttnPrefill::wgmma}) {
    try {
      resolve_attn_prefill(form, D, act, act, /*prefill=*/true, dl);  // throws where the form cannot run
    } catch (const Error& e) {
      progress(fmt::format("  attention.prefill {}: not run ({})", attn_prefill_name(form), e.what()));
      continue;
    }
    const std::string name = attn_prefill_name(form);
    if (form == AttnPrefill::simt) {
      oc.arms.push_back(
          {name, "attention_prefill", {}, {}, [p](int, cudaStream_t x) { check(attention_prefill(p, x)); }});
    } else if (form == AttnPrefill::mma) {
      oc.arms.push_back(
          {name, "attention_prefill_mma", {}, {}, [p](int, cudaStream_t x) { check(attention_prefill_mma(p, x)); }});
    } else {
      oc.arms.push_back({name, "attention_prefill_wgmma", {}, {}, [p](int, cudaStream_t x) {
                           check(attention_prefill_wgmma(p, x));
                         }});
    }
  }
  oc.reset = [p, qb](cudaStream_t x) { check(cudaMemsetAsync(p.out, 0xA5, qb, x)); };
  oc.values = [p, qb] { return Values{download_bf16(p.out, qb), {}}; };
  oc.outputs = [p, qb] { return download(p.out, qb); };
  return oc;
}

}  // namespace sg::bench
