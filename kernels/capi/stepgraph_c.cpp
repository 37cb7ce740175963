// stepgraph_c.cpp: the C interface of stepgraph_c.h. Each entry point validates its arguments on
// the host (nothing touches the GPU before the arguments are known to be good), resolves the arm
// name with find_arm, computes the op's launch contract and calls the same C++ launcher the engine
// uses. Every exception is caught here and becomes a code plus a thread-local message.
#include "kernels/capi/stepgraph_c.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/arms.h"
#include "kernels/contracts.h"
#include "kernels/conv_fwd.h"
#include "kernels/conv_update.h"
#include "kernels/gdn_prefill_fused.h"
#include "kernels/launch_check.h"
#include "kernels/numeric.h"
#include "kernels/postconv.h"

// The C structs are read field by field, but ctypes mirrors must agree with C on these sizes.
static_assert(sizeof(sg_dtype) == sizeof(int32_t), "sg_dtype must be int-sized for ctypes (c_int)");
static_assert(sizeof(sg_conv_chunk) == sizeof(sg::ConvChunk) && sizeof(sg_conv_chunk) == 12,
              "sg_conv_chunk must have sg::ConvChunk's layout (it is copied to the device as is)");
static_assert(offsetof(sg_conv_chunk, seq) == offsetof(sg::ConvChunk, seq) &&
              offsetof(sg_conv_chunk, start) == offsetof(sg::ConvChunk, start) &&
              offsetof(sg_conv_chunk, len) == offsetof(sg::ConvChunk, len));

