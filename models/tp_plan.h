// tp_plan.h: how a Qwen3.5 model is split over R GPUs by tensor parallelism (the Megatron form),
// stated once and checked on the CPU. Rank r of R holds 1/R of every layer's heads and of the
// MLP's intermediate size, and 1/R of the vocabulary of the LM head:
//   GDN layer   key heads [Hk r/R, Hk (r+1)/R) and the value heads that belong to them (Hv/Hk a key
//               head, contiguous: value head j belongs to key head j / (Hv/Hk)). in_proj_qkv and
//               conv1d.weight: the rows of its channels (the q and k channels of its key heads, the
//               v channels of its value heads, in that order, so its conv state follows);
//               in_proj_z, in_proj_b, in_proj_a rows, dt_bias, A_log: its value heads; norm.weight
//               [Dv] whole; out_proj: the columns of its value heads (row parallel: the ranks'
//               outputs are summed). The SSM state: its value heads.
//   attention   query heads [Hq r/R, ..) and KV heads [Hkv r/R, ..): whole GQA groups. q_proj: the
//               rows of its query heads (D query rows then D gate rows a head); k_proj, v_proj: the
//               rows of its KV heads; q_norm, k_norm whole; o_proj: the columns of its query heads
//               (row parallel). The KV cache: its KV heads.
//   MLP         intermediate [I r/R, I (r+1)/R): gate_proj and up_proj rows, down_proj columns (row
//               parallel).
//   embedding and norms: whole on every rank (the residual stream is the same on every rank).
//   LM head     vocabulary rows [ceil(V/R) r, ..) (the last rank may hold fewer; with tied
//               embeddings they are the embedding's rows). The greedy token is the first index of
//               the largest logit over the ranks' (largest value, its first index) pairs, a NaN
//               counting as the largest, as in the one-GPU step.
// So a step sums [T, hidden] partial outputs over the ranks twice a layer (after the mixer's
// output projection and after down_proj: an all-reduce each) and gathers R (value, index) pairs a
// row for the greedy token. A rank runs the model of TpRank::config (Hk/R, Hv/R, Hq/R, Hkv/R and
// I/R; the embedding's vocabulary whole) with an LM head of TpRank::vocab's rows, on the tensors
// of shard_weights(). Pure host code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/qwen35_config.h"
#include "models/reference_model.h"

namespace sg {

struct TpRange {
  int64_t begin = 0, end = 0;  // [begin, end)
  int64_t size() const { return end - begin; }
};

struct TpRank {
  int rank = 0;
  TpRange k_heads, v_heads;   // GDN key and value heads (empty when the model has no GDN layer)
  TpRange q_heads, kv_heads;  // attention query and KV heads (empty when it has no attention layer)
  TpRange intermediate;       // MLP
  TpRange vocab;              // LM head rows
  Qwen35Config config;        // the rank's model: heads and intermediate size divided by R
};

struct TpPlan {
  std::vector<TpRank> rank;  // one per rank, in rank order
  Qwen35Config model;        // the whole model the plan splits (the functions below check it)
  int ranks() const { return static_cast<int>(rank.size()); }
};

// The plan for `ranks` GPUs. Throws sg::Error naming every dimension the rank count does not
// divide (GDN key heads, attention query heads, KV heads, intermediate size), rank counts below 1,
// and rank counts that would leave the last rank no vocabulary rows.
TpPlan tp_plan(const Qwen35Config& c, int ranks);

// How a checkpoint tensor is split: along `dim` (0: rows, 1: columns; -1: whole on every rank),
// the rank's pieces in order (their concatenation is the rank's tensor along that dimension).
struct TpSlice {
  int dim = -1;
  std::vector<TpRange> pieces;
};

// The slice of checkpoint tensor `name` (a Hugging Face name of expected_weights(c), or
// lm_head.weight, which a tied config takes from the embedding) for rank r. Throws sg::Error for a
// name the model does not read, a rank outside the plan, or a plan made for another model (here
// and in the functions below).
TpSlice tp_slice(const Qwen35Config& c, const TpPlan& plan, int r, const std::string& name);

// The tensors rank r reads, with their shapes: expected_weights(rank config) with lm_head.weight
// [vocab rows of r, H] always present (the head is never tied on a rank).
std::vector<std::pair<std::string, std::vector<int64_t>>> tp_expected_weights(const Qwen35Config& c, const TpPlan& plan,
                                                                              int r);

// The greedy token from the ranks' LM head rows: per rank, in rank order, its largest logit and
// that logit's first index in the whole vocabulary (ref::argmax over its rows, plus its first row).
// Returns the first index of the largest, a NaN counting as the largest: ref::argmax of the whole
// row. Throws sg::Error on an empty list.
int64_t tp_greedy(const std::vector<std::pair<float, int64_t>>& per_rank);

// Rank r's tensors cut from the whole model's weights `w` (check_weights(c, w) must hold), with the
// shapes of tp_expected_weights(c, plan, r).
HostWeights shard_weights(const Qwen35Config& c, const HostWeights& w, const TpPlan& plan, int r);

}  // namespace sg
