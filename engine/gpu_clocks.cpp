// gpu_clocks.cpp: clock, power and clock-limit sampling through NVML (gpu_clocks.h).
#include "engine/gpu_clocks.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

namespace sg {

ClockSummary summarize_clocks(const std::vector<ClockSample>& samples) {
  ClockSummary s;
  s.samples = samples.size();
  if (samples.empty()) return s;
  auto median = [&](auto field) {
    std::vector<double> v;
    for (const ClockSample& c : samples) v.push_back(static_cast<double>(field(c)));
    std::sort(v.begin(), v.end());
    return v[(v.size() - 1) / 2];
  };
  s.sm_median = static_cast<unsigned>(median([](const ClockSample& c) { return c.sm_mhz; }));
  s.mem_median = static_cast<unsigned>(median([](const ClockSample& c) { return c.mem_mhz; }));
  s.power_w_median = median([](const ClockSample& c) { return c.power_mw; }) / 1000.0;
  const auto [lo, hi] = std::minmax_element(samples.begin(), samples.end(),
                                            [](const auto& a, const auto& b) { return a.sm_mhz < b.sm_mhz; });
  s.sm_min = lo->sm_mhz;
  s.sm_max = hi->sm_mhz;
  for (int b = 0; b < 64; ++b) {
    const uint64_t bit = uint64_t{1} << b;
    if (bit == kClockIdle) continue;
    const auto n = static_cast<size_t>(
        std::count_if(samples.begin(), samples.end(), [&](const ClockSample& c) { return (c.reasons & bit) != 0; }));
    if (n > 0) s.reasons.emplace_back(bit, n);
  }
  return s;
}

std::string clock_reason_name(uint64_t bit) {
  switch (bit) {
    case kClockIdle: return "idle";
    case kClockAppSetting: return "application clock setting";
    case kClockPowerCap: return "power cap";
    case kClockHwSlowdown: return "hardware slowdown";
    case kClockSyncBoost: return "sync boost";
    case kClockSwThermal: return "software thermal slowdown";
    case kClockHwThermal: return "hardware thermal slowdown";
    case kClockPowerBrake: return "power brake";
    case kClockDisplay: return "display clock setting";
    default: return fmt::format("reason {:#x}", bit);
  }
}

uint64_t clock_reason_bit(const std::string& name) {
  for (int b = 0; b < 64; ++b) {
    const uint64_t bit = uint64_t{1} << b;
    if (clock_reason_name(bit) == name) return bit;
  }
  return 0;
}

std::string describe_clocks(const ClockSummary& s) {
  if (s.samples == 0) return "no samples";
  std::string out = fmt::format("SM {} MHz median ({} to {}), memory {} MHz, {:.0f} W", s.sm_median, s.sm_min, s.sm_max,
                                s.mem_median, s.power_w_median);
  if (s.reasons.empty()) return out + "; no clock limit reported";
  out += "; held down by: ";
  for (size_t i = 0; i < s.reasons.size(); ++i) {
    out += fmt::format("{}{} in {} of {} samples", i == 0 ? "" : ", ", clock_reason_name(s.reasons[i].first),
                       s.reasons[i].second, s.samples);
  }
  return out;
}

namespace {

constexpr uint64_t kClockLimits =
    kClockPowerCap | kClockHwSlowdown | kClockSwThermal | kClockHwThermal | kClockPowerBrake;

// The share of the samples held down by `bit`.
double reason_share(const ClockSummary& s, uint64_t bit) {
  for (const auto& [b, n] : s.reasons)
    if (b == bit) return static_cast<double>(n) / static_cast<double>(s.samples);
  return 0.0;
}

}  // namespace

std::string clock_limit_note(const ClockSummary& s) {
  std::string held;
  for (const auto& [bit, n] : s.reasons) {
    if ((bit & kClockLimits) != 0 && 4 * n >= s.samples) held += (held.empty() ? "" : " and ") + clock_reason_name(bit);
  }
  if (s.samples == 0 || held.empty()) return "";
  return fmt::format("SM {} MHz median, held down by the {}", s.sm_median, held);
}

std::string compare_clocks(const ClockSummary& a, const ClockSummary& b, const std::string& name_a,
                           const std::string& name_b) {
  if (a.samples == 0 || b.samples == 0) return "";
  std::vector<std::string> why;
  // Medians apart by more than 5%, or by more than 1% where the ranges do not overlap either: under
  // a power cap the clock wanders over hundreds of MHz, and medians a step or two apart are noise.
  const unsigned hi = std::max(a.sm_median, b.sm_median);
  const double gap = std::abs(double(a.sm_median) - double(b.sm_median));
  const bool disjoint = a.sm_max < b.sm_min || b.sm_max < a.sm_min;
  if (hi > 0 && (gap > 0.05 * hi || (gap > 0.01 * hi && disjoint))) {
    why.push_back(
        fmt::format("SM clock medians {} MHz ({}) and {} MHz ({})", a.sm_median, name_a, b.sm_median, name_b));
  }
  for (int i = 0; i < 64; ++i) {
    const uint64_t bit = uint64_t{1} << i;
    if ((bit & kClockLimits) == 0) continue;
    const double sa = reason_share(a, bit), sb = reason_share(b, bit);
    if (std::abs(sa - sb) > 0.25) {
      why.push_back(fmt::format("{} in {:.0f}% of {}'s samples and {:.0f}% of {}'s", clock_reason_name(bit), 100 * sa,
                                name_a, 100 * sb, name_b));
    }
  }
  if (why.empty()) return "";
  std::string out = "the clocks differed between the measurements (";
  for (size_t i = 0; i < why.size(); ++i) out += (i ? "; " : "") + why[i];
  return out + ")";
}

// The few NVML entry points the sampler calls, resolved from the driver's library at run time (its
// C ABI: an int status, 0 for success; a device is an opaque pointer).
struct ClockSampler::Nvml {
  void* lib = nullptr;
  void* device = nullptr;
  int (*shutdown)() = nullptr;
  int (*clock)(void*, int, unsigned*) = nullptr;  // nvmlDeviceGetClockInfo: 1 = SM, 2 = memory
  int (*power)(void*, unsigned*) = nullptr;       // nvmlDeviceGetPowerUsage, milliwatts
  int (*reasons)(void*, unsigned long long*) = nullptr;
  ~Nvml() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

ClockSampler::ClockSampler(int cuda_device, int period_ms) : period_ms_(std::max(1, period_ms)) {
  auto nv = std::make_unique<Nvml>();
  nv->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nv->lib) {
    why_ = "NVML (libnvidia-ml.so.1, the driver's management library) is not installed here";
    return;
  }
  auto sym = [&](const char* name) { return dlsym(nv->lib, name); };
  auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
  auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  nv->clock = reinterpret_cast<int (*)(void*, int, unsigned*)>(sym("nvmlDeviceGetClockInfo"));
  nv->power = reinterpret_cast<int (*)(void*, unsigned*)>(sym("nvmlDeviceGetPowerUsage"));
  nv->reasons = reinterpret_cast<int (*)(void*, unsigned long long*)>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
  if (!nv->reasons) {
    nv->reasons =
        reinterpret_cast<int (*)(void*, unsigned long long*)>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
  }
  const auto shutdown = reinterpret_cast<int (*)()>(sym("nvmlShutdown"));
  if (!init || !by_bus || !nv->clock || !nv->power || !nv->reasons || !shutdown) {
    why_ = "this NVML lacks the clock, power or clock-reason queries";
    return;
  }
  if (const int e = init(); e != 0) {
    why_ = fmt::format("NVML did not start (status {})", e);
    return;
  }
  nv->shutdown = shutdown;
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device) != cudaSuccess) {
    cudaGetLastError();
    why_ = fmt::format("CUDA device {} has no PCI bus id to find it in NVML", cuda_device);
    return;
  }
  if (const int e = by_bus(bus, &nv->device); e != 0) {
    why_ = fmt::format("NVML does not know the device at {} (status {})", bus, e);
    return;
  }
  nvml_ = std::move(nv);
  ClockSample probe;
  if (!sample(probe)) {
    nvml_.reset();
    why_ = "NVML refused the clock or power query for this device";
  }
}

