// model_step.h: the whole Qwen3.5 text model's decode and prefill steps on the GPU (docs/MODEL.md),
// composed from the kernels (embedding, rmsnorm with the fused residual, the GDN decode or prefill
// path, attn_prep + attention_decode / attention_prefill, swiglu, argmax) and cuBLAS projections
// (gemm_xwt). Decode keys are padded batch sizes; prefill keys are token buckets (prefill_buckets)
// with room for max_prefill_seqs sequences.
//
// Per layer (x = the residual stream, [rows, H] in the activation dtype):
//   h = rmsnorm(x, input_layernorm)        (fused: x = round(x + previous block's output) first)
//   mix = mixer(h)                          GDN or gated attention
//   h = rmsnorm(x + mix, post_attention_layernorm)  (fused residual: x = round(x + mix))
//   mix = down(swiglu(gate_up(h)))
// then the final norm (fused residual again), lm_head (f32 logits [rows, V]) and argmax. A prefill
// step gathers each sequence's last token row first (embedding kernel over the rows of h, ids =
// last_rows): logits [seqs, V], one row per request (a zero row and token 0 for an empty one).
// GDN mixer: one GEMM over the concatenated [in_proj_qkv | in_proj_z | in_proj_b | in_proj_a]
//   weight ([C + Hv*Dv + 2*Hv, H]) -> conv.update (slot-indexed) -> postconv -> delta_rule.decode
//   (or the gdn.decode=fused arm; =prep: conv + post-conv in one kernel) -> gated_rmsnorm with z -> out_proj. Prefill:
//   conv.fwd (varlen, conv.fwd / conv.chunks arms) -> postconv (or both as the gdn.prefill=fused arm) ->
//   delta_rule.prefill (the sequential scan, or the chunked WY form on CUDA or tensor cores:
//   ModelStepOptions::delta_prefill).
// Attention mixer: one GEMM over [q_proj | k_proj | v_proj] ([2*Hq*D + 2*Hkv*D, H]) -> attn_prep
//   (q/k norm, RoPE at the token's position, KV append) -> attention_decode (sigmoid gate) -> o_proj.
// MLP: one GEMM over gate_proj and up_proj ([2I, H]; their rows interleaved in groups of 8 where
//   I % 8 == 0, else the two halves) -> swiglu -> down_proj. Where the skinny GEMM runs gate_up
//   (decode), SwiGLU is its epilogue: one kernel writes act (the swiglu kernel's bytes).
//
// Memory: one arena (measured, then allocated exactly and frozen) holds the weights (act dtype:
// bf16, or f32 when act is f32; conv1d.weight, A_log and dt_bias are always f32 because the kernels
// take f32 there), the caches (conv state [slots, C, K-1] in the act dtype and SSM state
// [slots, Hv, Dk, Dv] f32, or bf16 with ssm_state, per GDN layer; K and V caches [slots, max_context, Hkv, D] in the
// act dtype per attention layer), the activations for max_decode_batch rows (or max_prefill_tokens rows when larger),
// the attention split-K workspace, the static metadata block (step_metadata.h image of the largest key) and the outputs
// (logits f32 [max(rows, max_prefill_seqs), V], tokens i32). In a prefill step the intermediate activations of padding
// token rows are unspecified (stale); the outputs and every cache are defined.
//
// A step: build_decode_metadata (or build_prefill_metadata) for the padded key, pack_into a pinned
// staging buffer and one async upload into the static block (graphs/staged_upload.h), then the
// graph runner (graphs/step_graphs.h) replays the key's graph or launches the same sequence
// eagerly. Decode keys map to GraphKey::decode(rows), prefill buckets to GraphKey::prefill(bucket).
// Padding rows (slot -1, token_seq -1, past n_tokens) read and write no cache and produce zero rows.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/arena.h"
#include "engine/cuda_handles.h"
#include "engine/gemm_lt.h"
#include "engine/nccl.h"
#include "graphs/arm_tuning.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "graphs/staged_upload.h"
#include "graphs/step_fault.h"
#include "graphs/step_graphs.h"
#include "kernels/arms.h"
#include "models/qwen35_config.h"
#include "models/reference_model.h"  // HostWeights
#include "models/step_layout.h"
#include "models/step_metadata.h"
#include "models/step_settings.h"

