// How programs that do not link libcuda find the hook's wrappers:
//  - dlsym: interposed. RTLD_NEXT lookups jump straight to libc's dlsym
//    with the caller's return address intact (a tail jump written in
//    assembly), because glibc resolves RTLD_NEXT relative to its caller;
//    everything else goes through hf_dlsym_impl, which answers a wrapped
//    CUDA or NVML name with the hook's wrapper.
//  - cuGetProcAddress / cuGetProcAddress_v2: the driver answers first; a
//    pointer to a real function the hook wraps becomes the wrapper. Should
//    a driver ever hand out a pointer that is not its exported symbol, the
//    base name, the CUDA version and the per-thread-stream flag pick the
//    variant instead (the same rules the driver applies).
#include <dlfcn.h>

#include <cstddef>
#include <cstring>

#include "hook/hook_state.h"
#include "hook/log.h"

extern "C" {
// Set on first use; read by the dlsym trampoline below.
__attribute__((visibility("hidden"))) void* hf_real_dlsym_ptr = nullptr;
__attribute__((visibility("hidden"))) void* hf_resolve_real_dlsym();
__attribute__((visibility("hidden"))) void* hf_dlsym_impl(void* handle,
                                                          const char* name);
}

namespace hf::hook {
namespace {

using DlsymFn = void* (*)(void*, const char*);

DlsymFn LibcDlsym() {
  auto fn = reinterpret_cast<DlsymFn>(
      __atomic_load_n(&hf_real_dlsym_ptr, __ATOMIC_ACQUIRE));
  if (fn != nullptr) return fn;
  // glibc 2.34 moved dlsym into libc (GLIBC_2.34); older ones have only
  // the original version.
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
#if defined(__x86_64__)
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
#elif defined(__aarch64__)
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
#endif
  __atomic_store_n(&hf_real_dlsym_ptr, p, __ATOMIC_RELEASE);
  return reinterpret_cast<DlsymFn>(p);
}

// The wrapped entry points by index. Names and offsets are constants (no
// code runs at load time: dlsym may be called before any constructor of
// ours); the wrapper addresses come from a switch.
enum WrappedId : int {
#define HF_WRAPPED_ID(name) kId_##name,
  HF_HOOK_WRAPPED(HF_WRAPPED_ID)
#undef HF_WRAPPED_ID
      kWrappedCount
};

constexpr const char* kWrappedNames[] = {
#define HF_WRAPPED_NAME(name) #name,
    HF_HOOK_WRAPPED(HF_WRAPPED_NAME)
#undef HF_WRAPPED_NAME
};

constexpr size_t kRealOffsets[] = {
#define HF_WRAPPED_OFFSET(name) offsetof(RealCuda, name),
    HF_HOOK_WRAPPED(HF_WRAPPED_OFFSET)
#undef HF_WRAPPED_OFFSET
};

void* WrapperAt(int id) {
  switch (id) {
#define HF_WRAPPED_CASE(name) \
  case kId_##name:            \
    return reinterpret_cast<void*>(&::name);
    HF_HOOK_WRAPPED(HF_WRAPPED_CASE)
#undef HF_WRAPPED_CASE
    default:
      return nullptr;
  }
}

void* RealAt(const HookState& s, int id) {
  void* p = nullptr;
  std::memcpy(&p, reinterpret_cast<const char*>(&s.real) + kRealOffsets[id],
              sizeof(p));
  return p;
}

// The variants cuGetProcAddress chooses between, for the base names the
// hook wraps: since which CUDA version each exists (cudaTypedefs.h,
// PFN_<name>_v<version>), and whether it is the per-thread-stream one.
struct Variant {
  const char* base;
  const char* name;
  int since;
  bool per_thread;
};

const Variant kVariants[] = {
    {"cuMemAlloc", "cuMemAlloc_v2", 3020, false},
    {"cuMemAllocPitch", "cuMemAllocPitch_v2", 3020, false},
    {"cuMemAllocManaged", "cuMemAllocManaged", 6000, false},
    {"cuMemFree", "cuMemFree_v2", 3020, false},
    {"cuMemAllocAsync", "cuMemAllocAsync", 11020, false},
    {"cuMemAllocAsync", "cuMemAllocAsync_ptsz", 11020, true},
    {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 11020, false},
    {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", 11020, true},
    {"cuMemFreeAsync", "cuMemFreeAsync", 11020, false},
    {"cuMemFreeAsync", "cuMemFreeAsync_ptsz", 11020, true},
    {"cuMemCreate", "cuMemCreate", 10020, false},
    {"cuMemRelease", "cuMemRelease", 10020, false},
    {"cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle", 11000,
     false},
    {"cuArrayCreate", "cuArrayCreate_v2", 3020, false},
    {"cuArray3DCreate", "cuArray3DCreate_v2", 3020, false},
    {"cuArrayDestroy", "cuArrayDestroy", 2000, false},
    {"cuMipmappedArrayCreate", "cuMipmappedArrayCreate", 5000, false},
    {"cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", 5000, false},
    {"cuMemGetInfo", "cuMemGetInfo_v2", 3020, false},
    {"cuDeviceTotalMem", "cuDeviceTotalMem_v2", 3020, false},
    {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 7000, false},
    {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", 11000, false},
    {"cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2", 11000, false},
    {"cuCtxCreate", "cuCtxCreate_v2", 3020, false},
    {"cuCtxCreate", "cuCtxCreate_v3", 11040, false},
    {"cuCtxCreate", "cuCtxCreate_v4", 12050, false},
    {"cuCtxDestroy", "cuCtxDestroy_v2", 4000, false},
    {"cuLaunchKernel", "cuLaunchKernel", 4000, false},
    {"cuLaunchKernel", "cuLaunchKernel_ptsz", 7000, true},
    {"cuLaunchKernelEx", "cuLaunchKernelEx", 11060, false},
    {"cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", 11060, true},
    {"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", 9000, false},
    {"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", 9000, true},
    {"cuGraphLaunch", "cuGraphLaunch", 10000, false},
    {"cuGraphLaunch", "cuGraphLaunch_ptsz", 10000, true},
    {"cuCtxSynchronize", "cuCtxSynchronize", 2000, false},
    {"cuCtxSynchronize", "cuCtxSynchronize_v2", 13000, false},
    {"cuStreamSynchronize", "cuStreamSynchronize", 2000, false},
    {"cuStreamSynchronize", "cuStreamSynchronize_ptsz", 7000, true},
    {"cuEventSynchronize", "cuEventSynchronize", 2000, false},
    {"cuGetProcAddress", "cuGetProcAddress", 11030, false},
    {"cuGetProcAddress", "cuGetProcAddress_v2", 12000, false},
};

// The index of a wrapped name, or -1.
int FindWrapped(const char* name) {
  for (int i = 0; i < kWrappedCount; ++i) {
    if (std::strcmp(kWrappedNames[i], name) == 0) return i;
  }
  return -1;
}

LogOnce g_by_name_once;

}  // namespace

void* RealDlsym(void* handle, const char* name) {
  DlsymFn fn = LibcDlsym();
  return fn == nullptr ? nullptr : fn(handle, name);
}

// The wrapper to hand out instead of `real` (a pointer the driver gave for
// `symbol`), or `real` itself.
void* SubstituteProc(HookState& s, const char* symbol, void* real,
                     int cuda_version, cuuint64_t flags) {
  for (int i = 0; i < kWrappedCount; ++i) {
    if (RealAt(s, i) == real) return WrapperAt(i);
  }
  // Not an exported function we know: choose the variant by name.
  const bool per_thread =
      (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const Variant* best = nullptr;
  for (const Variant& v : kVariants) {
    if (std::strcmp(v.base, symbol) != 0 || v.since > cuda_version) continue;
    if (v.per_thread && !per_thread) continue;
    if (best == nullptr || v.per_thread > best->per_thread ||
        (v.per_thread == best->per_thread && v.since > best->since)) {
      best = &v;
    }
  }
  if (best == nullptr) return real;
  const int id = FindWrapped(best->name);
  if (id < 0 || RealAt(s, id) == nullptr) return real;
  Log(LogLevel::kInfo, &g_by_name_once,
      "cuGetProcAddress(%s) gave an unexported pointer; using %s", symbol,
      best->name);
  return WrapperAt(id);
}

}  // namespace hf::hook

using hf::hook::HookState;

extern "C" {

void* hf_resolve_real_dlsym() {
  return reinterpret_cast<void*>(hf::hook::LibcDlsym());
}

void* hf_dlsym_impl(void* handle, const char* name) {
  void* p = hf::hook::RealDlsym(handle, name);
  if (p == nullptr || name == nullptr) return p;
  const bool cuda = name[0] == 'c' && name[1] == 'u';
  const bool nvml = std::strncmp(name, "nvml", 4) == 0;
  if (!cuda && !nvml) return p;
  if (cuda) {
    const int id = hf::hook::FindWrapped(name);
    return id < 0 ? p : hf::hook::WrapperAt(id);
  }
  return hf::hook::NvmlWrapperFor(name, p);
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress(
    const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  HookState& s = hf::hook::Hook();
  if (s.real.cuGetProcAddress == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = s.real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr &&
      symbol != nullptr) {
    *pfn = hf::hook::SubstituteProc(s, symbol, *pfn, cudaVersion, flags);
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult* symbolStatus) {
  HookState& s = hf::hook::Hook();
  if (s.real.cuGetProcAddress_v2 == nullptr) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  const CUresult r =
      s.real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr &&
      symbol != nullptr) {
    *pfn = hf::hook::SubstituteProc(s, symbol, *pfn, cudaVersion, flags);
  }
  return r;
}

}  // extern "C"

// dlsym itself. RTLD_NEXT ((void*)-1) must reach libc's dlsym with the
// caller's return address, so it is a jump, not a call.
#if defined(__x86_64__)
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    cmpq $-1, %rdi
    jne 2f
    movq hf_real_dlsym_ptr(%rip), %rax
    testq %rax, %rax
    jnz 1f
    pushq %rdi
    pushq %rsi
    subq $8, %rsp
    call hf_resolve_real_dlsym
    addq $8, %rsp
    popq %rsi
    popq %rdi
1:  jmpq *%rax
2:  jmp hf_dlsym_impl
    .size dlsym, .-dlsym
)");
#elif defined(__aarch64__)
asm(R"(
    .text
    .globl dlsym
    .type dlsym, %function
dlsym:
    cmn x0, #1
    b.ne 2f
    adrp x16, hf_real_dlsym_ptr
    ldr x16, [x16, :lo12:hf_real_dlsym_ptr]
    cbnz x16, 1f
    stp x0, x1, [sp, #-32]!
    str x30, [sp, #16]
    bl hf_resolve_real_dlsym
    mov x16, x0
    ldr x30, [sp, #16]
    ldp x0, x1, [sp], #32
1:  br x16
2:  b hf_dlsym_impl
    .size dlsym, .-dlsym
)");
#else
extern "C" __attribute__((visibility("default"))) void* dlsym(
    void* handle, const char* name) {
  return hf_dlsym_impl(handle, name);
}
#endif
