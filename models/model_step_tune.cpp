// model_step_tune.cpp: `--arms tune` (ModelStepOptions::tune_arms). For each graph key, the arms
// of the ops its kind runs are timed on the key's own shapes, with every row live, and the
// fastest is kept for that key (graphs/arm_tuning.h). Each candidate selection is launched once
// eagerly (nothing initialises lazily inside a capture), captured into a graph of its own and
// timed by replays; the arms are byte-identical, so the choice changes time only.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "engine/error.h"
#include "graphs/marginal.h"
#include "graphs/node_timer.h"
#include "kernels/contracts.h"
#include "models/model_step.h"

namespace sg {
namespace {

constexpr int kTuneReps = 3;            // timed repetitions per selection (median)
constexpr int kTuneDecodeReplays = 10;  // replays per repetition: a decode step is milliseconds,
constexpr int kTunePrefillReplays = 1;  // a prefill step of the largest bucket up to a second

}  // namespace

const ArmSelection& ModelStep::arms_for(const GraphKey& key) const {
  auto it = key_arms_.find(key);
  return it != key_arms_.end() ? it->second : opts_.arms;
}

void ModelStep::stage_live_inputs(const GraphKey& key) {
  const StepLimits limits{opts_.num_slots, cfg_.vocab, opts_.max_context};
  if (key.kind == GraphKind::prefill) {
    // The bucket's tokens in even parts over as many sequences as fit, from position 0.
    const int seqs = std::max(1, std::min(opts_.max_prefill_seqs, opts_.num_slots));
    std::vector<PrefillRequest> batch;
    for (int i = 0; i < seqs; ++i) {
      const int n = std::min(opts_.max_context, key.tokens / seqs + (i < key.tokens % seqs ? 1 : 0));
      PrefillRequest q{i, {}, 0};
      for (int t = 0; t < n; ++t) q.tokens.push_back((i * 7919 + t * 131) % cfg_.vocab);
      batch.push_back(std::move(q));
    }
    upload_metadata(build_prefill_metadata(batch, prefill_key(key.tokens), limits));
  } else {
    std::vector<DecodeRequest> batch;
    for (int r = 0; r < std::min(key.tokens, opts_.num_slots); ++r) batch.push_back({r, (r * 7919) % cfg_.vocab, 0});
    upload_metadata(build_decode_metadata(batch, StepKey::decode(key.tokens), limits));
  }
}

std::vector<size_t> ModelStep::arm_candidates(const GraphKey& key, Op op, const ArmSelection& s) const {
  std::vector<size_t> out;
  if (cfg_.num_linear_attention() == 0 || opts_.fixed_ops[static_cast<size_t>(op)]) return out;
  const GdnDims& g = cfg_.gdn;
  const StepKey k = step_key(key);
  const int rows = k.tokens;
  const bool prefill = key.kind == GraphKind::prefill;
  // The decode shape as gdn_decode_path sees it: the SSM state's size and whether the gated norm
  // fuses into the delta rule (model_step_gdn.cpp; the norm kernel's vector path is assumed).
  const GdnDecodeShape dshape{rows,
                              g.Hk,
                              g.Hv,
                              g.Dk,
                              g.Dv,
                              g.K,
                              static_cast<int>(dtype_size(opts_.ssm_state)),
                              delta_fuses_gated_norm(opts_.gated_norm, rows, static_cast<int64_t>(g.Hv) * g.Dv)};
  // Whether the conv and post-conv ops run inside another kernel: the fused kernel of the key's kind,
  // or in decode the prep arm's conv + post-conv kernel (then their own arms do not run).
  const GdnDecodeArm decode_arm = prefill ? GdnDecodeArm::unfused : gdn_decode_contract(s.gdn_decode, dshape).arm;
  const bool fused =
      prefill ? gdn_prefill_contract(s.gdn_prefill, GdnPrefillShape{rows, k.seqs, g.Hk, g.Hv, g.Dk, g.Dv, g.K}).arm ==
                    GdnPrefillArm::fused
              : decode_arm == GdnDecodeArm::fused || decode_arm == GdnDecodeArm::prep;
  for (size_t a = 0; a < op_info(op).arms.size(); ++a) {
    bool runs = false;  // the arm runs as itself on this key (no contract fallback)
    switch (op) {
      case Op::gdn_decode:
        runs =
            !prefill && gdn_decode_contract(static_cast<GdnDecodeArm>(a), dshape).arm == static_cast<GdnDecodeArm>(a);
        break;
      case Op::gdn_prefill:
        runs = prefill && gdn_prefill_contract(static_cast<GdnPrefillArm>(a),
                                               GdnPrefillShape{rows, k.seqs, g.Hk, g.Hv, g.Dk, g.Dv, g.K})
                                  .arm == static_cast<GdnPrefillArm>(a);
        break;
      case Op::conv_update:
        runs = !prefill && !fused &&
               conv_update_contract(static_cast<ConvUpdateArm>(a), ConvUpdateShape{rows, g.C(), g.K}).arm ==
                   static_cast<ConvUpdateArm>(a);
        break;
      case Op::postconv:
        runs =
            !fused && postconv_contract(static_cast<PostconvArm>(a), PostconvShape{rows, g.Hk, g.Hv, g.Dk, g.Dv}).arm ==
                          static_cast<PostconvArm>(a);
        break;
      case Op::conv_fwd: {
        ArmSelection t = s;
        t.conv_fwd = static_cast<ConvFwdArm>(a);
        runs = prefill && !fused &&
               conv_fwd_contract(t, ConvFwdShape{rows, k.seqs, g.C(), g.K}).arm == static_cast<ConvFwdArm>(a);
        break;
      }
      case Op::conv_chunks: runs = prefill && !fused; break;
    }
    if (runs) out.push_back(a);
  }
  return out;
}

void ModelStep::tune(const std::vector<GraphKey>& keys) {
  constexpr Op kDecodeOps[] = {Op::gdn_decode, Op::conv_update, Op::postconv};
  constexpr Op kPrefillOps[] = {Op::gdn_prefill, Op::conv_fwd, Op::conv_chunks, Op::postconv};
  cudaStream_t s = stream_.get();
  const auto progress = terminal_progress("tuning arms");
  int done = 0;
  for (const GraphKey& key : keys) {
    const bool prefill = key.kind == GraphKind::prefill;
    const int replays = prefill ? kTunePrefillReplays : kTuneDecodeReplays;
    auto time = [&](const ArmSelection& sel) {
      key_arms_[key] = sel;
      stage_live_inputs(key);
      launch_sequence(step_key(key), nullptr);  // eagerly first: no lazy initialisation under capture
      check(cudaStreamSynchronize(s));
      const CapturedGraph g = CapturedGraph::capture(fmt::format("tuning {} {}", describe(key), sel.describe()), s,
                                                     [&] { launch_sequence(step_key(key), nullptr); });
      return median_of(time_replays(g, s, kTuneReps, replays));
    };
    const std::span<const Op> ops = prefill ? std::span<const Op>(kPrefillOps) : std::span<const Op>(kDecodeOps);
    ArmTuning t = tune_arms(
        opts_.arms, ops, [&](Op op, const ArmSelection& cur) { return arm_candidates(key, op, cur); }, time);
    key_arms_[key] = t.arms;
    tuning_[key] = std::move(t.timings);
    if (progress) progress(++done, static_cast<int>(keys.size()), describe(key));
  }
  clear_caches();  // the timed steps wrote the live slots' states and KV rows
  check(cudaStreamSynchronize(s));
}

}  // namespace sg
