// gdn_decode_step.h: the walking skeleton: one GDN layer's decode path (conv update, post-conv,
// recurrent delta rule) over slot-indexed caches, run eagerly or as one captured CUDA graph per
// padded batch size. Everything (weights, caches, static step buffers, activations) is carved from
// one arena before the first capture; the arena is frozen before any step runs.
//
// A step: the host pads the live batch to its graph key (slot -1 rows with zero inputs), packs
// slots | x | a | b for that key into pinned memory, uploads it with one async copy into the key's
// static input block, then replays the key's graph (or launches the same sequence eagerly).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/arena.h"
#include "engine/cuda_handles.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "graphs/staged_upload.h"
#include "graphs/step_fault.h"
#include "graphs/step_graphs.h"
#include "kernels/arms.h"
#include "models/gdn_mixer.h"
#include "models/qwen35_config.h"

namespace sg {

struct GdnDecodeOptions {
  int max_seqs = 32;        // rows the static buffers hold
  int graph_max = 32;       // largest captured batch (<= max_seqs); larger batches run eagerly (counted)
  int num_slots = 64;       // cache slots
  DType act = DType::bf16;  // activations (x, a, b, conv out, q, k, v, output)
  uint64_t seed = 1;        // synthetic weights
  ArmSelection arms;
  int layer_index = 0;  // label used in manifests
  // A fault drill (as ModelStepOptions::fault_op): a kernel that faults is launched right after the
  // node of layer layer_index and this op in the captured graphs (empty: none), faulting on the
  // node's run fault_run (from 1, over every graph); the runs before it pass.
  std::string fault_op;
  uint64_t fault_run = 1;
};

// One live decode batch. Row r: slot[r] and its inputs (values as f32; rounded to `act` on upload).
struct DecodeBatch {
  std::vector<int32_t> slots;  // [B], distinct, in [0, num_slots)
  std::vector<float> x;        // [B, C]  the conv input (in_proj_qkv's output in the full model)
  std::vector<float> a, b;     // [B, Hv]
  int rows() const { return static_cast<int>(slots.size()); }
};

class GdnDecodeStep {
 public:
  GdnDecodeStep(const GdnDims& dims, const GdnDecodeOptions& opts);
  GdnDecodeStep(const GdnDecodeStep&) = delete;  // the graph runner's launch callback points here
  GdnDecodeStep& operator=(const GdnDecodeStep&) = delete;

  // Warm-up (one eager run per key), then capture every key, largest first. Attach the CUPTI
  // node timer first when `for_timing` so replays can be mapped to captured nodes.
  void capture_all(bool for_timing = false);

  // Runs one step; returns after the work is enqueued (not synchronised). Padding per the key.
  // Returns the padded row count used.
  int run(const DecodeBatch& batch, RunMode mode);
  // Replays the graph of `key` on the stream without uploading (for timing steady state).
  // Nothing waits for it: sync() or check_step() after the replays reports a fault as this graph's.
  void replay(int key) const;

  // Waits for the steps enqueued so far. A kernel that faulted in one of them is reported as the
  // last step's fault (graphs/step_fault.h): a KernelFault naming its graph (or eager step), the
  // CUDA error and whether the context is lost. A later upload or launch that meets the sticky
  // error of a lost context reports it the same way.
  void sync() const;
  // The same for the caller's own synchronisation or call after steps (a CUDA event, say): an
  // error `e` is reported as the last step's fault; cudaSuccess returns.
  void check_step(cudaError_t e) const { faults_.check(e); }

  // Synchronises and returns raw bytes: output rows [0, rows) ([rows, Hv, Dv] in act dtype),
  // and the whole caches (a fault of the steps before: as sync()).
  std::vector<uint8_t> output_bytes(int rows) const;
  std::vector<uint8_t> conv_state_bytes() const;
  std::vector<uint8_t> ssm_state_bytes() const;
  void set_conv_state_bytes(const std::vector<uint8_t>& bytes);
  void set_ssm_state_bytes(const std::vector<uint8_t>& bytes);
  // Fills both caches with seeded random values (bf16-representable / f32).
  void randomize_states(uint64_t seed);

  // The weights (f32 on the host) so tests can run the CPU reference on the same numbers.
  const std::vector<float>& conv_weight() const { return w_host_; }    // [C, K]
  const std::vector<float>& A_log() const { return A_log_host_; }      // [Hv]
  const std::vector<float>& dt_bias() const { return dt_bias_host_; }  // [Hv]

  const std::vector<int>& keys() const { return keys_; }
  // The graph runner (graph keys: GraphKey::decode(rows)); manifest and graph of one batch key.
  const StepGraphs& graphs() const { return graphs_; }
  const Manifest& manifest(int key) const { return graphs_.manifest(GraphKey::decode(key)); }
  const CapturedGraph& graph(int key) const { return graphs_.graph(GraphKey::decode(key)); }
  int eager_fallbacks() const { return graphs_.eager_fallbacks(); }
  cudaStream_t stream() const { return stream_.get(); }
  // Whether a captured graph holds the fault drill's node; how many times it has run so far (0
  // without a drill; waits for the steps enqueued, a fault of theirs reported as sync() does).
  bool fault_drill_matched() const { return checks_.matched; }
  uint64_t fault_drill_runs() const;
  const GdnDims& dims() const { return dims_; }
  const GdnDecodeOptions& options() const { return opts_; }
  size_t arena_bytes() const { return arena_->capacity(); }
  // Bytes one step of `rows` rows must move (for bandwidth figures), as its nodes are labelled
  // (kernels/op_bytes.h): the unfused path counts its intermediates (written once, read once); the
  // fused arm only its inputs, states and output.
  double step_bytes(int rows) const;

 private:
  struct Views {
    TensorView w, A_log, dt_bias;                // [C, K] f32, [Hv] f32, [Hv] f32
    TensorView conv_state, ssm_state;            // [slots, C, K-1] bf16, [slots, Hv, Dk, Dv] f32
    TensorView io;                               // [io bytes] i8: packed step inputs (largest key)
    TensorView conv_out, q, k, v, g, beta, out;  // activations, rows = max_seqs
  };
  struct IoLayout {
    size_t slots = 0, x = 0, a = 0, b = 0, total = 0;  // byte offsets inside the io block
  };
  void layout(Arena& arena);
  GdnDecodePath path(int rows) const;  // the launches of one step of `rows` rows
  IoLayout io_layout(int rows) const;
  void upload(const DecodeBatch& batch, int rows);
  void stage_padding(int rows);  // warm-up inputs: every row padding (slot -1, zero inputs)
  void launch_sequence(int rows, NodeRecorder* rec);

  GdnDims dims_;
  GdnDecodeOptions opts_;
  Stream stream_;
  std::optional<Arena> arena_;
  Views v_;
  StagedUpload staging_;  // step inputs -> v_.io
  // The step run last (replays too), named in a fault's report. The step has no checked eager
  // mode of its own: the report's way to the node is the whole model's (the same layer's kernels).
  mutable StepFaults faults_{
      ". To name the kernel node, run the same GDN layer checked node by node: `generate --check-nodes` with the "
      "same --preset and arms"};
  std::vector<float> w_host_, A_log_host_, dt_bias_host_;
  std::vector<int> keys_;
  NodeChecks checks_;     // the fault drill (launch_sequence's scope, while one is set)
  DrillRuns drill_runs_;  // its node's runs (checks_.fault_runs)
  StepGraphs graphs_;
};

}  // namespace sg
