// argmax_shapes.cpp: the argmax's split and workspace (argmax_shapes.h).
#include "kernels/argmax_shapes.h"

#include <algorithm>

namespace sg {

size_t argmax_workspace_bytes(int rows, int chunks) {
  return rows > 0 && chunks > 1 ? static_cast<size_t>(rows) * static_cast<size_t>(chunks) * kArgmaxPartialBytes : 0;
}

int argmax_pick_chunks(int rows, int64_t V, int num_sms) {
  if (rows <= 0 || V <= 0) return 1;
  const int64_t want = (2 * static_cast<int64_t>(std::max(num_sms, 1)) + rows - 1) / rows;
  const int64_t most = std::max<int64_t>(1, V / kArgmaxChunkLogits);
  return static_cast<int>(std::clamp<int64_t>(want, 1, std::min<int64_t>(most, kArgmaxMaxChunks)));
}

}  // namespace sg
