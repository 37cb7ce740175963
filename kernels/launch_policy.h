// launch_policy.h: how this library's kernels are launched. One choice today: programmatic
// dependent launch (PDL, sm_90+), where a kernel's blocks may start while the previous kernel in
// the stream is finishing; each kernel then waits (griddepcontrol.wait, kernels/launch.cuh) before
// it touches memory that the previous kernel writes or reads. The choice belongs to the thread
// that launches (a step turns it on around its launch sequence with PdlScope), so the launchers'
// signatures stay as they are and a kernel launched from a test or a bench is unchanged.
// Pure C++: the host library (sg_kernels_host) holds the flag.
#pragma once

namespace sg {

// Whether launches from this thread are made with PDL. False unless a PdlScope turned it on.
bool pdl_enabled();

// Sets this thread's PDL choice for its lifetime and restores the previous one.
class PdlScope {
 public:
  explicit PdlScope(bool on);
  ~PdlScope();
  PdlScope(const PdlScope&) = delete;
  PdlScope& operator=(const PdlScope&) = delete;

 private:
  bool previous_;
};

}  // namespace sg
