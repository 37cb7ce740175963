// gemm_lt.h: y = x W^T through cuBLASLt with the algorithm chosen per shape by measurement (the
// `lt` GEMM setting of the model step). The same product as gemm_xwt (gemm.h: x [T, in] row-major,
// W [out, in] contiguous, y [T, out], bf16/f16/f32 inputs, f32 accumulation, y of the input dtype
// or f32), but cublasGemmEx's one heuristic pick becomes a choice among cuBLASLt's top heuristic
// algorithms, each timed on the shape at hand, the fastest kept for the life of the object.
//
// tune() measures (host synchronisation, and a scratch of twice the L2 allocated for the call so
// that each timed launch streams W from memory: never inside a capture) and leaves y with the
// chosen algorithm's result; run() launches the chosen algorithm and is graph-safe (no
// allocation, no synchronisation: the workspace is the caller's, e.g. the stream's cuBLAS
// handle's, used by one GEMM at a time on that stream). The shape key holds M, N, K, the row
// strides, the dtypes and the pointer alignments (an algorithm may need aligned operands). A
// choice is shared by every LtGemm of the process (per device and shape), so two steps of one
// process give the same bytes; another process may time its way to another algorithm (the
// manifest names the one that ran) unless it is given this one's choices (lt_add_choice below,
// models/lt_choices.h: --lt-choices). Near ties keep the heuristic's order (a later candidate must
// be 2% faster). Split-K partials are summed in f32 only (as the cuBLAS handle's
// DISALLOW_REDUCED_PRECISION_REDUCTION). Algorithms differ in summation order: results are within
// the GEMM test tolerance of cublasGemmEx.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/tensor.h"

namespace sg {

struct LtShape {
  int64_t M = 0, N = 0, K = 0, ldx = 0, ldy = 0;  // x [M, K] (row stride ldx), W [N, K], y [M, N] (ldy)
  DType in = DType::bf16, out = DType::bf16;
  int align_x = 0, align_w = 0, align_y = 0;  // largest power of two (<= 256) dividing each address
  auto operator<=>(const LtShape&) const = default;
  std::string describe() const;  // "M=32 N=18432 K=2560 bf16->bf16"
};

// The shape of y = x W^T on these views; throws sg::Error on mismatched shapes or dtypes (the
// checks of gemm_xwt).
LtShape lt_shape(const TensorView& x, const TensorView& W, const TensorView& y);

class LtGemm {
 public:
  // candidates: how many heuristic algorithms tune() times (1..32). The workspace (device memory
  // of workspace_bytes) must outlive the object and serve no concurrent GEMM.
  LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes, int candidates = 8);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Times each candidate (a warm-up launch, then the median of 7 launches after an L2 flush) on
  // these views, keeps the fastest for their shape (or the process's earlier choice for it) and
  // leaves its result in y. Not while the stream is capturing (sg::Error). A shape tuned before
  // is kept (the call only reruns its choice).
  void tune(const TensorView& x, const TensorView& W, const TensorView& y);
  bool tuned(const LtShape& s) const;
  // Launches the shape's chosen algorithm; throws sg::Error when the shape was not tuned.
  void run(const TensorView& x, const TensorView& W, const TensorView& y) const;
  // "lt algo=<id> tile=<t> stages=<s> splitk=<k> (heuristic #<i> of <n>)"; throws when not tuned.
  std::string describe(const LtShape& s) const;
  size_t shapes() const;

 private:
  struct Choice;
  cublasStatus_t try_launch(const Choice& c, const TensorView& x, const TensorView& W, const TensorView& y) const;
  void launch(const Choice& c, const TensorView& x, const TensorView& W, const TensorView& y) const;  // checked
  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  int candidates_;
  cublasLtHandle_t handle_ = nullptr;
  std::map<LtShape, std::unique_ptr<Choice>> choices_;
};

// The process's choices, so that they can be kept in a file and given to another process
// (models/lt_choices.h): two runs that share them time nothing and run the same algorithms, which
// makes their times and bytes comparable. The cuBLASLt documentation allows an algorithm's opaque
// bytes to be stored and restored for the same library version.
struct LtChoiceRecord {
  LtShape shape;
  size_t workspace_bytes = 0;      // the LtGemm's workspace the choice was made for
  std::array<uint64_t, 8> algo{};  // cublasLtMatmulAlgo_t, byte for byte
  std::string text;                // describe()'s text
};
// Every choice made or added on CUDA device `device`, in shape order.
std::vector<LtChoiceRecord> lt_choices(int device);
// Adds a choice for `device` unless its (workspace, shape) has one; returns whether it was added.
// tune() takes an added choice as its own and times the shape only when the choice fails to
// launch there (then the timed choice replaces it).
bool lt_add_choice(int device, const LtChoiceRecord& r);
// Forgets every choice of the process (the LtGemm objects keep theirs). For tests.
void lt_clear_choices();
// cublasLtGetVersion(): the library version the choices belong to.
size_t lt_library_version();

}  // namespace sg
