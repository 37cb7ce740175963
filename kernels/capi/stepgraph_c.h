/* stepgraph_c.h: stepgraph's C interface (libstepgraph_c.so). One entry point per op (conv.update,
 * postconv, conv.fwd; gdn.prefill's fused arm) on raw device pointers, sizes, strides and dtypes,
 * the arm named by the same strings as everywhere in stepgraph (ARMS.md), and a cudaStream_t
 * passed as void*. Every entry returns 0 or an sg_status code and leaves a message in
 * sg_last_error(); no C++ exception crosses this boundary. C99, no CUDA header needed.
 * Reference: docs/C-API.md. */
#ifndef STEPGRAPH_C_H
#define STEPGRAPH_C_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define SG_C_API __attribute__((visibility("default")))
#else
#define SG_C_API
#endif

/* The interface version this header describes. sg_version() returns the library's; they must be
 * equal (the structs below changed otherwise). Bumped on every incompatible change. */
#define SG_C_API_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of activations, outputs and caches. Weights, biases, A_log, dt_bias, g and beta
 * are always f32; slots and cu_seqlens always int32; has_history uint8. */
typedef enum sg_dtype { SG_F32 = 0, SG_BF16 = 1 } sg_dtype;

/* Return codes. The message of sg_last_error() says which argument and why. */
typedef enum sg_status {
  SG_OK = 0,
  SG_ERR_POINTER = 1,         /* a required pointer is NULL, or not aligned to its element size */
  SG_ERR_ARM = 2,             /* unknown arm name; the message lists the op's valid arms */
  SG_ERR_ARM_UNAVAILABLE = 3, /* a valid arm that this build has no kernel for */
  SG_ERR_DTYPE = 4,           /* a dtype field that is not SG_F32 or SG_BF16 */
  SG_ERR_SIZE = 5,            /* a size, stride or grid limit out of range */
  SG_ERR_SEQLENS = 6,         /* conv.fwd: cu_seqlens not 0, non-decreasing, ending at T */
  SG_ERR_WORKSPACE = 7,       /* conv.fwd: no descriptors and no (large enough) workspace */
  SG_ERR_CAPTURE = 8,         /* conv.fwd: would copy descriptors while the stream is capturing */
  SG_ERR_CUDA = 9,            /* a CUDA call or kernel launch failed; the message has its name */
  SG_ERR_INTERNAL = 10        /* anything else (out of host memory, an unexpected error) */
} sg_status;

/* --- conv.update: causal conv, decode form (one new token per row), slot-indexed state -------- */
/* out[r, c] = silu(bias[c] + sum_j w[c, j] * tap_j) over the K-1 state taps then x[r, c]; the
 * state row then rolls by one and stores x[r, c]. A row with slots[r] < 0 is padding: its output
 * row is zeroed, no state is read or written. Slots of non-padding rows must be distinct and less
 * than the cache's slot count (not checkable here). */
typedef struct sg_conv_update_args {
  const void* x;    /* [rows, x_stride] x_dtype, new raw inputs; columns >= C never read */
  int64_t x_stride; /* elements, >= C */
  sg_dtype x_dtype;
  void* out; /* [rows, C] out_dtype, contiguous */
  sg_dtype out_dtype;
  void* state; /* [num_slots, C, K-1] state_dtype, contiguous; updated in place */
  sg_dtype state_dtype;
  const int32_t* slots; /* [rows] int32; < 0 = padding row */
  const float* w;       /* [C, K] f32, contiguous; tap 0 oldest */
  const float* bias;    /* [C] f32, or NULL */
  int rows;             /* >= 0; 0 is a no-op */
  int C;                /* >= 1 */
  int K;                /* 2..8 */
  int silu;             /* nonzero: apply silu (the model always does) */
} sg_conv_update_args;

/* --- postconv: split the conv output into q | k | v, L2-normalise q and k, compute the gates ---- */
/* Per token t: q[t, h] = x / sqrtf(sum(x^2) + 1e-6) for q head h (k likewise), v copied,
 * beta = 1 / (1 + expf(-b)), g = -expf(A_log) * softplus(a + dt_bias) (docs/MODEL.md step 3). */