namespace sg {

struct GdnIo;            // models/gdn_mixer.h
struct GemmWgmmaParams;  // kernels/gemm_wgmma.h

struct ModelStepOptions {
  int num_slots = 8;           // cache slots
  int max_context = 1024;      // tokens per slot (KV cache length)
  int max_decode_batch = 32;   // rows the static buffers hold; also the largest graph key
  int graph_max = 0;           // largest captured key (0 = max_decode_batch); bigger batches run eagerly
  int max_prefill_tokens = 0;  // tokens one prefill step holds (the largest bucket); 0 = no prefill
  int max_prefill_seqs = 0;    // sequences one prefill step holds (0 = max_decode_batch)
  DType act = DType::bf16;     // activations and weights: bf16 or f32
  ArmSelection arms;
  // The delta rule in prefill steps (also with gdn.prefill=fused); the constructor resolves
  // `automatic`, so options().delta_prefill is scan, chunked, mma, wgmma or wgmma_t afterwards
  // (wgmma_t's chunk records take a workspace in the arena).
  DeltaPrefill delta_prefill = DeltaPrefill::automatic;
  // attention.prefill; the constructor resolves `automatic` (options().attn_prefill is simt or mma
  // afterwards; wgmma only when asked for); an explicit mma or wgmma the shape, dtype or device
  // does not support is an error (with prefill).
  AttnPrefill attn_prefill = AttnPrefill::automatic;
  // attention.decode; the constructor resolves `automatic` (options().attn_decode is simt or mma
  // afterwards); an explicit mma the shape or dtype does not support is an error.
  AttnDecode attn_decode = AttnDecode::automatic;
  // The projections; the constructor resolves `automatic` (options().gemm is wgmma-large, mixed or cublas).
  GemmKind gemm = GemmKind::automatic;
  // How kernels are launched; the constructor resolves `automatic` (options().pdl is off or on).
  PdlMode pdl = PdlMode::automatic;
  SwigluMode swiglu = SwigluMode::automatic;            // where the MLP activation is computed (same bytes either way)
  GatedNormMode gated_norm = GatedNormMode::automatic;  // where a decode step's GDN gated norm is computed (same bytes)
  // Where the projections before each RMSNorm round their output (step_settings.h); the constructor
  // resolves `automatic` (options().mix_round is gemm or norm afterwards).
  MixRound mix_round = MixRound::automatic;
  DType ssm_state = DType::f32;  // the GDN layers' recurrent state: f32 or bf16 (a setting, step_settings.h)
  // `--arms tune`: at capture, for each graph key, time the arms of the ops its kind runs (decode:
  // conv.update, postconv, gdn.decode; prefill: conv.fwd, conv.chunks, postconv, gdn.prefill) on
  // the key's shapes and keep the fastest (graphs/arm_tuning.h; arms are byte-identical, so the
  // outputs do not change). Ops marked in fixed_ops keep their arm from `arms`. Tuning runs real
  // steps on the caches of slots 0, 1, ... and leaves every cache zeroed.
  bool tune_arms = false;
  std::array<bool, kNumOps> fixed_ops{};  // index = Op: an arm the user chose (--arm, STEPGRAPH_ARMS, seed flags)
  uint64_t seed = 1;                      // synthetic GPU weights (init_synthetic)
  bool synthetic = true;                  // fill weights with init_synthetic() in the constructor
  // Finding a kernel that faults (docs/RELIABILITY.md): with check_nodes every eager launch is
  // synchronised and checked, so a kernel that faults is an Error naming its node (run the steps
  // eagerly for that; captured graphs cannot stop between nodes). fault_op (with fault_layer, -1
  // for the nodes outside the layers) names a node for a fault drill: a kernel that faults is
  // launched right after it, in captured graphs and in eager steps with check_nodes. Empty: none.
  // It faults on the node's run fault_run (from 1, counted over every graph and checked eager step
  // that holds the node); the runs before it pass (fault_drill_runs counts them).
  bool check_nodes = false;
  int fault_layer = -1;
  std::string fault_op;
  uint64_t fault_run = 1;
  // Tensor parallelism (models/tp_plan.h, engine/nccl.h): this step is one rank of tp_comm's, each
  // rank a step of its own GPU and stream. Each mixer's and MLP's output ([rows, hidden], the
  // row-parallel projections' partial sums) is summed over the ranks in place by an all-reduce node
  // after attn.o_proj, gdn.out_proj and mlp.down, and the greedy token is picked from every rank's
  // (best logit, token id) pairs (argmax's pairs, an all-gather node, tp_argmax). The ranks must
  // run the same steps in the same order (a collective waits for every rank), each from its own
  // thread, and cannot tune their arms (tune_arms, over more than one rank). The communicator is
  // the step's device's and must outlive the step (NCCL waits for the graphs that captured it).
  // Null: one GPU, no collective.
  ncclComm* tp_comm = nullptr;
  // The LM head's vocabulary rows [head_row0, head_row0 + head_rows) (a tensor-parallel rank's
  // share, TpRank::vocab): the logits are [rows, head_rows] and the tokens global ids. 0 rows: the
  // whole vocabulary (as head_rows = vocab). The weights: load_host_weights takes the rank's
  // lm_head.weight of head_rows rows (shard_weights); synthetic weights copy the embedding's rows
  // where the model ties them, else fill the head as its own tensor.
  int64_t head_row0 = 0;
  int64_t head_rows = 0;
};

struct DecodeOutput {
  int rows = 0;                 // padded row count used (the graph key, or B on an eager fallback)
  std::vector<float> logits;    // [B, V] f32 (V: head_width(), a rank's share of the vocabulary)
  std::vector<int32_t> tokens;  // [B] greedy (argmax on the GPU)
};

struct PrefillOutput {
  int bucket = 0;               // the token bucket used
  std::vector<float> logits;    // [N, V] f32 (V: head_width()): each request's last token (zeros for an empty request)
  std::vector<int32_t> tokens;  // [N] greedy next token (0 for an empty request)
};

class ModelStep {
 public:
  ModelStep(const Qwen35Config& config, const ModelStepOptions& opts);
  ModelStep(const ModelStep&) = delete;  // the graph runner's launch callback points here
  ModelStep& operator=(const ModelStep&) = delete;

