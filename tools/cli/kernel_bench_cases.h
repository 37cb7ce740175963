// kernel_bench_cases.h: private to the kernel benchmark (kernel_bench.cpp, kernel_bench_prefill.cpp):
// an op case (buffers, one launch per arm, reset to the starting state, the outputs to hash) and
// the helpers the cases share. The timer and the decode cases are in kernel_bench.cpp; the prefill
// cases that fuse ops (gdn.prefill) in kernel_bench_prefill.cpp, the prefill forms of the delta rule
// and of attention (settings) in kernel_bench_delta.cpp and kernel_bench_attention.cpp, the
// projections' GEMM forms on decode shapes in kernel_bench_gemm.cpp.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "kernels/contracts.h"
#include "tools/cli/kernel_bench.h"

namespace sg::bench {

// A setting row's outputs and final state as f32 values.
struct Values {
  std::vector<float> out, state;
};

struct OpCase {
  std::string op;
  double bytes = 0;  // per launch
  int sets = 1;
  struct Arm {
    std::string arm, kernel;
    Dim3 grid, block;
    std::function<void(int set, cudaStream_t)> launch;
    bool probe = false;  // a floor probe: timed like the arms, neither hashed nor given bytes
    int channels = 0;    // conv.update fast (and its probes): channels per thread
  };
  std::vector<Arm> arms;
  std::function<void(cudaStream_t)> reset;        // set 0 back to its initial state, outputs poisoned
  std::function<std::vector<uint8_t>()> outputs;  // set 0's outputs and state
  // A setting's values rather than arms (delta_rule.prefill's forms): the rows sum in other orders,
  // so they are compared with the first row by the L2-normalised error of their outputs and
  // states (`values`) against the tolerances, not by bytes.
  bool setting = false;
  double out_tolerance = 0, state_tolerance = 0;
  std::function<Values()> values;
  double flops = 0;  // per launch, where a FLOPs floor applies (delta_rule.prefill's WY products)
};

// Owns the device buffers of an op case.
struct Buffers {
  std::vector<std::unique_ptr<DeviceBuffer>> all;
  void* make(size_t bytes) {
    all.push_back(std::make_unique<DeviceBuffer>(bytes));
    return all.back()->data();
  }
};

// `bytes` bytes at device address p (after a device synchronisation).
std::vector<uint8_t> download(const void* p, size_t bytes);
// The bf16 values of `bytes` bytes at device address p, as f32.
std::vector<float> download_bf16(const void* p, size_t bytes);
void append(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src);

// gdn.prefill on a prefill shape (kernel_bench_prefill.cpp).
OpCase gdn_prefill_case(const KernelShape& s, Buffers& buf, cudaStream_t st);
// delta_rule.prefill's forms on a prefill shape (kernel_bench_delta.cpp); `progress` names the forms
// this device cannot run.
OpCase delta_prefill_case(const KernelShape& s, Buffers& buf, cudaStream_t st,
                          const std::function<void(const std::string&)>& progress);
// The projections' --gemm forms on a decode shape, one case a projection weight (kernel_bench_gemm.cpp).
std::vector<OpCase> gemm_cases(const KernelShape& s, Buffers& buf, cudaStream_t st,
                               const std::function<void(const std::string&)>& progress);
// attention.prefill's forms on a prefill shape, the preset's attention heads (kernel_bench_attention.cpp).
OpCase attention_prefill_case(const KernelShape& s, Buffers& buf, cudaStream_t st,
                              const std::function<void(const std::string&)>& progress);

}  // namespace sg::bench
