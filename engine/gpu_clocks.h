// gpu_clocks.h: what the device's clocks did while a measurement ran. A ClockSampler samples the
// SM and memory clocks, the power draw and the reasons the driver gives for holding the clocks
// down (power cap, thermal or hardware slowdown, ...) every few milliseconds on a thread of its
// own, through NVML (the driver's management library, loaded at run time: where it is missing or
// fails, the sampler says why and a measurement goes on without it). NVML reads the device's
// state and sends nothing to its streams, so sampling does not change what is timed. A kernel that
// runs slower inside a step than alone, or a machine whose GEMMs are slower than another's, shows
// here as a lower SM clock and the reason for it.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace sg {

struct ClockSample {
  unsigned sm_mhz = 0, mem_mhz = 0;
  unsigned power_mw = 0;
  uint64_t reasons = 0;  // NVML's clock event (throttle) reason bits
};

// The reason bits a summary names (NVML's nvmlClocksEventReason* values).
inline constexpr uint64_t kClockIdle = 0x1, kClockAppSetting = 0x2, kClockPowerCap = 0x4, kClockHwSlowdown = 0x8,
                          kClockSyncBoost = 0x10, kClockSwThermal = 0x20, kClockHwThermal = 0x40,
                          kClockPowerBrake = 0x80, kClockDisplay = 0x100;

struct ClockSummary {
  size_t samples = 0;
  unsigned sm_min = 0, sm_median = 0, sm_max = 0;
  unsigned mem_median = 0;
  double power_w_median = 0;
  // For each reason bit set in any sample (idle left out): the bit and how many samples had it.
  std::vector<std::pair<uint64_t, size_t>> reasons;
};

// Medians (the lower of the two middle values for an even count), extremes and reason counts; an
// empty list gives samples == 0 and zeros.
ClockSummary summarize_clocks(const std::vector<ClockSample>& samples);
// "power cap", "hardware slowdown", ... for one reason bit; "reason 0x..." for a bit it does not name.
std::string clock_reason_name(uint64_t bit);
// The bit whose clock_reason_name is `name` (as a report holds it); 0 for a name it does not give.
uint64_t clock_reason_bit(const std::string& name);
// "SM 1980 MHz median (1755 to 1980), memory 3201 MHz, 612 W; held down by: power cap in 12 of 40
// samples" (or "...; no clock limit reported"); "no samples" for an empty summary.
std::string describe_clocks(const ClockSummary& s);
// For a one-line summary: "SM 1485 MHz median, held down by the power cap" where a limiting reason
// (power cap, power brake, hardware or thermal slowdown) held the clock in at least a quarter of
// the samples (the reasons joined by " and "); empty otherwise, and for no samples.
std::string clock_limit_note(const ClockSummary& s);
// Whether two measurements ran at different clocks, for a comparison of their times: empty when
// alike, else a sentence naming the difference. Different means SM clock medians more than 5% apart
// (of the higher), or more than 1% apart with SM clock ranges that do not overlap; or a limiting
// reason (power cap, power brake, hardware or thermal slowdown) in shares of the samples more than a
// quarter apart. Empty when either summary has no samples.
std::string compare_clocks(const ClockSummary& a, const ClockSummary& b, const std::string& name_a = "A",
                           const std::string& name_b = "B");

class ClockSampler {
 public:
  // The CUDA device `cuda_device`, sampled every period_ms milliseconds between start() and stop().
  // Never throws for a missing or failing NVML: available() is false and unavailable_reason() says why.
  explicit ClockSampler(int cuda_device, int period_ms = 20);
  ~ClockSampler();
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  bool available() const { return nvml_ != nullptr; }
  const std::string& unavailable_reason() const { return why_; }
  // Starts sampling (one sample at once, then one a period); a running sampler is restarted. stop()
  // waits for the sampling thread (at most one period).
  void start();
  // Stops and returns the samples since start() (empty when unavailable or not started).
  std::vector<ClockSample> stop();
  // summarize_clocks of samples this sampler took; nullopt when it cannot sample (not available()).
  std::optional<ClockSummary> summarize(const std::vector<ClockSample>& samples) const;

 private:
  struct Nvml;
  bool sample(ClockSample& s) const;
  std::unique_ptr<Nvml> nvml_;
  std::string why_;
  int period_ms_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<ClockSample> samples_;
};

}  // namespace sg
