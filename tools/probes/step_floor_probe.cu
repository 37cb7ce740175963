// step_floor_probe.cu: how fast can a decode step made of one kernel an op be, whatever its kernels
// do? A stand-in of the whole 4B decode-b32 step (context 1024) with the real byte counts and node
// order, built from kernels with no arithmetic: every weight matrix, the LM head and each attention
// layer's KV a read stream (stream_kernels.cuh's loads, 4 blocks an SM), each GDN layer's f32 state
// a read-and-write-back stream (2 blocks an SM), every glue node (norms, conv.update, post-conv,
// the gated norm, attn_prep, embedding, argmax) a small kernel of 32 blocks that reads and writes
// 4 KB. Per layer, in the model's order (three GDN layers, then an attention layer, eight times):
//   GDN:       norm, in_proj 63.2 MB, conv.update, post-conv, state 67.1 MB read + written,
//              gated norm, out_proj 21.0 MB, norm, gate_up 94.4 MB, down 47.2 MB
//   attention: norm, qkv 52.4 MB, attn_prep, KV 134.2 MB, o_proj 21.0 MB, norm, gate_up, down
// then the final norm, the LM head 1271 MB and argmax. Buffers rotate over 2 copies of the step
// (each step's bytes exceed L2 many times over), so nothing is served from L2 across nodes.
// Forms, each one graph of 4 steps, timed as probe_check.h's time_graph does (median of 5):
//   plain     every node a plain launch (each stream ramps up and drains on its own);
//   pdl       every node under programmatic dependent launch: a stream kernel lets the next node
//             launch at its start and issues its first loads (8 a thread: 128 KB an SM of weights,
//             state or KV, none of which the node before writes) before griddepcontrol.wait, as
//             the library's skinny GEMM, delta rule and attention decode do; glue nodes wait,
//             then let the next launch;
//   pdl-noglue  as pdl without the glue nodes (every glue op fused away);
//   pdl-glue1m  as pdl with every glue node reading 1 MB (its 32 blocks 32 KB each, 8 loads a
//             thread in flight) after its wait, about what the real norms read (six f32 partial
//             planes of [32, 2560] a norm: 2 MB): what the glue's own data costs on the chain;
//   pdl-glue1m-wide  the same 1 MB over 128 blocks (8 KB each): what a wider glue kernel buys;
//   pdl-mlp   as pdl with each layer's gate_up and down one stream: what a kernel that runs the
//             whole MLP (gate_up, then down as its inputs are ready) could reach;
//   layer     one read stream a layer of all its bytes, and the LM head: what a kernel a layer
//             could reach;
//   whole     one read stream of all the step's bytes: the card's floor for them, measured;
// then the marginal cost of each stream family in the pdl form: the step without its nodes (their
// buffers' reads and writes left out), subtracted from the pdl step, to set beside the real step's
// node times per family. The step's floor, its bytes over 4.3 TB/s, is printed beside each.
// Usage: step_floor_probe. Build and run on a machine with an sm_90 GPU (repository root):
//   nvcc -O3 -std=c++20 -arch=sm_90a -I. -o /tmp/step_floor_probe tools/probes/step_floor_probe.cu &&
//   /tmp/step_floor_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "tools/probes/probe_check.h"
#include "tools/probes/stream_kernels.cuh"

namespace {

using probe::kThreads;
using probe::launch;
constexpr int kCopies = 2, kSteps = 4, kGlueBlocks = 32;

// A glue node: after the dependency wait (and letting the next node launch) each block reads its
// `per` x 4 KB (per 16-byte loads a thread, all in flight) and writes 4 KB back.
__global__ void __launch_bounds__(kThreads) glue(uint4* buf, int per) {
  probe::dep_wait();
  probe::trigger();
  uint4* blk = buf + static_cast<int64_t>(blockIdx.x) * kThreads * per;
  uint4 acc{};
#pragma unroll 8
  for (int i = 0; i < per; ++i) {
    const uint4 v = blk[i * kThreads + threadIdx.x];
    acc = make_uint4(acc.x + v.x, acc.y ^ v.y, acc.z ^ v.z, acc.w ^ v.w);
  }
  __syncthreads();
  blk[threadIdx.x] = make_uint4(acc.x + 1, acc.y, acc.z, acc.w);
}

enum class Form { plain, pdl, pdl_noglue, pdl_glue1m, pdl_glue1m_wide, pdl_mlp, layer, whole };

// One buffer a stream of the step, in uint4s; a copy of every buffer for each of kCopies steps.
struct Stream {
  const char* name;
  double mb;
  bool rmw = false;
  std::vector<uint4*> copy;
  int64_t n() const { return static_cast<int64_t>(mb * 1e6) / 16; }
};

struct Step {
  int sms = 0;
  Form form = Form::plain;
  cudaStream_t s = nullptr;
  unsigned* sink = nullptr;
  uint4* glue_buf = nullptr;
  int glue_nodes = 0, stream_nodes = 0;
  const Stream* skip = nullptr;  // a family left out (its nodes not launched)

