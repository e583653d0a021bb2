// hook_probe: a CUDA driver-API program for the hook's tests. It finds the
// driver one of three ways, as real programs do:
//   --resolve link      linked against libcuda (built as hook_probe_linked)
//   --resolve dlsym     dlopen("libcuda.so.1") + dlsym per entry point
//   --resolve procaddr  dlsym of cuGetProcAddress_v2 only, then every entry
//                       point through it (how the CUDA 12/13 runtime works)
// and runs one command, printing one JSON object per line on stdout:
//   info                     totals as cuMemGetInfo / cuDeviceTotalMem see
//   fill CHUNK_MB            allocate until refused, then free everything
//   paths                    every allocation path: bytes charged and freed
//   storm CHUNK_KB ITERS FILE  random allocs/frees; FILE (8 bytes current +
//                            8 bytes peak, shared) tracks what all storm
//                            processes hold at once
//   threads N ITERS CHUNK_KB the same with N threads in this process
//   fork CHUNK_MB            hold a chunk, fork, the child fills the rest
//   repl                     commands on stdin: alloc MB | free ID | info |
//                            cache PERCENT (allocate PERCENT% of what
//                            cuMemGetInfo calls free, as vLLM sizes its KV
//                            cache) | quit (for live quota changes and kills)
//   launch MS PATH           launch 1-kernel steps for MS milliseconds with
//                            PATH = kernel|ex|coop|graph|ptsz, sync each;
//                            report the fake GPU's busy time
//   loop N                   N alloc+free pairs of 4 KiB (for strace -c)
//   nvml                     NVML's memory info (v1 and v2) for every GPU
//   watch MS                 print `info` whenever the total changes, for
//                            MS milliseconds (a task watching its quota)
// Exit status 0 unless the driver misbehaved in a way the command checks.
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/nvml/nvml_api.h"

#undef cuGetProcAddress

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The entry points the probe uses, however they were found.
struct Api {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemGetInfo_v2)(size_t*, size_t*);
  CUresult (*cuDeviceTotalMem_v2)(size_t*, CUdevice);
  CUresult (*cuMemAllocManaged)(CUdeviceptr*, size_t, unsigned int);
  CUresult (*cuMemAllocPitch_v2)(CUdeviceptr*, size_t*, size_t, size_t,
                                 unsigned int);
  CUresult (*cuMemAllocAsync)(CUdeviceptr*, size_t, CUstream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr*, size_t, CUmemoryPool,
                                      CUstream);
  CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool*, CUdevice);
  CUresult (*cuMemGetAllocationGranularity)(size_t*, const CUmemAllocationProp*,
                                            CUmemAllocationGranularity_flags);
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, size_t,
                          const CUmemAllocationProp*, unsigned long long);
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
  CUresult (*cuArrayCreate_v2)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
  CUresult (*cuArray3DCreate_v2)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
  CUresult (*cuArrayDestroy)(CUarray);
  CUresult (*cuMipmappedArrayCreate)(CUmipmappedArray*,
                                     const CUDA_ARRAY3D_DESCRIPTOR*,
                                     unsigned int);
  CUresult (*cuMipmappedArrayDestroy)(CUmipmappedArray);
  CUresult (*cuMemAllocHost_v2)(void**, size_t);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, CUstream, void**,
                             void**);
  CUresult (*cuLaunchKernel_ptsz)(CUfunction, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**);
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**,
                               void**);
  CUresult (*cuLaunchCooperativeKernel)(CUfunction, unsigned, unsigned,
                                        unsigned, unsigned, unsigned, unsigned,
                                        unsigned, CUstream, void**);
  CUresult (*cuGraphCreate)(CUgraph*, unsigned int);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph,
                                          unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  // The fake driver's test exports (absent from a real driver).
  uint64_t (*hfFakeCudaBusyNs)(int);
};

Api g;
CUdevice g_dev = 0;

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "hook_probe: %s\n", what);
  std::exit(2);
}

const char* ErrName(CUresult r) {
  const char* name = nullptr;
  if (g.cuGetErrorName == nullptr || g.cuGetErrorName(r, &name) != 0 ||
      name == nullptr) {
    return "?";
  }
  return name;
}

#ifdef HF_PROBE_LINKED
extern "C" uint64_t hfFakeCudaBusyNs(int);
extern "C" CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned,
                                        unsigned, unsigned, unsigned, unsigned,
                                        unsigned, CUstream, void**, void**);
