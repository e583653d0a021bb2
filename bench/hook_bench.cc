// What libhfhook.so adds to the driver calls on a slice's hot paths
// (issue 6): cuMemAlloc + cuMemFree pairs with 1 and 10,000 live
// allocations, cuMemGetInfo, and cuLaunchKernel without a compute share
// and with one ("share": a second copy of the hook, loaded with a 50%
// work-conserving share in a GPU region of its own, so this process holds
// the GPU's turn: what every launch of a slice with a share pays while it
// runs).
// Each is measured twice against the same fake driver (src/hook/testing):
// "plain" calls the fake's entry points, "hook" calls the hook's wrappers,
// which call the fake. The difference is the hook's cost. Targets:
// <= 100 ns per alloc+free pair whatever the live count, <= 30 ns per
// cuMemGetInfo, <= 5 ns per launch.
//
// The hook is dlopen'ed here (not preloaded), configured through the
// environment before its first call: a quota far above anything used, so
// every call takes the counting path.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Api {
  CUresult (*alloc)(CUdeviceptr*, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*get_info)(size_t*, size_t*);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                     unsigned, unsigned, unsigned, CUstream, void**, void**);
};

Api g_plain;
Api g_hook;
Api g_share;
Api g_sampled;    // a copy of the hook, sampling on (the default)
Api g_unsampled;  // a copy with HETEROFLOW_HOOK_SAMPLING=off
CUfunction g_fn = nullptr;

template <typename T>
void Load(T& field, void* lib, const char* name) {
  field = reinterpret_cast<T>(dlsym(lib, name));
  if (field == nullptr) {
    std::fprintf(stderr, "hook_bench: %s missing: %s\n", name, dlerror());
    std::exit(1);
  }
}

void LoadApi(Api& api, void* lib) {
  Load(api.alloc, lib, "cuMemAlloc_v2");
  Load(api.free, lib, "cuMemFree_v2");
  Load(api.get_info, lib, "cuMemGetInfo_v2");
  Load(api.launch, lib, "cuLaunchKernel");
}

// A copy of the hook (its own state, so its own configuration), loaded.
void* LoadCopy() {
  char copy[] = "/tmp/hf-hook-bench-XXXXXX";
  const int fd = mkstemp(copy);
  FILE* in = std::fopen(HF_HOOK_PATH, "rb");
  if (fd < 0 || in == nullptr) {
    std::fprintf(stderr, "hook_bench: cannot copy the hook\n");
    std::exit(1);
  }
  char buffer[65536];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), in)) > 0;) {
    if (write(fd, buffer, n) != static_cast<ssize_t>(n)) std::exit(1);
  }
  std::fclose(in);
  close(fd);
  void* lib = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
  unlink(copy);
  if (lib == nullptr) {
    std::fprintf(stderr, "hook_bench: %s\n", dlerror());
    std::exit(1);
  }
  return lib;
}

// A copy of the hook without a compute share, sampling `sampling` ("on" or
// "off"), initialised now (its first call reads the environment).
void LoadSamplingCopy(Api& api, const char* sampling) {
  const char* share = std::getenv("HETEROFLOW_SLICE_COMPUTE_PERCENT");
  const std::string kept = share == nullptr ? "" : share;
  unsetenv("HETEROFLOW_SLICE_COMPUTE_PERCENT");
  setenv("HETEROFLOW_HOOK_SAMPLING", sampling, 1);
  LoadApi(api, LoadCopy());
  size_t free = 0;
  size_t total = 0;
  api.get_info(&free, &total);
  unsetenv("HETEROFLOW_HOOK_SAMPLING");
  if (share != nullptr)
    setenv("HETEROFLOW_SLICE_COMPUTE_PERCENT", kept.c_str(), 1);
}

void Setup() {
  setenv("HF_FAKE_CUDA_MEMORY_MB", "1048576", 1);
  setenv("HETEROFLOW_SLICE_MEMORY_MB", "1048576", 1);
  unsetenv("HETEROFLOW_SLICE_COMPUTE_PERCENT");
  unsetenv("HETEROFLOW_HOOK_REGION");
  unsetenv("HETEROFLOW_SLICE_ID");
  void* fake = dlopen(HF_FAKE_CUDA_PATH, RTLD_NOW | RTLD_GLOBAL);
  if (fake == nullptr) {
    std::fprintf(stderr, "hook_bench: %s\n", dlerror());
    std::exit(1);
  }
  void* hook = dlopen(HF_HOOK_PATH, RTLD_NOW | RTLD_LOCAL);
  if (hook == nullptr) {
    std::fprintf(stderr, "hook_bench: %s\n", dlerror());
    std::exit(1);
  }
  LoadApi(g_plain, fake);
  LoadApi(g_hook, hook);
  // The hook reads its configuration at its first call: a copy of the
  // library (its own state) loaded after the share is set takes it.
  setenv("HETEROFLOW_SLICE_COMPUTE_PERCENT", "50", 1);
  setenv("HETEROFLOW_SLICE_COMPUTE_MODE", "work-conserving", 1);
  unsetenv("HETEROFLOW_HOOK_GPU_REGION");
  void* share = LoadCopy();
  LoadApi(g_share, share);
  LoadSamplingCopy(g_sampled, "on");
  LoadSamplingCopy(g_unsampled, "off");
  CUresult (*init)(unsigned int);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*retain)(CUcontext*, CUdevice);
  CUresult (*set_current)(CUcontext);
  CUresult (*load)(CUmodule*, const void*);
  CUresult (*get_function)(CUfunction*, CUmodule, const char*);
  Load(init, fake, "cuInit");
  Load(device_get, fake, "cuDeviceGet");
  Load(retain, hook, "cuDevicePrimaryCtxRetain");
  Load(set_current, fake, "cuCtxSetCurrent");
  Load(load, fake, "cuModuleLoadData");
  Load(get_function, fake, "cuModuleGetFunction");
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  static const char kImage[] = "fake";
  if (init(0) != CUDA_SUCCESS || device_get(&dev, 0) != CUDA_SUCCESS ||
      retain(&ctx, dev) != CUDA_SUCCESS || set_current(ctx) != CUDA_SUCCESS ||
      load(&mod, kImage) != CUDA_SUCCESS ||
      get_function(&g_fn, mod, "k") != CUDA_SUCCESS) {
    std::fprintf(stderr, "hook_bench: the fake driver did not start\n");
    std::exit(1);
  }
}