  // Fast synthetic weights generated on the GPU with fill_uniform (per tensor seed = f(seed, index));
  // the same scales as synthetic_weights() but NOT the same values (use load_host_weights for that).
  void init_synthetic(uint64_t seed);
  // Uploads HostWeights (checked with check_weights), converted to the weight dtype and
  // concatenated where the step fuses projections, so the GPU and the CPU reference run on identical
  // weights (exactly so when the weights are bf16-representable or the dtype is f32).
  void load_host_weights(const HostWeights& w);

  // Warm-up (every key eagerly on padding-only metadata), then capture every key, largest first,
  // with NodeRecorder labels (layer, op, arm, bytes): the decode keys, then the prefill buckets
  // when `prefill` (and max_prefill_tokens > 0). Attach the CUPTI node timer when for_timing.
  void capture_all(bool for_timing = false, bool prefill = true);
  // The same for the given keys only (GraphKey::decode(k) for k in keys(), GraphKey::prefill(b)
  // for b in prefill_keys(); anything else is an error naming the key and the step's keys).
  void capture(const std::vector<GraphKey>& keys, bool for_timing = false);
  // Asked before each graph's capture: true ends capture_all / capture there, the graphs captured
  // so far kept (Ctrl-C in the commands). Empty: never stops.
  void set_capture_stop(std::function<bool()> stop) { graphs_.set_stop(std::move(stop)); }

  // One decode step: request i is row i. Validates (slots distinct and in range, token ids, position
  // + 1 <= max_context), pads to the key, uploads, runs, synchronises and downloads rows [0, B).
  DecodeOutput decode(const std::vector<DecodeRequest>& batch, RunMode mode);
  // Same without the download or the synchronisation: returns the padded row count.
  int enqueue(const std::vector<DecodeRequest>& batch, RunMode mode);
  // Replays `key`'s graph on the stream with whatever metadata the static block holds (timing).
  // Nothing waits for it: sync() or check_step() after the replays reports a fault as this graph's.
  void replay(int key) const;