  // Every form but plain, layer and whole launches under programmatic dependent launch.
  bool pdl() const { return form != Form::plain && form != Form::layer && form != Form::whole; }
  void read(const Stream& z, int c) {
    if (&z == skip) return;
    const int grid = 4 * sms;
    const int64_t n = z.n(), per = (n + grid - 1) / grid;
    if (pdl()) {
      launch(probe::read_kernel<true>, grid, true, s, static_cast<const uint4*>(z.copy[c]), n, per, sink);
    } else {
      launch(probe::read_kernel<>, grid, false, s, static_cast<const uint4*>(z.copy[c]), n, per, sink);
    }
    ++stream_nodes;
  }
  void rmw(const Stream& z, int c) {
    if (&z == skip) return;
    const int grid = 2 * sms;
    const int64_t n = z.n(), per = (n + grid - 1) / grid;
    if (form == Form::plain) {
      launch(probe::rmw_kernel<>, grid, false, s, z.copy[c], n, per);
    } else {
      launch(probe::rmw_kernel<false, true>, grid, true, s, z.copy[c], n, per);
    }
    ++stream_nodes;
  }
  void small() {
    if (form == Form::pdl_noglue || form == Form::layer || form == Form::whole) return;
    // 1 MB a node over 32 or 128 blocks, else 4 KB a block over 32.
    const int blocks = form == Form::pdl_glue1m_wide ? 4 * kGlueBlocks : kGlueBlocks;
    const int per = form == Form::pdl_glue1m ? 8 : form == Form::pdl_glue1m_wide ? 2 : 1;
    launch(glue, blocks, pdl(), s, glue_buf, per);
    ++glue_nodes;
  }
};

}  // namespace