const Api& ApiFor(const benchmark::State& state) {
  return state.range(0) == 0 ? g_plain : state.range(0) == 1 ? g_hook : g_share;
}

const char* LabelFor(const benchmark::State& state) {
  return state.range(0) == 0 ? "plain" : state.range(0) == 1 ? "hook" : "share";
}

// range(0): 0 plain, 1 hook; range(1): live allocations held meanwhile.
void BM_AllocFree(benchmark::State& state) {
  const Api& api = ApiFor(state);
  std::vector<CUdeviceptr> live(static_cast<size_t>(state.range(1)));
  for (auto& p : live) api.alloc(&p, 4096);
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (api.alloc(&p, 4096) != CUDA_SUCCESS) state.SkipWithError("alloc");
    if (api.free(p) != CUDA_SUCCESS) state.SkipWithError("free");
  }
  for (auto p : live) api.free(p);
  state.SetLabel(state.range(0) == 0 ? "plain" : "hook");
}
BENCHMARK(BM_AllocFree)->ArgsProduct({{0, 1}, {1, 10000}});

void BM_MemGetInfo(benchmark::State& state) {
  const Api& api = ApiFor(state);
  size_t free = 0;
  size_t total = 0;
  for (auto _ : state) {
    api.get_info(&free, &total);
    benchmark::DoNotOptimize(free);
  }
  state.SetLabel(state.range(0) == 0 ? "plain" : "hook");
}
BENCHMARK(BM_MemGetInfo)->Arg(0)->Arg(1);

void BM_LaunchKernel(benchmark::State& state) {
  const Api& api = ApiFor(state);
  for (auto _ : state) {
    api.launch(g_fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  }
  state.SetLabel(LabelFor(state));
}
BENCHMARK(BM_LaunchKernel)->Arg(0)->Arg(1)->Arg(2);

// Interference sampling's cost (docs/HOOK.md, "Interference"): launches
// through a copy of the hook that samples (the default) and one with
// HETEROFLOW_HOOK_SAMPLING=off, in alternating blocks within one run so
// that both see the same machine. Target: overhead_percent <= 1.
void BM_LaunchSampling(benchmark::State& state) {
  constexpr int kBlock = 16384;
  double on_ns = 0;
  double off_ns = 0;
  double launches = 0;
  const auto now = [] { return std::chrono::steady_clock::now(); };
  const auto block = [&](const Api& api) {
    const auto t0 = now();
    for (int i = 0; i < kBlock; ++i) {
      api.launch(g_fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
    }
    return std::chrono::duration<double, std::nano>(now() - t0).count();
  };
  bool sampled_first = true;
  for (auto _ : state) {
    // Alternate which goes first: neither gains from the other's warm-up.
    if (sampled_first) {
      on_ns += block(g_sampled);
      off_ns += block(g_unsampled);
    } else {
      off_ns += block(g_unsampled);
      on_ns += block(g_sampled);
    }
    sampled_first = !sampled_first;
    launches += kBlock;
  }
  state.counters["sampled_ns_per_launch"] = on_ns / launches;
  state.counters["unsampled_ns_per_launch"] = off_ns / launches;
  state.counters["overhead_percent"] = 100.0 * (on_ns - off_ns) / off_ns;
}
BENCHMARK(BM_LaunchSampling);

}  // namespace

int main(int argc, char** argv) {
  Setup();
  // The fake driver's own cost wanders (its heap, its maps): repeat each
  // measurement, interleave plain and hook runs, and read the medians.
  std::vector<char*> args(argv, argv + argc);
  static char repetitions[] = "--benchmark_repetitions=9";
  static char interleave[] = "--benchmark_enable_random_interleaving=true";
  static char min_time[] = "--benchmark_min_time=0.2";
  static char aggregates[] = "--benchmark_report_aggregates_only=true";
  args.insert(args.begin() + 1,
              {repetitions, interleave, min_time, aggregates});
  argc = static_cast<int>(args.size());
  argv = args.data();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