  // One prefill step: request i is sequence i (its tokens appended to its slot after
  // start_position cached tokens). Validates (build_prefill_metadata; total tokens must fit
  // max_prefill_tokens, sequences max_prefill_seqs), pads to the smallest bucket, uploads, runs,
  // synchronises and downloads each request's last-token logits and greedy token.
  PrefillOutput prefill(const std::vector<PrefillRequest>& batch, RunMode mode);
  // Same without the download or the synchronisation: returns the bucket.
  int enqueue_prefill(const std::vector<PrefillRequest>& batch, RunMode mode);
  void replay_prefill(int bucket) const;
  // Eagerly launches `bucket`'s sequence on whatever metadata the static block holds (timing).
  void launch_prefill_eager(int bucket);
  // Uploads a prefill batch's metadata (for timing replays of its bucket); returns the bucket.
  int stage_prefill(const std::vector<PrefillRequest>& batch);

  // Waits for the steps enqueued so far (decode, prefill, replays). A kernel that faulted in one of
  // them is reported as the last step's fault: a KernelFault naming its graph (or eager step), the
  // CUDA error, whether the context is lost, and how to name the node (check_nodes).
  void sync() const;
  // The same for the caller's own synchronisation or call after steps (a CUDA event, say): an
  // error `e` is reported as the last step's fault; cudaSuccess returns.
  void check_step(cudaError_t e) const;
  // The same for replays of `key`'s captured graph made outside the step (graphs/marginal.h
  // replays it with groups of nodes disabled) or their synchronisation: `key` becomes the step run
  // last and `e` its fault, `during` saying what the replays did (step_fault.h); cudaSuccess returns.
  void check_replays(const GraphKey& key, cudaError_t e, std::string_view during) const;

  // Synchronises and downloads.
  std::vector<uint8_t> logits_bytes(int rows) const;  // [rows, head_width()] f32
  std::vector<int32_t> tokens(int rows) const;
  // Every cache (conv, SSM, K, V of every layer), concatenated in layer order.
  std::vector<uint8_t> cache_bytes() const;
  void set_cache_bytes(const std::vector<uint8_t>& bytes);
  // Every cache's slice for one slot, concatenated in layer order.
  std::vector<uint8_t> slot_cache_bytes(int slot) const;
  // Writes one slot's slices (the layout slot_cache_bytes reads); the other slots are untouched.
  void set_slot_cache_bytes(int slot, const std::vector<uint8_t>& bytes);
  // Fills every cache with seeded values (fill_uniform in [-1, 1); SSM state scaled by 0.1).
  void randomize_caches(uint64_t seed);
  // Zeroes every cache (all slots forget their sequences).
  void clear_caches();

  const std::vector<int>& keys() const { return keys_; }
  const std::vector<int>& prefill_keys() const { return prefill_keys_; }  // buckets, ascending
  // The graph runner, keyed by GraphKey::decode(rows) and GraphKey::prefill(bucket); the four
  // accessors below are shorthands for its manifest() and graph() with one kind of key.
  const StepGraphs& graphs() const { return graphs_; }
  const Manifest& manifest(int key) const { return graphs_.manifest(GraphKey::decode(key)); }
  const CapturedGraph& graph(int key) const { return graphs_.graph(GraphKey::decode(key)); }
  const Manifest& prefill_manifest(int bucket) const { return graphs_.manifest(GraphKey::prefill(bucket)); }
  const CapturedGraph& prefill_graph(int bucket) const { return graphs_.graph(GraphKey::prefill(bucket)); }
  int max_prefill_seqs() const { return opts_.max_prefill_seqs; }
  // The arms `key`'s sequence runs: the tuned ones after a capture with tune_arms, else options().arms.
  const ArmSelection& arms_for(const GraphKey& key) const;
  int eager_fallbacks() const {
    return graphs_.eager_fallbacks();
  }  // decode and prefill steps run eagerly in graph mode
  cudaStream_t stream() const { return stream_.get(); }
  const Qwen35Config& config() const { return cfg_; }
  const ModelStepOptions& options() const { return opts_; }
  DType weight_dtype() const { return opts_.act; }
  // The KV cache holds the activation dtype: bf16 (the benchmarks) or f32 (parity: the step then
  // rounds nothing the f32 reference does not).
  DType kv_cache_dtype() const { return opts_.act; }
  size_t arena_bytes() const { return arena_->capacity(); }
  // For bandwidth floors: every weight byte (a step reads each once), the recurrent state of one
  // slot over all GDN layers (conv + SSM; a step reads and writes it), and the K + V bytes of one
  // cached token over all attention layers.
  double weight_bytes() const;
  double state_bytes_per_slot() const;
  double kv_bytes_per_token() const;
  int attention_splits(int key) const;
  // The logits' width: the LM head's rows (ModelStepOptions::head_rows, or the vocabulary).
  int64_t head_width() const { return opts_.head_rows > 0 ? opts_.head_rows : cfg_.vocab; }
  // Whether a launch matched the fault drill's node (ModelStepOptions::fault_op) so far.
  bool fault_drill_matched() const { return checks_.matched; }
  // How many times the fault drill's node has run so far (0 without a drill, at once): waits for
  // the steps enqueued (a fault of theirs is reported as sync() does).
  uint64_t fault_drill_runs() const;