int main() {
  cudaDeviceProp prop;
  const int sms = probe_device_props(prop);
  // 4B: hidden 2560, intermediate 9216, GDN q|k|v|z|b|a 12352 rows, attention q|gate|k|v 10240,
  // vocabulary 248320; decode b=32 at context 1024: a GDN layer's f32 state (32 rows x 32 heads x
  // 128 x 128) and an attention layer's KV (32 rows x 1024 positions x 4 kv heads x 256 x K and V).
  Stream in_proj{"in_proj", 12352.0 * 2560 * 2 / 1e6}, out_proj{"out_proj", 2560.0 * 4096 * 2 / 1e6},
      qkv{"qkv", 10240.0 * 2560 * 2 / 1e6}, o_proj{"o_proj", 2560.0 * 4096 * 2 / 1e6},
      gate_up{"gate_up", 18432.0 * 2560 * 2 / 1e6}, down{"down", 2560.0 * 9216 * 2 / 1e6},
      mlp{"mlp", gate_up.mb + down.mb}, lm_head{"lm_head", 248320.0 * 2560 * 2 / 1e6},
      state{"state", 32.0 * 32 * 128 * 128 * 4 / 1e6, true}, kv{"kv", 32.0 * 1024 * 4 * 256 * 2 * 2 / 1e6};
  constexpr int kLayers = 32;
  const double gdn_mb = in_proj.mb + 2 * state.mb + out_proj.mb + gate_up.mb + down.mb;
  const double attn_mb = qkv.mb + kv.mb + o_proj.mb + gate_up.mb + down.mb;
  Stream gdn_layer{"gdn layer", gdn_mb}, attn_layer{"attention layer", attn_mb};
  const double step_mb = 24 * gdn_mb + 8 * attn_mb + lm_head.mb;
  Stream whole{"whole step", step_mb};
  // Every layer has its own weights, state and KV in the model; here each node of a kind reads one
  // buffer a copy (kCopies steps in the graph alternate the copies), larger than L2 together.
  for (Stream* z : {&in_proj, &out_proj, &qkv, &o_proj, &gate_up, &down, &mlp, &lm_head, &state, &kv, &gdn_layer,
                    &attn_layer, &whole})
    for (int c = 0; c < kCopies; ++c) z->copy.push_back(probe::stream_buffer(z->n()));
  const double floor_ms = step_mb / 4.3e3;  // MB / (MB a ms at 4.3 TB/s)
  std::printf(
      "# %s, %d SMs, %.0f MB L2; the 4B decode-b32 step's stand-in: %.1f MB a step, floor %.3f ms at 4.3 TB/s\n",
      prop.name, sms, prop.l2CacheSize / 1e6, step_mb, floor_ms);
  Step st;
  st.sms = sms;
  CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  CK(cudaMalloc(&st.sink, sizeof(unsigned)));
  st.glue_buf = probe::stream_buffer(int64_t{kGlueBlocks} * kThreads * 8);  // 1 MB: the most a glue node reads
  auto one_step = [&](int c) {
    if (st.form == Form::whole) {
      st.read(whole, c);
      return;
    }
    st.small();  // embedding
    for (int l = 0; l < kLayers; ++l) {
      const bool attention = l % 4 == 3;
      if (st.form == Form::layer) {
        st.read(attention ? attn_layer : gdn_layer, c);
        continue;
      }
      st.small();  // input norm
      if (attention) {
        st.read(qkv, c);
        st.small();  // attn_prep
        st.read(kv, c);
        st.read(o_proj, c);
      } else {
        st.read(in_proj, c);
        st.small();  // conv.update
        st.small();  // post-conv
        st.rmw(state, c);
        st.small();  // gated norm
        st.read(out_proj, c);
      }
      st.small();  // post-attention norm
      if (st.form == Form::pdl_mlp) {
        st.read(mlp, c);
      } else {
        st.read(gate_up, c);
        st.read(down, c);
      }
    }
    st.small();  // final norm
    st.read(lm_head, c);
    st.small();  // argmax
  };
  const struct {
    Form form;
    const char* name;
  } forms[] = {{Form::plain, "plain"},
               {Form::pdl, "pdl"},
               {Form::pdl_noglue, "pdl-noglue"},
               {Form::pdl_glue1m, "pdl-glue1m"},
               {Form::pdl_glue1m_wide, "pdl-glue1m-wide"},
               {Form::pdl_mlp, "pdl-mlp"},
               {Form::layer, "layer"},
               {Form::whole, "whole"}};
  auto time_step = [&](Form form, const Stream* skip) {
    st.form = form;
    st.skip = skip;
    st.glue_nodes = st.stream_nodes = 0;
    return time_graph(st.s, kSteps, kCopies, one_step);
  };
  for (int round = 1; round <= 2; ++round) {
    for (const auto& f : forms) {
      const float ms = time_step(f.form, nullptr);
      std::printf(
          "round %d  %-15s  %3d stream + %3d glue nodes a step: %.3f ms a step, %.2f TB/s, floor / step %.0f%%\n",
          round, f.name, st.stream_nodes / kSteps, st.glue_nodes / kSteps, ms, step_mb / ms / 1e3,
          100.0 * floor_ms / ms);
    }
  }
  // Marginal costs in the pdl form (one more pdl step first, as their baseline).
  const float base = time_step(Form::pdl, nullptr);
  std::printf("# marginal cost of each stream family in the pdl form (step %.3f ms without it subtracted)\n", base);
  const int base_nodes = st.stream_nodes;
  for (const Stream* z : {&gate_up, &state, &down, &in_proj, &lm_head, &kv, &out_proj, &qkv, &o_proj}) {
    const float ms = base - time_step(Form::pdl, z);
    const int nodes = (base_nodes - st.stream_nodes) / kSteps;  // the family's nodes a step, left out
    const double mb = z->mb * (z->rmw ? 2 : 1) * nodes;
    std::printf("  %-9s %2d nodes %8.1f MB: %7.1f us, %.2f TB/s\n", z->name, nodes, mb, 1e3 * ms, mb / ms / 1e3);
  }
  CK(cudaGetLastError());
  return 0;
}