typedef struct sg_postconv_args {
  const void* conv;    /* [T, conv_stride] conv_dtype, C = 2*Hk*Dk + Hv*Dv channels q | k | v */
  int64_t conv_stride; /* elements, >= C */
  sg_dtype conv_dtype;
  const void* a;    /* [T, a_stride] ab_dtype, first Hv used */
  int64_t a_stride; /* elements, >= Hv */
  const void* b;    /* [T, b_stride] ab_dtype, first Hv used */
  int64_t b_stride; /* elements, >= Hv */
  sg_dtype ab_dtype;
  const float* A_log;   /* [Hv] f32 */
  const float* dt_bias; /* [Hv] f32 */
  void* q;              /* [T, Hk, Dk] qkv_dtype, contiguous */
  void* k;              /* [T, Hk, Dk] qkv_dtype, contiguous */
  void* v;              /* [T, Hv, Dv] qkv_dtype, contiguous */
  sg_dtype qkv_dtype;
  float* g;    /* [T, Hv] f32, contiguous */
  float* beta; /* [T, Hv] f32, contiguous */
  int T;       /* >= 0; 0 is a no-op */
  int Hk, Hv;  /* >= 1, Hv a multiple of Hk, Hk + Hv <= 65535 */
  int Dk, Dv;  /* 1..256 */
} sg_postconv_args;

/* --- conv.fwd: causal conv, varlen prefill over a packed token stream ------------------------- */
/* One `exact` work item: up to 8 tokens of one sequence (sg::ConvChunk, 12 bytes). A later chunk
 * of a sequence starts a multiple of 8 tokens after the sequence's first token: only tables made by
 * sg_conv_build_chunks are valid (the kernels trap on others). */
typedef struct sg_conv_chunk {
  int32_t seq;   /* sequence index */
  int32_t start; /* first token (row of x) */
  int32_t len;   /* 1..8 */
} sg_conv_chunk;

/* Sequence n < N owns tokens cu_seqlens[n] .. cu_seqlens[n+1]-1; T = cu_seqlens[N]. Tap j of
 * token t reads token t-(K-1-j); a negative index reads state[slots[n]] when has_history[n] != 0,
 * else 0. The new state holds the sequence's last K-1 raw inputs (for fewer tokens, the old state
 * shifted, then the tokens). slots[n] < 0: padding, output rows zeroed, state untouched. A
 * zero-length sequence leaves its state as it was. Output rows T .. max_tokens-1 are untouched.
 * The grid depends only on the buckets (max_tokens, max_seqs, C, K); the live sizes are read on the
 * device, so one captured graph serves every batch of its bucket (conv_fwd.h).
 *
 * The live counts and, for chunks_arm `exact`, the work descriptors come in one of two ways:
 *   (a) device metadata (capture-safe, no copy): n_seqs = device [1] N; for `exact` also chunks =
 *       device [sg_conv_max_chunks(max_tokens, max_seqs)] descriptors of the live batch (the first
 *       *n_chunks used; build them with sg_conv_build_chunks and upload them) and n_chunks =
 *       device [1]. cu_seqlens_host must be NULL.
 *   (b) host metadata (convenient, NOT capture-safe): n_seqs = NULL; cu_seqlens_host = host [N+1]
 *       with the same values as the device cu_seqlens, and a device workspace of at least
 *       sg_conv_fwd_workspace_bytes(max_tokens, max_seqs) bytes. The call builds the descriptors
 *       and copies the counts and descriptors into the workspace with one pageable host-to-device
 *       cudaMemcpyAsync on `stream` (which may synchronise with the stream). On a capturing stream
 *       it returns SG_ERR_CAPTURE; the workspace must not be in use by other streams. T = 0 is a
 *       no-op (nothing is launched). max_tokens = 0 means T, max_seqs = 0 means N.
 * Dtypes: the `tiled` arm takes any mix of f32/bf16 for x, out and state; register, k4 and k4x2
 * need x_dtype == out_dtype (SG_ERR_DTYPE otherwise). out must not alias x or state. */