namespace {

using sg::DType;

thread_local std::string t_error;   // sg_last_error()
thread_local std::string t_launch;  // sg_last_launch()

// An argument error: thrown inside an entry point, turned into (code, message) by guarded().
struct CallError {
  int code;
  std::string message;
};

[[noreturn]] void fail(int code, std::string message) { throw CallError{code, std::move(message)}; }

// Sets the thread's message without throwing (falls back to a fixed text when out of memory).
void set_message(std::string& slot, std::string_view fn, std::string_view what) noexcept {
  try {
    slot.assign(fn);
    slot.append(": ");
    slot.append(what);
  } catch (...) {
    try {
      slot.clear();
    } catch (...) {
    }
  }
}

// Runs one entry point: clears both messages, catches everything, returns the code.
template <class F>
int guarded(std::string_view fn, F&& body) noexcept {
  t_error.clear();  // clear() never allocates or throws
  t_launch.clear();
  try {
    body();
    return SG_OK;
  } catch (const CallError& e) {
    set_message(t_error, fn, e.message);
    return e.code;
  } catch (const sg::ArmError& e) {  // an arm value outside its op's arms (the launchers' switches cover every arm)
    set_message(t_error, fn, e.what());
    return SG_ERR_ARM_UNAVAILABLE;
  } catch (const std::invalid_argument& e) {  // contracts and descriptors: shapes out of range
    set_message(t_error, fn, e.what());
    return SG_ERR_SIZE;
  } catch (const std::bad_alloc&) {
    set_message(t_error, fn, "out of host memory");
    return SG_ERR_INTERNAL;
  } catch (const std::exception& e) {
    set_message(t_error, fn, e.what());
    return SG_ERR_INTERNAL;
  } catch (...) {
    set_message(t_error, fn, "unknown exception");
    return SG_ERR_INTERNAL;
  }
}

// --- argument checks ------------------------------------------------------------------------------

// A C caller may store any int in a dtype field, but in C++ loading an sg_dtype whose value lies
// outside the enum's range (0..1) is undefined behaviour: the field's bytes are read as an int.
DType to_dtype(const sg_dtype& d, const char* field) {
  int32_t v = 0;
  std::memcpy(&v, &d, sizeof v);
  switch (v) {
    case SG_F32: return DType::f32;
    case SG_BF16: return DType::bf16;
    default: break;
  }
  fail(SG_ERR_DTYPE, fmt::format("{} must be SG_F32 (0) or SG_BF16 (1) (got {})", field, v));
}

// A required pointer: not NULL and aligned to its element size.
void need_ptr(const void* p, const char* name, size_t elem_bytes) {
  if (p == nullptr) fail(SG_ERR_POINTER, fmt::format("{} is NULL", name));
  if (reinterpret_cast<uintptr_t>(p) % elem_bytes != 0) {
    fail(SG_ERR_POINTER, fmt::format("{} ({}) is not aligned to its element size ({} bytes)", name, p, elem_bytes));
  }
}
// An optional pointer: NULL or aligned.
void opt_ptr(const void* p, const char* name, size_t elem_bytes) {
  if (p != nullptr) need_ptr(p, name, elem_bytes);
}

void need_range(int64_t v, int64_t lo, int64_t hi, const char* name) {
  if (v < lo || v > hi) {
    if (hi == INT64_MAX || hi == INT32_MAX) fail(SG_ERR_SIZE, fmt::format("{} must be >= {} (got {})", name, lo, v));
    fail(SG_ERR_SIZE, fmt::format("{} must be {}..{} (got {})", name, lo, hi, v));
  }
}

void need_stride(int64_t stride, int64_t min, const char* name, const char* what) {
  if (stride < min) fail(SG_ERR_SIZE, fmt::format("{} must be >= {} ({}) (got {})", name, min, what, stride));
}

// The arm of op `Arm` named `name`; NULL or "" is the op's default.
template <class Arm>
Arm resolve_arm(const char* name) {
  const sg::Op op = sg::ArmTraits<Arm>::op;
  if (name == nullptr || *name == '\0') return static_cast<Arm>(sg::op_info(op).default_arm);
  if (auto i = sg::find_arm(op, name)) return static_cast<Arm>(*i);
  fail(SG_ERR_ARM,
       fmt::format("unknown arm '{}' for {}; valid arms: {}", name, sg::op_name(op), sg::valid_arms_list(op)));
}

// The `exact` descriptors of a host cu_seqlens [N+1]; malformed lists are SG_ERR_SEQLENS.
std::vector<sg::ConvChunk> host_chunks(const int32_t* cu_seqlens_host, int N) {
  std::vector<int32_t> cu(cu_seqlens_host, cu_seqlens_host + N + 1);
  try {
    return sg::build_conv_chunks(cu);
  } catch (const std::invalid_argument& e) {
    fail(SG_ERR_SEQLENS, e.what());
  }
}

// conv.fwd workspace (b): 16 bytes of counts (n_seqs, n_chunks, padding), then the descriptors,
// the whole rounded up to 256 bytes.
constexpr size_t kWorkspaceHeader = 16;
size_t workspace_bytes(int max_chunks) {
  const size_t raw = kWorkspaceHeader + static_cast<size_t>(max_chunks) * sizeof(sg::ConvChunk);
  return (raw + 255) / 256 * 256;
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

void check_launch(cudaError_t e, std::string_view kernel) {
  if (e != cudaSuccess) {
    const std::string refusal = sg::take_launch_refusal();  // the launcher's reason, where it gave one
    if (e == cudaErrorInvalidValue && !refusal.empty()) {
      fail(SG_ERR_CUDA,
           fmt::format("launch of {} failed: {}: the launcher refused {}", kernel, cudaGetErrorName(e), refusal));
    }
    fail(SG_ERR_CUDA, fmt::format("launch of {} failed: {}: {}", kernel, cudaGetErrorName(e), cudaGetErrorString(e)));
  }
}

// sg_last_launch()'s text for a contract that ran.
// Never throws: the launch has happened, so a failure here must not turn success into an error.
template <class Arm>
void record_launch(Arm requested, const sg::LaunchContract<Arm>& c, std::string_view extra = {}) noexcept try {
  t_launch =
      fmt::format("{}={} kernel {} grid {} block {} smem {}{}", sg::op_name(sg::ArmTraits<Arm>::op),
                  sg::arm_name(c.arm), c.kernel, sg::to_string(c.grid), sg::to_string(c.block), c.smem_bytes, extra);
  if (c.arm != requested || !c.fallback_reason.empty()) {
    t_launch += fmt::format(" (requested {}: {})", sg::arm_name(requested), c.fallback_reason);
  }
} catch (...) {
  t_launch.clear();
}

}  // namespace

extern "C" {

SG_C_API int sg_version(void) { return SG_C_API_VERSION; }

SG_C_API const char* sg_last_error(void) { return t_error.c_str(); }

SG_C_API const char* sg_last_launch(void) { return t_launch.c_str(); }

SG_C_API const char* sg_status_name(int code) {
  switch (code) {
    case SG_OK: return "SG_OK";
    case SG_ERR_POINTER: return "SG_ERR_POINTER";
    case SG_ERR_ARM: return "SG_ERR_ARM";
    case SG_ERR_ARM_UNAVAILABLE: return "SG_ERR_ARM_UNAVAILABLE";
    case SG_ERR_DTYPE: return "SG_ERR_DTYPE";
    case SG_ERR_SIZE: return "SG_ERR_SIZE";
    case SG_ERR_SEQLENS: return "SG_ERR_SEQLENS";
    case SG_ERR_WORKSPACE: return "SG_ERR_WORKSPACE";
    case SG_ERR_CAPTURE: return "SG_ERR_CAPTURE";
    case SG_ERR_CUDA: return "SG_ERR_CUDA";
    case SG_ERR_INTERNAL: return "SG_ERR_INTERNAL";
    default: return "SG_ERR_UNKNOWN";
  }
}

SG_C_API const char* sg_arms(void) {
  // Built once (thread-safe static initialisation); on failure a fixed text.
  static const std::string table = []() -> std::string {
    try {
      return sg::format_arm_table() +
             "C entry points: sg_conv_update (conv.update), sg_postconv (postconv), sg_conv_fwd (conv.fwd, "
             "conv.chunks), sg_gdn_prefill_fused (gdn.prefill=fused)\n";
    } catch (...) {
      return "(arm table unavailable)\n";
    }
  }();
  return table.c_str();
}

SG_C_API int sg_conv_update(const sg_conv_update_args* a, const char* arm, void* stream) {
  return guarded("sg_conv_update", [&] {
    if (a == nullptr) fail(SG_ERR_POINTER, "args is NULL");
    const auto requested = resolve_arm<sg::ConvUpdateArm>(arm);
    sg::ConvUpdateParams p;
    p.x_dtype = to_dtype(a->x_dtype, "x_dtype");
    p.out_dtype = to_dtype(a->out_dtype, "out_dtype");
    p.state_dtype = to_dtype(a->state_dtype, "state_dtype");
    need_range(a->rows, 0, INT32_MAX, "rows");
    need_range(a->C, 1, INT32_MAX, "C");
    need_range(a->K, sg::kConvMinK, sg::kConvMaxK, "K");
    need_stride(a->x_stride, a->C, "x_stride", "C");
    if (a->rows == 0) return;  // nothing to do; empty tensors may have NULL data
    need_ptr(a->x, "x", sg::dtype_size(p.x_dtype));
    need_ptr(a->out, "out", sg::dtype_size(p.out_dtype));
    need_ptr(a->state, "state", sg::dtype_size(p.state_dtype));
    need_ptr(a->slots, "slots", sizeof(int32_t));
    need_ptr(a->w, "w", sizeof(float));
    opt_ptr(a->bias, "bias", sizeof(float));
    const auto c = sg::conv_update_contract(requested, sg::ConvUpdateShape{a->rows, a->C, a->K});
    p.x = a->x;
    p.x_stride = a->x_stride;
    p.out = a->out;
    p.state = a->state;
    p.slots = a->slots;
    p.w = a->w;
    p.bias = a->bias;
    p.rows = a->rows;
    p.C = a->C;
    p.K = a->K;
    p.silu = a->silu != 0;
    check_launch(sg::conv_update(p, c, as_stream(stream)), c.kernel);
    record_launch(requested, c);
  });
}

SG_C_API int sg_postconv(const sg_postconv_args* a, const char* arm, void* stream) {
  return guarded("sg_postconv", [&] {
    if (a == nullptr) fail(SG_ERR_POINTER, "args is NULL");
    const auto requested = resolve_arm<sg::PostconvArm>(arm);
    sg::PostconvParams p;
    p.conv_dtype = to_dtype(a->conv_dtype, "conv_dtype");
    p.ab_dtype = to_dtype(a->ab_dtype, "ab_dtype");
    p.qkv_dtype = to_dtype(a->qkv_dtype, "qkv_dtype");
    need_range(a->T, 0, INT32_MAX, "T");
    need_range(a->Hk, 1, sg::kMaxGridYZ, "Hk");
    need_range(a->Hv, 1, sg::kMaxGridYZ, "Hv");
    if (a->Hv % a->Hk != 0)
      fail(SG_ERR_SIZE, fmt::format("Hv must be a multiple of Hk (got Hk={}, Hv={})", a->Hk, a->Hv));
    if (static_cast<int64_t>(a->Hk) + a->Hv > sg::kMaxGridYZ) {
      fail(SG_ERR_SIZE, fmt::format("Hk + Hv must be <= {} (got {})", sg::kMaxGridYZ, int64_t{a->Hk} + a->Hv));
    }
    need_range(a->Dk, 1, sg::kPostconvMaxD, "Dk");
    need_range(a->Dv, 1, sg::kPostconvMaxD, "Dv");
    const int64_t C = 2 * int64_t{a->Hk} * a->Dk + int64_t{a->Hv} * a->Dv;
    if (C > INT32_MAX) fail(SG_ERR_SIZE, fmt::format("2*Hk*Dk + Hv*Dv = {} channels exceeds {}", C, INT32_MAX));
    need_stride(a->conv_stride, C, "conv_stride", "C = 2*Hk*Dk + Hv*Dv");
    need_stride(a->a_stride, a->Hv, "a_stride", "Hv");
    need_stride(a->b_stride, a->Hv, "b_stride", "Hv");
    if (a->T == 0) return;
    need_ptr(a->conv, "conv", sg::dtype_size(p.conv_dtype));
    need_ptr(a->a, "a", sg::dtype_size(p.ab_dtype));
    need_ptr(a->b, "b", sg::dtype_size(p.ab_dtype));
    need_ptr(a->A_log, "A_log", sizeof(float));
    need_ptr(a->dt_bias, "dt_bias", sizeof(float));
    need_ptr(a->q, "q", sg::dtype_size(p.qkv_dtype));
    need_ptr(a->k, "k", sg::dtype_size(p.qkv_dtype));
    need_ptr(a->v, "v", sg::dtype_size(p.qkv_dtype));
    need_ptr(a->g, "g", sizeof(float));
    need_ptr(a->beta, "beta", sizeof(float));
    const auto c = sg::postconv_contract(requested, sg::PostconvShape{a->T, a->Hk, a->Hv, a->Dk, a->Dv});
    p.conv = a->conv;
    p.conv_stride = a->conv_stride;
    p.a = a->a;
    p.a_stride = a->a_stride;
    p.b = a->b;
    p.b_stride = a->b_stride;
    p.A_log = a->A_log;
    p.dt_bias = a->dt_bias;
    p.q = a->q;
    p.k = a->k;
    p.v = a->v;
    p.g = a->g;
    p.beta = a->beta;
    p.T = a->T;
    p.Hk = a->Hk;
    p.Hv = a->Hv;
    p.Dk = a->Dk;
    p.Dv = a->Dv;
    check_launch(sg::postconv(p, c, as_stream(stream)), c.kernel);
    record_launch(requested, c);
  });
}

SG_C_API int sg_conv_build_chunks(const int32_t* cu_seqlens_host, int N, sg_conv_chunk* out, int capacity, int* count) {
  return guarded("sg_conv_build_chunks", [&] {
    if (count == nullptr) fail(SG_ERR_POINTER, "count is NULL");
    *count = 0;
    need_range(N, 0, INT32_MAX - 1, "N");
    need_range(capacity, 0, INT32_MAX, "capacity");
    need_ptr(cu_seqlens_host, "cu_seqlens_host", sizeof(int32_t));
    const bool query = out == nullptr && capacity == 0;  // only the count is wanted
    if (!query) need_ptr(out, "out", alignof(sg_conv_chunk));
    const std::vector<sg::ConvChunk> chunks = host_chunks(cu_seqlens_host, N);
    *count = static_cast<int>(chunks.size());
    if (query) return;
    if (static_cast<int64_t>(chunks.size()) > capacity) {
      fail(SG_ERR_WORKSPACE, fmt::format("{} descriptors do not fit in capacity {}", chunks.size(), capacity));
    }
    if (!chunks.empty()) std::memcpy(out, chunks.data(), chunks.size() * sizeof(sg::ConvChunk));
  });
}

SG_C_API int sg_conv_max_chunks(int max_tokens, int max_seqs, int* count) {
  return guarded("sg_conv_max_chunks", [&] {
    if (count == nullptr) fail(SG_ERR_POINTER, "count is NULL");
    *count = 0;
    need_range(max_tokens, 0, INT32_MAX, "max_tokens");
    need_range(max_seqs, 0, INT32_MAX, "max_seqs");
    *count = sg::conv_max_chunks(max_tokens, max_seqs);
  });
}

SG_C_API int sg_conv_fwd_workspace_bytes(int max_tokens, int max_seqs, size_t* bytes) {
  return guarded("sg_conv_fwd_workspace_bytes", [&] {
    if (bytes == nullptr) fail(SG_ERR_POINTER, "bytes is NULL");
    *bytes = 0;
    need_range(max_tokens, 0, INT32_MAX, "max_tokens");
    need_range(max_seqs, 0, INT32_MAX, "max_seqs");
    *bytes = workspace_bytes(sg::conv_max_chunks(max_tokens, max_seqs));
  });
}

SG_C_API int sg_conv_fwd(const sg_conv_fwd_args* a, const char* arm, const char* chunks_arm, void* stream) {
  return guarded("sg_conv_fwd", [&] {
    if (a == nullptr) fail(SG_ERR_POINTER, "args is NULL");
    const auto requested = resolve_arm<sg::ConvFwdArm>(arm);
    const auto split = resolve_arm<sg::ConvChunksArm>(chunks_arm);
    const bool exact = split == sg::ConvChunksArm::exact;
    const bool device_meta = a->n_seqs != nullptr;  // (a); else (b)
    sg::ConvFwdParams p;
    p.x_dtype = to_dtype(a->x_dtype, "x_dtype");
    p.out_dtype = to_dtype(a->out_dtype, "out_dtype");
    p.state_dtype = to_dtype(a->state_dtype, "state_dtype");
    need_range(a->C, 1, INT32_MAX, "C");
    need_range(a->K, sg::kConvMinK, sg::kConvMaxK, "K");
    need_stride(a->x_stride, a->C, "x_stride", "C");

    // The live batch: (b) reads it from the host; (a) only knows the buckets.
    int max_tokens = a->max_tokens, max_seqs = a->max_seqs;
    std::vector<sg::ConvChunk> chunks;
    if (device_meta) {
      if (a->cu_seqlens_host != nullptr) {
        fail(SG_ERR_POINTER, "give either n_seqs (device metadata) or cu_seqlens_host (host metadata), not both");
      }
      need_range(max_tokens, 1, INT32_MAX, "max_tokens (with device metadata)");
      need_range(max_seqs, 1, INT32_MAX, "max_seqs (with device metadata)");
    } else {
      if (a->chunks != nullptr || a->n_chunks != nullptr) {
        fail(SG_ERR_POINTER, "chunks or n_chunks given without n_seqs (device metadata needs all three)");
      }
      need_range(a->N, 0, INT32_MAX - 1, "N");
      need_range(max_tokens, 0, INT32_MAX, "max_tokens");
      need_range(max_seqs, 0, INT32_MAX, "max_seqs");
      if (a->cu_seqlens_host == nullptr) fail(SG_ERR_POINTER, "cu_seqlens_host is NULL and n_seqs is NULL (give one)");
      need_ptr(a->cu_seqlens_host, "cu_seqlens_host", sizeof(int32_t));
      chunks = host_chunks(a->cu_seqlens_host, a->N);  // validates cu_seqlens_host
      const int T = a->cu_seqlens_host[a->N];
      if (max_tokens == 0) max_tokens = T;
      if (max_seqs == 0) max_seqs = a->N;
      if (T > max_tokens)
        fail(SG_ERR_SIZE, fmt::format("T = cu_seqlens_host[N] = {} exceeds max_tokens {}", T, max_tokens));
      if (a->N > max_seqs) fail(SG_ERR_SIZE, fmt::format("N = {} exceeds max_seqs {}", a->N, max_seqs));
      if (T == 0) return;  // no token: no output row, every state untouched
    }
    const auto c = sg::conv_fwd_contract(requested, split, sg::ConvFwdShape{max_tokens, max_seqs, a->C, a->K});
    if (c.arm != sg::ConvFwdArm::tiled && p.x_dtype != p.out_dtype) {
      fail(SG_ERR_DTYPE,
           fmt::format("conv.fwd={} needs x_dtype == out_dtype (tiled takes any mix)", sg::arm_name(c.arm)));
    }

    need_ptr(a->x, "x", sg::dtype_size(p.x_dtype));
    need_ptr(a->out, "out", sg::dtype_size(p.out_dtype));
    need_ptr(a->state, "state", sg::dtype_size(p.state_dtype));
    need_ptr(a->w, "w", sizeof(float));
    opt_ptr(a->bias, "bias", sizeof(float));
    need_ptr(a->cu_seqlens, "cu_seqlens", sizeof(int32_t));
    need_ptr(a->slots, "slots", sizeof(int32_t));
    need_ptr(a->has_history, "has_history", 1);
    const int max_chunks = sg::conv_max_chunks(max_tokens, max_seqs);
    if (device_meta) {
      need_ptr(a->n_seqs, "n_seqs", sizeof(int32_t));
      if (exact) {
        need_ptr(a->chunks, "chunks (chunks_arm exact)", alignof(sg_conv_chunk));
        need_ptr(a->n_chunks, "n_chunks (chunks_arm exact)", sizeof(int32_t));
      }
      p.n_seqs = a->n_seqs;
      p.chunks = exact ? reinterpret_cast<const sg::ConvChunk*>(a->chunks) : nullptr;
      p.n_chunks = exact ? a->n_chunks : nullptr;
    } else {
      const size_t need = workspace_bytes(max_chunks);
      if (a->workspace == nullptr) fail(SG_ERR_WORKSPACE, fmt::format("workspace is NULL ({} bytes needed)", need));
      if (reinterpret_cast<uintptr_t>(a->workspace) % 16 != 0) {
        fail(SG_ERR_WORKSPACE, fmt::format("workspace ({}) is not 16-byte aligned", a->workspace));
      }
      if (a->workspace_bytes < need) {
        fail(SG_ERR_WORKSPACE, fmt::format("workspace has {} bytes, needs {} (sg_conv_fwd_workspace_bytes({}, {}))",
                                           a->workspace_bytes, need, max_tokens, max_seqs));
      }
      if (static_cast<int64_t>(chunks.size()) > max_chunks) {  // cannot happen when T, N fit the buckets
        fail(SG_ERR_INTERNAL, fmt::format("{} descriptors exceed the bucket's {}", chunks.size(), max_chunks));
      }
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      const cudaError_t qe = cudaStreamIsCapturing(as_stream(stream), &capture);
      if (qe == cudaErrorStreamCaptureImplicit || (qe == cudaSuccess && capture != cudaStreamCaptureStatusNone)) {
        if (qe != cudaSuccess) (void)cudaGetLastError();
        fail(SG_ERR_CAPTURE,
             "the stream is being captured: host metadata (cu_seqlens_host) needs a copy, which cannot be "
             "captured; pass device metadata (n_seqs, chunks, n_chunks) instead");
      }
      if (qe != cudaSuccess) {
        (void)cudaGetLastError();
        fail(SG_ERR_CUDA,
             fmt::format("cudaStreamIsCapturing failed: {}: {}", cudaGetErrorName(qe), cudaGetErrorString(qe)));
      }
      if (!exact) chunks.clear();  // `whole` reads only n_seqs
      // Workspace image: [0] n_seqs, [1] n_chunks, pad to 16 bytes, then the descriptors.
      std::vector<uint8_t> image(kWorkspaceHeader + chunks.size() * sizeof(sg::ConvChunk), 0);
      const int32_t counts[2] = {a->N, static_cast<int32_t>(chunks.size())};
      std::memcpy(image.data(), counts, sizeof(counts));
      if (!chunks.empty())
        std::memcpy(image.data() + kWorkspaceHeader, chunks.data(), chunks.size() * sizeof(sg::ConvChunk));
      const cudaError_t ce =
          cudaMemcpyAsync(a->workspace, image.data(), image.size(), cudaMemcpyHostToDevice, as_stream(stream));
      if (ce != cudaSuccess) {
        fail(SG_ERR_CUDA, fmt::format("copy of the chunk descriptors to the workspace failed: {}: {}",
                                      cudaGetErrorName(ce), cudaGetErrorString(ce)));
      }
      auto* ws = static_cast<uint8_t*>(a->workspace);
      p.n_seqs = reinterpret_cast<const int32_t*>(ws);
      p.n_chunks = reinterpret_cast<const int32_t*>(ws + sizeof(int32_t));
      p.chunks = reinterpret_cast<const sg::ConvChunk*>(ws + kWorkspaceHeader);
    }
    p.x = a->x;
    p.x_stride = a->x_stride;
    p.out = a->out;
    p.state = a->state;
    p.w = a->w;
    p.bias = a->bias;
    p.silu = a->silu != 0;
    p.cu_seqlens = a->cu_seqlens;
    p.slots = a->slots;
    p.has_history = a->has_history;
    p.C = a->C;
    p.K = a->K;
    p.max_tokens = max_tokens;
    p.max_seqs = max_seqs;
    check_launch(sg::conv_fwd(p, c, split, as_stream(stream)), c.kernel);
    record_launch(requested, c, fmt::format(" chunks {}", sg::arm_name(split)));
  });
}

SG_C_API int sg_gdn_prefill_fused(const sg_gdn_prefill_args* a, void* stream) {
  return guarded("sg_gdn_prefill_fused", [&] {
    if (a == nullptr) fail(SG_ERR_POINTER, "args is NULL");
    sg::GdnPrefillFusedParams p;
    p.act = to_dtype(a->x_dtype, "x_dtype");
    p.state_dtype = to_dtype(a->state_dtype, "state_dtype");
    p.ab_dtype = to_dtype(a->ab_dtype, "ab_dtype");
    p.qkv_dtype = to_dtype(a->qkv_dtype, "qkv_dtype");
    need_range(a->Hk, 1, INT32_MAX, "Hk");
    need_range(a->Hv, 1, INT32_MAX, "Hv");
    if (a->Hv % a->Hk != 0)
      fail(SG_ERR_SIZE, fmt::format("Hv must be a multiple of Hk (got Hk={}, Hv={})", a->Hk, a->Hv));
    need_range(a->Dk, 1, INT32_MAX, "Dk");
    need_range(a->Dv, 1, INT32_MAX, "Dv");
    need_range(a->K, sg::kConvMinK, sg::kConvMaxK, "K");
    if (!sg::gdn_prefill_fused_supports(a->Dk, a->Dv, a->K)) {
      fail(SG_ERR_SIZE,
           fmt::format("the fused kernel needs Dk = {} and Dv a multiple of 8 in 8..{} (got Dk={}, Dv={}); "
                       "the unfused arm is sg_conv_fwd then sg_postconv",
                       sg::kGdnPrefillGroupChannels, sg::kPostconvMaxD, a->Dk, a->Dv));
    }
    const int64_t C = 2 * int64_t{a->Hk} * a->Dk + int64_t{a->Hv} * a->Dv;
    if (C > INT32_MAX) fail(SG_ERR_SIZE, fmt::format("2*Hk*Dk + Hv*Dv = {} channels exceeds {}", C, INT32_MAX));
    need_stride(a->x_stride, C, "x_stride", "C = 2*Hk*Dk + Hv*Dv");
    need_stride(a->a_stride, a->Hv, "a_stride", "Hv");
    need_stride(a->b_stride, a->Hv, "b_stride", "Hv");
    need_range(a->max_tokens, 1, INT32_MAX, "max_tokens");
    need_range(a->max_seqs, 1, INT32_MAX, "max_seqs");
    const auto c = sg::gdn_prefill_contract(
        sg::GdnPrefillArm::fused, sg::GdnPrefillShape{a->max_tokens, a->max_seqs, a->Hk, a->Hv, a->Dk, a->Dv, a->K});
    need_ptr(a->x, "x", sg::dtype_size(p.act));
    need_ptr(a->state, "state", sg::dtype_size(p.state_dtype));
    need_ptr(a->w, "w", sizeof(float));
    opt_ptr(a->bias, "bias", sizeof(float));
    need_ptr(a->a, "a", sg::dtype_size(p.ab_dtype));
    need_ptr(a->b, "b", sg::dtype_size(p.ab_dtype));
    need_ptr(a->A_log, "A_log", sizeof(float));
    need_ptr(a->dt_bias, "dt_bias", sizeof(float));
    need_ptr(a->q, "q", sg::dtype_size(p.qkv_dtype));
    need_ptr(a->k, "k", sg::dtype_size(p.qkv_dtype));
    need_ptr(a->v, "v", sg::dtype_size(p.qkv_dtype));
    need_ptr(a->g, "g", sizeof(float));
    need_ptr(a->beta, "beta", sizeof(float));
    need_ptr(a->cu_seqlens, "cu_seqlens", sizeof(int32_t));
    need_ptr(a->slots, "slots", sizeof(int32_t));
    need_ptr(a->has_history, "has_history", 1);
    need_ptr(a->n_seqs, "n_seqs", sizeof(int32_t));
    p.x = a->x;
    p.x_stride = a->x_stride;
    p.state = a->state;
    p.w = a->w;
    p.bias = a->bias;
    p.silu = a->silu != 0;
    p.a = a->a;
    p.a_stride = a->a_stride;
    p.b = a->b;
    p.b_stride = a->b_stride;
    p.A_log = a->A_log;
    p.dt_bias = a->dt_bias;
    p.q = a->q;
    p.k = a->k;
    p.v = a->v;
    p.g = a->g;
    p.beta = a->beta;
    p.cu_seqlens = a->cu_seqlens;
    p.slots = a->slots;
    p.has_history = a->has_history;
    p.n_seqs = a->n_seqs;
    p.Hk = a->Hk;
    p.Hv = a->Hv;
    p.Dk = a->Dk;
    p.Dv = a->Dv;
    p.K = a->K;
    p.max_tokens = a->max_tokens;
    p.max_seqs = a->max_seqs;
    check_launch(sg::gdn_prefill_fused(p, c, as_stream(stream)), c.kernel);
    record_launch(sg::GdnPrefillArm::fused, c);
  });
}

}  // extern "C"