ClockSampler::~ClockSampler() { stop(); }

bool ClockSampler::sample(ClockSample& s) const {
  unsigned long long r = 0;
  const bool ok = nvml_->clock(nvml_->device, 1, &s.sm_mhz) == 0 && nvml_->clock(nvml_->device, 2, &s.mem_mhz) == 0 &&
                  nvml_->power(nvml_->device, &s.power_mw) == 0 && nvml_->reasons(nvml_->device, &r) == 0;
  s.reasons = r;
  return ok;
}

void ClockSampler::start() {
  stop();
  if (!nvml_) return;
  ClockSample first;  // one sample now, so that even a short measurement has one
  {
    std::lock_guard<std::mutex> lock(mu_);
    samples_.clear();
    if (sample(first)) samples_.push_back(first);
  }
  running_ = true;
  thread_ = std::thread([this] {
    auto next = std::chrono::steady_clock::now();
    for (;;) {
      next += std::chrono::milliseconds(period_ms_);
      std::this_thread::sleep_until(next);
      if (!running_) break;
      ClockSample s;
      if (sample(s)) {
        std::lock_guard<std::mutex> lock(mu_);
        samples_.push_back(s);
      }
    }
  });
}

std::optional<ClockSummary> ClockSampler::summarize(const std::vector<ClockSample>& samples) const {
  if (!available()) return std::nullopt;
  return summarize_clocks(samples);
}

std::vector<ClockSample> ClockSampler::stop() {
  running_ = false;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(samples_, {});
}

}  // namespace sg