typedef struct sg_conv_fwd_args {
  const void* x;    /* [>= T, x_stride] x_dtype, raw inputs; columns >= C never read */
  int64_t x_stride; /* elements, >= C */
  sg_dtype x_dtype;
  void* out; /* [>= T, C] out_dtype, contiguous */
  sg_dtype out_dtype;
  void* state; /* [num_slots, C, K-1] state_dtype, contiguous; in place */
  sg_dtype state_dtype;
  const float* w;             /* [C, K] f32, contiguous; tap 0 oldest */
  const float* bias;          /* [C] f32, or NULL */
  const int32_t* cu_seqlens;  /* device [max_seqs + 1] int32; first N+1 live: 0, non-decreasing */
  const int32_t* slots;       /* device [max_seqs] int32; < 0 = padding sequence */
  const uint8_t* has_history; /* device [max_seqs] uint8; nonzero: taps before token 0 read state */
  int C;                      /* >= 1 */
  int K;                      /* 2..8 */
  int max_tokens;             /* token bucket, >= T (the grid's size) */
  int max_seqs;               /* sequence bucket, >= N */
  int silu;                   /* nonzero: apply silu (the model always does) */
  /* (a) device metadata */
  const int32_t* n_seqs;       /* device [1] int32: N; NULL selects (b) */
  const sg_conv_chunk* chunks; /* device [sg_conv_max_chunks(max_tokens, max_seqs)]; exact only */
  const int32_t* n_chunks;     /* device [1] int32; exact only */
  /* (b) host metadata */
  const int32_t* cu_seqlens_host; /* host [N+1] */
  int N;                          /* live sequences, 0..max_seqs */
  void* workspace;                /* device, 16-byte aligned */
  size_t workspace_bytes;
} sg_conv_fwd_args;

/* --- gdn.prefill (fused arm): conv.fwd and postconv in one launch ------------------------------ */
/* The causal conv of a packed varlen batch (as sg_conv_fwd: taps, history, state update, padding)
 * followed by the post-conv prep (as sg_postconv), without storing the conv output: q, k, v, g, beta
 * and the conv state are byte-identical to sg_conv_fwd (arm "tiled") then sg_postconv (arm
 * "megablock") with conv_dtype = x_dtype, except that the tokens of a padding sequence
 * (slots[n] < 0) get zero g and beta (sg_postconv computes them from a and b). Rows T .. of q, k,
 * v, g, beta are untouched. Needs Dk = 128 and Dv a multiple of 8 in 8..256 (SG_ERR_SIZE
 * otherwise: then use sg_conv_fwd and sg_postconv, the unfused arm). Device metadata only (no host
 * copy, capture-safe): the grid depends only on (max_tokens, Hk, Hv, Dv); the live N and
 * cu_seqlens are read on the device, with T = cu_seqlens[N] <= max_tokens and N <= max_seqs (the
 * kernel traps otherwise). Outputs must not alias inputs, the state or each other. */
typedef struct sg_gdn_prefill_args {
  const void* x;    /* [>= T, x_stride] x_dtype, conv inputs q | k | v, C = 2*Hk*Dk + Hv*Dv */
  int64_t x_stride; /* elements, >= C */
  sg_dtype x_dtype; /* also the dtype the conv output is rounded to */
  void* state;      /* [num_slots, C, K-1] state_dtype, contiguous; in place */
  sg_dtype state_dtype;
  const float* w;    /* [C, K] f32, contiguous; tap 0 oldest */
  const float* bias; /* [C] f32, or NULL */
  const void* a;     /* [>= T, a_stride] ab_dtype, first Hv used */
  int64_t a_stride;  /* elements, >= Hv */
  const void* b;     /* [>= T, b_stride] ab_dtype, first Hv used */
  int64_t b_stride;  /* elements, >= Hv */
  sg_dtype ab_dtype;
  const float* A_log;   /* [Hv] f32 */
  const float* dt_bias; /* [Hv] f32 */
  void* q;              /* [>= T, Hk, Dk] qkv_dtype, contiguous */
  void* k;              /* [>= T, Hk, Dk] qkv_dtype, contiguous */
  void* v;              /* [>= T, Hv, Dv] qkv_dtype, contiguous */
  sg_dtype qkv_dtype;
  float* g;                   /* [>= T, Hv] f32, contiguous */
  float* beta;                /* [>= T, Hv] f32, contiguous */
  const int32_t* cu_seqlens;  /* device [max_seqs + 1] int32; first N+1 live: 0, non-decreasing */
  const int32_t* slots;       /* device [max_seqs] int32; < 0 = padding sequence */
  const uint8_t* has_history; /* device [max_seqs] uint8 */
  const int32_t* n_seqs;      /* device [1] int32: N */
  int Hk, Hv;                 /* >= 1, Hv a multiple of Hk */
  int Dk, Dv;                 /* Dk = 128; Dv % 8 == 0, 8..256 */
  int K;                      /* 2..8 */
  int max_tokens;             /* token bucket, >= 1 and >= T */
  int max_seqs;               /* sequence bucket, >= 1 and >= N */
  int silu;                   /* nonzero: apply silu (the model always does) */
} sg_gdn_prefill_args;

