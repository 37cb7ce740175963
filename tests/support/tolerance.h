// tolerance.h: the tests' two normalised error metrics, max_normalised_error and
// l2_normalised_error (defined, with what each bounds, in tools/cli/compare.h, which the probes
// and `stepgraph kernels` use as well).
#pragma once
#include "tools/cli/compare.h"

namespace sg::test {

using diag::l2_normalised_error;
using diag::max_normalised_error;

}  // namespace sg::test
