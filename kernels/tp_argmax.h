// tp_argmax.h: the greedy token of a tensor-parallel step (models/tp_plan.h): every rank's LM head
// holds a slice of the vocabulary and its argmax gives each row's (best logit, global token id)
// (ArgmaxParams::pairs); after an all-gather each rank holds all ranks' pairs, and this kernel
// picks, per row, the pair that wins under argmax's order (NaN first, then the larger value, then
// the lower id: kernels/argmax_order.cuh), which is the whole row's argmax (tp_greedy's rule,
// models/tp_plan.h). Exact; one thread a row, the grid fixed by the row count (the graph key).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/argmax.h"

namespace sg {

struct TpArgmaxParams {
  const ArgmaxPair* pairs = nullptr;   // [ranks, rank_stride]: rank k's pairs at k * rank_stride
  int ranks = 0;                       // 1 .. 64
  int64_t rank_stride = 0;             // pairs between ranks' blocks, >= rows
  int rows = 0;                        // padded row count, 0 .. 65535 * 256
  int32_t* out = nullptr;              // [rows] token ids
  const int32_t* live_rows = nullptr;  // optional [1]: rows r >= *live_rows get 0
};

// cudaErrorInvalidValue on bad params (the launcher's reason kept, kernels/launch_check.h), else
// the launch error. rows == 0 does nothing.
cudaError_t tp_argmax(const TpArgmaxParams& p, cudaStream_t stream);

}  // namespace sg