/* --- entry points ---------------------------------------------------------------------------- */
/* `arm`: an arm name of the entry's op ("fast", "token_tile", "register", ...), or NULL or "" for
 * the op's default. A requested arm that does not apply to the shape falls back as its contract
 * says (for example k4 with K != 4 runs register); sg_last_launch() says what ran. `stream`: a
 * cudaStream_t (NULL = the legacy default stream) of the calling thread's current device, which
 * must own every device pointer. The call only enqueues work: errors inside the kernel surface on
 * the next synchronisation, not here. */
SG_C_API int sg_conv_update(const sg_conv_update_args* a, const char* arm, void* stream);
SG_C_API int sg_postconv(const sg_postconv_args* a, const char* arm, void* stream);
/* `arm`: conv.fwd's arm; `chunks_arm`: conv.chunks' arm ("exact", "whole"), NULL for default. */
SG_C_API int sg_conv_fwd(const sg_conv_fwd_args* a, const char* arm, const char* chunks_arm, void* stream);
/* gdn.prefill's fused arm (no arm argument: the unfused arm is sg_conv_fwd then sg_postconv). */
SG_C_API int sg_gdn_prefill_fused(const sg_gdn_prefill_args* a, void* stream);

/* Host only (no CUDA): the `exact` descriptors of cu_seqlens_host [N+1] into out[capacity] and
 * their number into *count. out = NULL with capacity = 0 only counts (returns SG_OK); a capacity
 * too small returns SG_ERR_WORKSPACE with *count set. */
SG_C_API int sg_conv_build_chunks(const int32_t* cu_seqlens_host, int N, sg_conv_chunk* out, int capacity, int* count);
/* Host only: the most descriptors a batch of at most max_tokens tokens in at most max_seqs
 * sequences can have (the size of (a)'s chunks buffer), and the workspace (b) needs for that bucket:
 * 16 bytes of counts plus that many descriptors, rounded up to a multiple of 256 bytes. */
SG_C_API int sg_conv_max_chunks(int max_tokens, int max_seqs, int* count);
SG_C_API int sg_conv_fwd_workspace_bytes(int max_tokens, int max_seqs, size_t* bytes);

/* The message of the last entry point called on this thread that returned a code ("" after a
 * success). Owned by the library; valid until the next sg_* call on this thread. */
SG_C_API const char* sg_last_error(void);
/* What the last successful launch on this thread ran: "op=arm kernel grid block smem", plus the
 * fallback when the requested arm did not run. "" when nothing was launched. */
SG_C_API const char* sg_last_launch(void);
/* "SG_OK", "SG_ERR_ARM", ...; "SG_ERR_UNKNOWN" for a code not in sg_status. Static storage. */
SG_C_API const char* sg_status_name(int code);
/* The arm table: one line per op, "conv.fwd     tiled (reference), register (default), k4, k4x2",
 * then a line naming which ops have an entry point here. Static storage. */
SG_C_API const char* sg_arms(void);
/* SG_C_API_VERSION of the built library. */
SG_C_API int sg_version(void);

#ifdef __cplusplus
}
#endif

#endif /* STEPGRAPH_C_H */