 private:
  using GdnLayer = StepGdnLayer;  // the layout's views (models/step_layout.h)
  using AttnLayer = StepAttnLayer;
  using Layer = StepLayer;
  using Acts = StepActs;

  void layout(Arena& a);  // lay_out_step with layout_params(), into the members below
  StepLayoutParams layout_params() const;
  int logit_rows() const;  // L (step_layout.h)
  size_t meta_bytes() const;
  StepKey prefill_key(int bucket) const { return StepKey::prefill(bucket, opts_.max_prefill_seqs); }
  // A step key and its graph key (the kind and the token rows; prefill's sequences are fixed).
  static GraphKey graph_key(const StepKey& key) {
    return key.kind == StepKind::prefill ? GraphKey::prefill(key.tokens) : GraphKey::decode(key.tokens);
  }
  StepKey step_key(const GraphKey& key) const;
  void upload_metadata(const StepMetadata& md);
  // Uploads `md`, then replays its key's graph or launches it eagerly (StepGraphs::run).
  void run_step(const StepMetadata& md, RunMode mode);
  // Downloads the first n rows of logits and tokens (synchronises); an error there is reported as
  // the last step's (step_fault).
  void read_outputs(size_t n, std::vector<float>& logits, std::vector<int32_t>& tokens) const;
  // Runs `key` (StepGraphs::run) and remembers which graph or eager step that was, for step_fault.
  void run_key(const GraphKey& key, RunMode mode);
  // Replays `key`'s graph and remembers it, as run_key does.
  void replay_key(const GraphKey& key) const;
  // The last step failed while it ran: a KernelFault naming its graph (or eager step) and the way
  // to name the node (check_nodes).
  [[noreturn]] void step_fault(cudaError_t e) const;
  // In a catch block, for an Error thrown while a step was uploaded or launched: when the CUDA
  // context is lost, a step run before faulted (the launch only met the sticky error), so that
  // step's fault is thrown; otherwise returns, and the caller rethrows. A KernelFault (a node
  // named by check_nodes) is never replaced.
  void fault_of_earlier_step() const;
  void launch_sequence(const StepKey& key, NodeRecorder* rec);
  // The arms of the sequence being launched (set by launch_sequence from arms_for).
  const ArmSelection& arms() const { return *arms_; }
  // tune_arms (model_step_tune.cpp): per key, the search of graphs/arm_tuning.h over the key's ops.
  void tune(const std::vector<GraphKey>& keys);
  // Stages metadata with every row live (slots 0, 1, ...; decode at position 0, prefill from
  // position 0 in even parts) for timing `key` with real work.
  void stage_live_inputs(const GraphKey& key);
  // The arm indices of `op` that run as themselves on `key`'s shapes with the other ops as in `s`.
  std::vector<size_t> arm_candidates(const GraphKey& key, Op op, const ArmSelection& s) const;
  // gate_up's rows: 8 = gate and up interleaved in groups of 8 (I % 8 == 0), 0 = the two halves.
  int gu_group() const { return cfg_.intermediate % 8 == 0 ? 8 : 0; }
  void gdn_mixer(int layer, const StepKey& key, NodeRecorder* rec);
  // The GDN prefill path of one layer, on the buffers of `io` (gdn_mixer.h).
  // Returns whether the delta rule wrote the gated-normed output (io.norm_w set: the mma form).
  bool gdn_prefill(int layer, const StepKey& key, const GdnIo& io, NodeRecorder* rec);
  void attn_mixer(int layer, const StepKey& key, NodeRecorder* rec);
  void mlp_block(int layer, const StepKey& key, NodeRecorder* rec);
  // Tensor parallel: mix rows [0, rows) summed over the ranks in place, after `after`'s GEMM (a node
  // labelled tp.all_reduce); nothing without a communicator.
  void tp_sum(int layer, int rows, const char* after, NodeRecorder* rec);
  // The output of the projections before each RMSNorm (attn.o_proj, gdn.out_proj, mlp.down) in a
  // step of `rows` rows: mix32's f32 rows where the norm rounds it (mix_round), else mix's.
  TensorView mix_out(int rows) const;
  // y = x W^T by the GEMM setting. With `swiglu` (gate_up only: W's rows interleaved in groups of
  // gu_group()), where the skinny kernel runs it writes swiglu->act = silu(gate) * up in its epilogue
  // instead of y and returns true; else y, and false.
  struct GemmSwiglu {
    TensorView act;            // [rows, I]
    const int32_t* live_rows;  // [1] device: rows at or past it get zeros
  };
  // mix: y is mix_out (a projection before an RMSNorm): under mix-round partials (or residual) a
  // skinny GEMM with its K split leaves its partials in the GEMM workspace and sets mix_left_.planes for
  // the norm after; under residual cublasGemmEx adds the product to the residual stream x instead of
  // writing y, and sets mix_left_.in_x.
  bool gemm(const TensorView& x, const TensorView& W, const TensorView& y, int layer, const char* op, NodeRecorder* rec,
            const GemmSwiglu* swiglu = nullptr, bool mix = false);
  // gemm's launch of the wgmma GEMM (gemm_wgmma.h), labelled as node `op` of `layer`.
  void gemm_wgmma_launch(const GemmWgmmaParams& p, int layer, const char* op, NodeRecorder* rec);
  // What the last residual projection left for the norm after it, set by gemm, read and cleared by
  // the norm, within one launch sequence: split-K partials to sum (planes; 0: none, the norm reads
  // mix or mix32), or its product added to the residual stream (in_x; mix-round residual: the norm
  // reads x alone).
  struct MixLeft {
    int planes = 0;
    bool in_x = false;
  };
  MixLeft mix_left_;
  std::vector<const TensorView*> caches() const;
  // Each cache's slice for one slot (its device address and bytes), in caches() order; an error
  // for a slot outside [0, num_slots).
  std::vector<std::pair<char*, size_t>> slot_slices(int slot) const;

