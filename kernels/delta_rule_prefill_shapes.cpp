// delta_rule_prefill_shapes.cpp: the scan's shape rule (delta_rule_prefill_shapes.h); the chunked
// forms' rules and sizes are constexpr in the header.
#include "kernels/delta_rule_prefill_shapes.h"

#include "kernels/contracts.h"

namespace sg {

bool delta_rule_prefill_supports(int Dk, int Dv) { return delta_rule_decode_split(Dk, Dv) != 0; }

}  // namespace sg