#endif

template <typename T>
void Set(T& field, void* p) {
  field = reinterpret_cast<T>(p);
}

// The exported names, for linking and for dlsym.
// clang-format off
#define HF_PROBE_NAMES(X) \
  X(cuInit) \
  X(cuDeviceGet) \
  X(cuDevicePrimaryCtxRetain) \
  X(cuCtxSetCurrent) \
  X(cuCtxSynchronize) \
  X(cuMemAlloc_v2) \
  X(cuMemFree_v2) \
  X(cuMemGetInfo_v2) \
  X(cuDeviceTotalMem_v2) \
  X(cuMemAllocManaged) \
  X(cuMemAllocPitch_v2) \
  X(cuMemAllocAsync) \
  X(cuMemFreeAsync) \
  X(cuMemAllocFromPoolAsync) \
  X(cuDeviceGetDefaultMemPool) \
  X(cuMemGetAllocationGranularity) \
  X(cuMemCreate) \
  X(cuMemRelease) \
  X(cuArrayCreate_v2) \
  X(cuArray3DCreate_v2) \
  X(cuArrayDestroy) \
  X(cuMipmappedArrayCreate) \
  X(cuMipmappedArrayDestroy) \
  X(cuMemAllocHost_v2) \
  X(cuMemFreeHost) \
  X(cuModuleLoadData) \
  X(cuModuleGetFunction) \
  X(cuLaunchKernel) \
  X(cuLaunchKernel_ptsz) \
  X(cuLaunchKernelEx) \
  X(cuLaunchCooperativeKernel) \
  X(cuGraphCreate) \
  X(cuGraphInstantiateWithFlags) \
  X(cuGraphLaunch) \
  X(cuGetErrorName)
// clang-format on

void ResolveLinked() {
#ifdef HF_PROBE_LINKED
#define HF_LINK(name) g.name = &::name;
  HF_PROBE_NAMES(HF_LINK)
  HF_LINK(hfFakeCudaBusyNs)
#undef HF_LINK
#else
  Die("this build is not linked against libcuda (use hook_probe_linked)");
#endif
}

void ResolveDlsym(void* lib) {
#define HF_DLSYM(name) Set(g.name, dlsym(lib, #name));
  HF_PROBE_NAMES(HF_DLSYM)
#undef HF_DLSYM
}

// The base names cuGetProcAddress takes (no _v2: the driver picks).
void ResolveProcAddress(void* lib) {
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t,
                               CUdriverProcAddressQueryResult*);
  auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get == nullptr) Die("no cuGetProcAddress_v2");
  auto proc = [&](const char* base, cuuint64_t flags = 0, int version = 13000) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (get(base, &p, version, flags, &status) != CUDA_SUCCESS) return p;
    return p;
  };