  Qwen35Config cfg_;
  ModelStepOptions opts_;
  Stream stream_;
  // Made once the memory plan has been checked (the handle's workspace is device memory).
  std::optional<CublasHandle> cublas_;
  std::optional<LtGemm> lt_;  // the `lt` GEMM setting's tuned algorithms (shares cublas_'s workspace)
  std::optional<Arena> arena_;
  std::vector<Layer> layers_;
  TensorView embed_, lm_head_, final_norm_;
  Acts a_;
  int sms_ = 0;                                        // SM count (attention split-K choice)
  int tp_ranks_ = 0;                                   // ranks of opts_.tp_comm (0: none)
  StagedUpload staging_;                               // step metadata -> a_.meta
  std::map<GraphKey, ArmSelection> key_arms_;          // tuned arms per key (tune_arms)
  std::map<GraphKey, std::vector<ArmTiming>> tuning_;  // their timings, for the manifests
  const ArmSelection* arms_ = nullptr;                 // arms() while a sequence launches
  std::vector<int> keys_;
  std::vector<int> prefill_keys_;
  NodeChecks checks_;          // check_nodes and the fault drill (set by launch_sequence's scope)
  DrillRuns drill_runs_;       // the drill node's runs (checks_.fault_runs)
  mutable StepFaults faults_;  // the step run last (replays too), named by step_fault
  StepGraphs graphs_;
};

}  // namespace sg