#define HF_PROC(field, base) Set(g.field, proc(base));
  // clang-format off
  HF_PROC(cuInit, "cuInit")
  HF_PROC(cuDeviceGet, "cuDeviceGet")
  HF_PROC(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
  HF_PROC(cuCtxSetCurrent, "cuCtxSetCurrent")
  HF_PROC(cuMemAlloc_v2, "cuMemAlloc")
  HF_PROC(cuMemFree_v2, "cuMemFree")
  HF_PROC(cuMemGetInfo_v2, "cuMemGetInfo")
  HF_PROC(cuDeviceTotalMem_v2, "cuDeviceTotalMem")
  HF_PROC(cuMemAllocManaged, "cuMemAllocManaged")
  HF_PROC(cuMemAllocPitch_v2, "cuMemAllocPitch")
  HF_PROC(cuMemAllocAsync, "cuMemAllocAsync")
  HF_PROC(cuMemFreeAsync, "cuMemFreeAsync")
  HF_PROC(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync")
  HF_PROC(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool")
  HF_PROC(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity")
  HF_PROC(cuMemCreate, "cuMemCreate")
  HF_PROC(cuMemRelease, "cuMemRelease")
  HF_PROC(cuArrayCreate_v2, "cuArrayCreate")
  HF_PROC(cuArray3DCreate_v2, "cuArray3DCreate")
  HF_PROC(cuArrayDestroy, "cuArrayDestroy")
  HF_PROC(cuMipmappedArrayCreate, "cuMipmappedArrayCreate")
  HF_PROC(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy")
  HF_PROC(cuMemAllocHost_v2, "cuMemAllocHost")
  HF_PROC(cuMemFreeHost, "cuMemFreeHost")
  HF_PROC(cuModuleLoadData, "cuModuleLoadData")
  HF_PROC(cuModuleGetFunction, "cuModuleGetFunction")
  HF_PROC(cuLaunchKernel, "cuLaunchKernel")
  HF_PROC(cuLaunchKernelEx, "cuLaunchKernelEx")
  HF_PROC(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel")
  HF_PROC(cuGraphCreate, "cuGraphCreate")
  HF_PROC(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")
  HF_PROC(cuGraphLaunch, "cuGraphLaunch")
  HF_PROC(cuGetErrorName, "cuGetErrorName")
  // clang-format on
#undef HF_PROC
  // CUDA 13 gave cuCtxSynchronize a context argument (cuCtxSynchronize_v2);
  // ask for the CUDA 12 one, which the probe calls.
  Set(g.cuCtxSynchronize, proc("cuCtxSynchronize", 0, 12080));
  Set(g.cuLaunchKernel_ptsz,
      proc("cuLaunchKernel", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
}

void Setup(const std::string& resolve) {
  if (resolve == "link") {
    ResolveLinked();
  } else {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) Die(dlerror());
    if (resolve == "dlsym") {
      ResolveDlsym(lib);
    } else if (resolve == "procaddr") {
      ResolveProcAddress(lib);
    } else {
      Die("--resolve must be link, dlsym or procaddr");
    }
    Set(g.hfFakeCudaBusyNs, dlsym(lib, "hfFakeCudaBusyNs"));
  }
  if (g.cuInit == nullptr || g.cuInit(0) != CUDA_SUCCESS) Die("cuInit");
  CUcontext ctx = nullptr;
  if (g.cuDeviceGet(&g_dev, 0) != CUDA_SUCCESS ||
      g.cuDevicePrimaryCtxRetain(&ctx, g_dev) != CUDA_SUCCESS ||
      g.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    Die("no context");
  }
}

size_t Used() {
  size_t free = 0;
  size_t total = 0;
  if (g.cuMemGetInfo_v2(&free, &total) != CUDA_SUCCESS) Die("cuMemGetInfo");
  return total - free;
}

void PrintInfo() {
  size_t free = 0;
  size_t total = 0;
  size_t device_total = 0;
  CUresult r1 = g.cuMemGetInfo_v2(&free, &total);
  CUresult r2 = g.cuDeviceTotalMem_v2(&device_total, g_dev);
  std::printf(
      "{\"free\":%zu,\"total\":%zu,\"device_total\":%zu,\"info_result\":%d,"
      "\"total_result\":%d}\n",
      free, total, device_total, static_cast<int>(r1), static_cast<int>(r2));
}

int Fill(size_t chunk_mb) {
  std::vector<CUdeviceptr> held;
  CUresult last = CUDA_SUCCESS;
  for (;;) {
    CUdeviceptr p = 0;
    last = g.cuMemAlloc_v2(&p, chunk_mb * kMiB);
    if (last != CUDA_SUCCESS) break;
    held.push_back(p);
    if (held.size() > 1'000'000) Die("never refused");
  }
  size_t free_full = 0;
  size_t total = 0;
  g.cuMemGetInfo_v2(&free_full, &total);
  int bad_frees = 0;
  for (CUdeviceptr p : held) bad_frees += g.cuMemFree_v2(p) != CUDA_SUCCESS;
  size_t free_after = 0;
  g.cuMemGetInfo_v2(&free_after, &total);
  std::printf(
      "{\"allocated_mb\":%zu,\"error\":\"%s\",\"free_when_full\":%zu,"
      "\"free_after_free\":%zu,\"total\":%zu,\"bad_frees\":%d}\n",
      held.size() * chunk_mb, ErrName(last), free_full, free_after, total,
      bad_frees);
  return 0;
}

void Report(const char* path, size_t before, size_t charged_at,
            size_t after_free, CUresult r) {
  std::printf(
      "{\"path\":\"%s\",\"charged\":%zu,\"left_after_free\":%zu,"
      "\"result\":\"%s\"}\n",
      path, charged_at - before, after_free - before, ErrName(r));
}

int Paths() {
  size_t before = Used();
  // Plain, managed, pitch.
  CUdeviceptr p = 0;
  CUresult r = g.cuMemAlloc_v2(&p, 3 * kMiB);
  size_t at = Used();
  g.cuMemFree_v2(p);
  Report("alloc", before, at, Used(), r);

  r = g.cuMemAllocManaged(&p, 2 * kMiB, CU_MEM_ATTACH_GLOBAL);
  at = Used();
  g.cuMemFree_v2(p);
  Report("managed", before, at, Used(), r);

  size_t pitch = 0;
  r = g.cuMemAllocPitch_v2(&p, &pitch, 1000, 1024, 4);
  at = Used();
  g.cuMemFree_v2(p);
  Report("pitch", before, at, Used(), r);
  std::printf("{\"pitch\":%zu}\n", pitch);

  // Stream-ordered, default pool and explicit pool.
  r = g.cuMemAllocAsync(&p, 4 * kMiB, nullptr);
  at = Used();
  g.cuMemFreeAsync(p, nullptr);
  Report("async", before, at, Used(), r);

  CUmemoryPool pool = nullptr;
  g.cuDeviceGetDefaultMemPool(&pool, g_dev);
  r = g.cuMemAllocFromPoolAsync(&p, 5 * kMiB, pool, nullptr);
  at = Used();
  g.cuMemFreeAsync(p, nullptr);
  Report("pool", before, at, Used(), r);

  // VMM: device memory counts, host memory does not.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = g_dev;
  size_t gran = 0;
  g.cuMemGetAllocationGranularity(&gran, &prop,
                                  CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  CUmemGenericAllocationHandle h = 0;
  r = g.cuMemCreate(&h, 3 * gran, &prop, 0);
  at = Used();
  g.cuMemRelease(h);
  Report("vmm_device", before, at, Used(), r);

  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  prop.location.id = 0;
  r = g.cuMemCreate(&h, gran, &prop, 0);
  at = Used();
  if (r == CUDA_SUCCESS) g.cuMemRelease(h);
  Report("vmm_host", before, at, Used(), r);

  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  r = g.cuMemCreate(&h, gran, &prop, 0);
  at = Used();
  if (r == CUDA_SUCCESS) g.cuMemRelease(h);
  Report("vmm_host_numa", before, at, Used(), r);

  // Arrays.
  CUarray arr = nullptr;
  CUDA_ARRAY_DESCRIPTOR d2{1024, 512, CU_AD_FORMAT_FLOAT, 4};
  r = g.cuArrayCreate_v2(&arr, &d2);
  at = Used();
  g.cuArrayDestroy(arr);
  Report("array2d", before, at, Used(), r);

  CUDA_ARRAY3D_DESCRIPTOR d3{256, 256, 16, CU_AD_FORMAT_UNSIGNED_INT8, 2, 0};
  r = g.cuArray3DCreate_v2(&arr, &d3);
  at = Used();
  g.cuArrayDestroy(arr);
  Report("array3d", before, at, Used(), r);

  CUmipmappedArray mip = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR dm{512, 512, 0, CU_AD_FORMAT_HALF, 1, 0};
  r = g.cuMipmappedArrayCreate(&mip, &dm, 4);
  at = Used();
  g.cuMipmappedArrayDestroy(mip);
  Report("mipmapped", before, at, Used(), r);

  // Host memory is not device memory.
  void* host = nullptr;
  r = g.cuMemAllocHost_v2(&host, 8 * kMiB);
  at = Used();
  g.cuMemFreeHost(host);
  Report("host", before, at, Used(), r);

  // A bad free returns the driver's own error and changes nothing.
  CUresult bad = g.cuMemFree_v2(0xdead0000);
  std::printf("{\"bad_free\":\"%s\",\"left\":%zu}\n", ErrName(bad),
              Used() - before);
  return 0;
}

// The storm's shared counter: what all storm processes hold at once.
struct Shared {
  std::atomic<int64_t> held;
  std::atomic<int64_t> peak;
};

Shared* MapShared(const char* path) {
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0 || ftruncate(fd, sizeof(Shared)) != 0) Die("counter file");
  void* p =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) Die("mmap counter");
  return static_cast<Shared*>(p);
}

void NoteHeld(Shared* s, int64_t delta) {
  int64_t now = s->held.fetch_add(delta) + delta;
  int64_t peak = s->peak.load();
  while (now > peak && !s->peak.compare_exchange_weak(peak, now)) {
  }
}

int Storm(size_t chunk_kb, long iters, Shared* shared, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::pair<CUdeviceptr, size_t>> live;
  long ok = 0;
  long ooms = 0;
  long other = 0;
  for (long i = 0; i < iters; ++i) {
    if (!live.empty() && (live.size() >= 16 || rng() % 2 == 0)) {
      size_t k = rng() % live.size();
      NoteHeld(shared, -static_cast<int64_t>(live[k].second));
      if (g.cuMemFree_v2(live[k].first) != CUDA_SUCCESS) ++other;
      live.erase(live.begin() + static_cast<long>(k));
      continue;
    }
    size_t bytes = (1 + rng() % 4) * chunk_kb * 1024;
    CUdeviceptr p = 0;
    CUresult r = g.cuMemAlloc_v2(&p, bytes);
    if (r == CUDA_SUCCESS) {
      NoteHeld(shared, static_cast<int64_t>(bytes));
      live.emplace_back(p, bytes);
      ++ok;
    } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      ++ooms;
    } else {
      ++other;
    }
  }
  for (auto& [p, bytes] : live) {
    NoteHeld(shared, -static_cast<int64_t>(bytes));
    g.cuMemFree_v2(p);
  }
  std::printf("{\"ok\":%ld,\"ooms\":%ld,\"other_errors\":%ld}\n", ok, ooms,
              other);
  return other == 0 ? 0 : 1;
}

int Threads(int n, long iters, size_t chunk_kb) {
  Shared shared{};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  std::atomic<long> other{0};
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      CUcontext ctx = nullptr;
      g.cuDevicePrimaryCtxRetain(&ctx, g_dev);
      g.cuCtxSetCurrent(ctx);
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      std::vector<std::pair<CUdeviceptr, size_t>> live;
      for (long i = 0; i < iters; ++i) {
        if (!live.empty() && (live.size() >= 8 || rng() % 2 == 0)) {
          NoteHeld(&shared, -static_cast<int64_t>(live.back().second));
          if (g.cuMemFree_v2(live.back().first) != CUDA_SUCCESS) ++other;
          live.pop_back();
          continue;
        }
        size_t bytes = (1 + rng() % 4) * chunk_kb * 1024;
        CUdeviceptr p = 0;
        CUresult r = g.cuMemAlloc_v2(&p, bytes);
        if (r == CUDA_SUCCESS) {
          NoteHeld(&shared, static_cast<int64_t>(bytes));
          live.emplace_back(p, bytes);
        } else if (r != CUDA_ERROR_OUT_OF_MEMORY) {
          ++other;
        }
      }
      for (auto& [p, bytes] : live) {
        NoteHeld(&shared, -static_cast<int64_t>(bytes));
        g.cuMemFree_v2(p);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf("{\"peak\":%" PRId64 ",\"left\":%zu,\"other_errors\":%ld}\n",
              shared.peak.load(), Used(), other.load());
  return 0;
}

int Fork(size_t chunk_mb) {
  CUdeviceptr mine = 0;
  if (g.cuMemAlloc_v2(&mine, chunk_mb * kMiB) != CUDA_SUCCESS) {
    Die("parent alloc");
  }
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    size_t got = 0;
    CUdeviceptr p = 0;
    while (g.cuMemAlloc_v2(&p, kMiB) == CUDA_SUCCESS) ++got;
    std::printf("{\"child_allocated_mb\":%zu}\n", got);
    std::fflush(stdout);
    _exit(0);  // leaves its memory held: a dead process to reclaim
  }
  int status = 0;
  waitpid(pid, &status, 0);
  // The child is gone: its memory comes back on the next refusal.
  size_t got = 0;
  std::vector<CUdeviceptr> held;
  CUdeviceptr p = 0;
  while (g.cuMemAlloc_v2(&p, kMiB) == CUDA_SUCCESS) {
    held.push_back(p);
    ++got;
  }
  for (CUdeviceptr q : held) g.cuMemFree_v2(q);
  std::printf("{\"parent_refilled_mb\":%zu}\n", got);
  return 0;
}

int Repl() {
  std::vector<CUdeviceptr> held;
  char line[256];
  std::printf("{\"ready\":true}\n");
  std::fflush(stdout);
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    unsigned long n = 0;
    if (std::sscanf(line, "alloc %lu", &n) == 1) {
      CUdeviceptr p = 0;
      CUresult r = g.cuMemAlloc_v2(&p, n * kMiB);
      if (r == CUDA_SUCCESS) held.push_back(p);
      std::printf("{\"alloc\":\"%s\",\"id\":%zu}\n", ErrName(r),
                  r == CUDA_SUCCESS ? held.size() - 1 : 0);
    } else if (std::sscanf(line, "free %lu", &n) == 1) {
      CUresult r =
          n < held.size() ? g.cuMemFree_v2(held[n]) : CUDA_ERROR_INVALID_VALUE;
      std::printf("{\"free\":\"%s\"}\n", ErrName(r));
    } else if (std::sscanf(line, "cache %lu", &n) == 1) {
      size_t free = 0;
      size_t total = 0;
      const CUresult info = g.cuMemGetInfo_v2(&free, &total);
      const size_t bytes = free / 100 * n;
      CUdeviceptr p = 0;
      const CUresult r = info != CUDA_SUCCESS ? info
                         : bytes == 0         ? CUDA_ERROR_INVALID_VALUE
                                              : g.cuMemAlloc_v2(&p, bytes);
      if (r == CUDA_SUCCESS) held.push_back(p);
      std::printf(
          "{\"cache\":\"%s\",\"free\":%zu,\"total\":%zu,\"bytes\":%zu}\n",
          ErrName(r), free, total, bytes);
    } else if (std::strncmp(line, "info", 4) == 0) {
      PrintInfo();
    } else if (std::strncmp(line, "quit", 4) == 0) {
      break;
    } else {
      std::printf("{\"error\":\"unknown command\"}\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int Launch(long ms, const std::string& path) {
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  // A kernel that spins for `cycles` GPU clocks: a real driver JIT-compiles
  // it (so the probe also runs on a real GPU); the fake accepts any image.
  static const char kImage[] = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry k(.param .u64 cycles)
{
  .reg .pred %p<2>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [cycles];
  mov.u64 %rd2, %clock64;
SPIN:
  mov.u64 %rd3, %clock64;
  sub.s64 %rd4, %rd3, %rd2;
  setp.lt.u64 %p1, %rd4, %rd1;
  @%p1 bra SPIN;
  ret;
}
)";
  unsigned long long cycles = 2'000'000;  // about 1 ms at 2 GHz
  if (const char* c = std::getenv("HF_PROBE_KERNEL_CYCLES")) {
    cycles = std::strtoull(c, nullptr, 10);
  }
  void* params[] = {&cycles};
  if (g.cuModuleLoadData(&mod, kImage) != CUDA_SUCCESS ||
      g.cuModuleGetFunction(&fn, mod, "k") != CUDA_SUCCESS) {
    Die("module");
  }
  CUgraphExec exec = nullptr;
  if (path == "graph") {
    CUgraph graph = nullptr;
    if (g.cuGraphCreate(&graph, 0) != CUDA_SUCCESS ||
        g.cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS) {
      Die("graph");
    }
  }
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  const uint64_t busy0 = g.hfFakeCudaBusyNs ? g.hfFakeCudaBusyNs(0) : 0;
  const int64_t start = NowNs();
  long launches = 0;
  CUresult r = CUDA_SUCCESS;
  while (NowNs() - start < ms * 1'000'000 && r == CUDA_SUCCESS) {
    if (path == "kernel") {
      r = g.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    } else if (path == "ptsz") {
      if (g.cuLaunchKernel_ptsz == nullptr) Die("no ptsz");
      r = g.cuLaunchKernel_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, params,
                                nullptr);
    } else if (path == "ex") {
      r = g.cuLaunchKernelEx(&config, fn, params, nullptr);
    } else if (path == "coop") {
      r = g.cuLaunchCooperativeKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, params);
    } else if (path == "graph") {
      r = g.cuGraphLaunch(exec, nullptr);
    } else {
      Die("launch path must be kernel|ptsz|ex|coop|graph");
    }
    ++launches;
    g.cuCtxSynchronize();
  }
  const int64_t wall = NowNs() - start;
  const uint64_t busy =
      (g.hfFakeCudaBusyNs ? g.hfFakeCudaBusyNs(0) : 0) - busy0;
  std::printf("{\"launches\":%ld,\"wall_ns\":%" PRId64 ",\"busy_ns\":%" PRIu64
              ",\"result\":\"%s\"}\n",
              launches, wall, busy, ErrName(r));
  return r == CUDA_SUCCESS ? 0 : 1;
}

int Loop(long n) {
  for (long i = 0; i < n; ++i) {
    CUdeviceptr p = 0;
    if (g.cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS) Die("loop alloc");
    size_t free = 0;
    size_t total = 0;
    g.cuMemGetInfo_v2(&free, &total);
    g.cuMemFree_v2(p);
  }
  std::printf("{\"pairs\":%ld}\n", n);
  return 0;
}

// NVML as a monitoring tool in the task would see it: found with dlopen and
// dlsym, like nvidia-smi and the NVML bindings do.
int Nvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) Die(dlerror());
  using InitFn = nvmlReturn_t (*)();
  using CountFn = nvmlReturn_t (*)(unsigned int*);
  using HandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
  using MemFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
  using Mem2Fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle =
      reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto mem = reinterpret_cast<MemFn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  auto mem2 =
      reinterpret_cast<Mem2Fn>(dlsym(lib, "nvmlDeviceGetMemoryInfo_v2"));
  if (!init || !count || !handle || !mem || !mem2) Die("NVML entry points");
  if (init() != NVML_SUCCESS) Die("nvmlInit_v2");
  unsigned int n = 0;
  count(&n);
  for (unsigned int i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    nvmlMemory_t m{};
    nvmlMemory_v2_t m2{};
    m2.version = nvmlMemory_v2;
    if (handle(i, &dev) != NVML_SUCCESS || mem(dev, &m) != NVML_SUCCESS ||
        mem2(dev, &m2) != NVML_SUCCESS) {
      Die("NVML memory info");
    }
    std::printf(
        "{\"index\":%u,\"total\":%llu,\"used\":%llu,\"free\":%llu,"
        "\"v2_total\":%llu,\"v2_used\":%llu,\"v2_free\":%llu}\n",
        i, m.total, m.used, m.free, m2.total, m2.used, m2.free);
  }
  return 0;
}

int Watch(long ms) {
  const int64_t start = NowNs();
  size_t last_total = 0;
  while (NowNs() - start < ms * 1'000'000) {
    size_t free = 0;
    size_t total = 0;
    g.cuMemGetInfo_v2(&free, &total);
    if (total != last_total) {
      PrintInfo();
      std::fflush(stdout);
      last_total = total;
    }
    usleep(20'000);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string resolve = "dlsym";
  if (args.size() >= 2 && args[0] == "--resolve") {
    resolve = args[1];
    args.erase(args.begin(), args.begin() + 2);
  }
  if (args.empty()) Die("usage: hook_probe [--resolve MODE] COMMAND ...");
  auto arg = [&](size_t i) -> const char* {
    if (i >= args.size()) Die("missing argument");
    return args[i].c_str();
  };
  Setup(resolve);
  const std::string& cmd = args[0];
  if (cmd == "info") {
    PrintInfo();
    return 0;
  }
  if (cmd == "fill") return Fill(std::strtoul(arg(1), nullptr, 10));
  if (cmd == "paths") return Paths();
  if (cmd == "storm") {
    return Storm(std::strtoul(arg(1), nullptr, 10),
                 std::strtol(arg(2), nullptr, 10), MapShared(arg(3)),
                 static_cast<unsigned>(getpid()));
  }
  if (cmd == "threads") {
    return Threads(std::atoi(arg(1)), std::strtol(arg(2), nullptr, 10),
                   std::strtoul(arg(3), nullptr, 10));
  }
  if (cmd == "fork") return Fork(std::strtoul(arg(1), nullptr, 10));
  if (cmd == "repl") return Repl();
  if (cmd == "launch") return Launch(std::strtol(arg(1), nullptr, 10), arg(2));
  if (cmd == "loop") return Loop(std::strtol(arg(1), nullptr, 10));
  if (cmd == "nvml") return Nvml();
  if (cmd == "watch") return Watch(std::strtol(arg(1), nullptr, 10));
  Die("unknown command");
}
