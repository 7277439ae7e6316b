// Shared memory by absolute address, for kernels that place a table where its entries'
// addresses need no add (runtime/pair_gemv.cu, kernels/pair_viterbi.cu): dynamic shared
// memory starts at shared address 0x400 (after Hopper's 1 KB reserve; each kernel checks
// it), so `shared_addr` of a pointer and `lds_abs` of an address. Under the SIMT emulator
// (tests/simt) the harness's `smem` array stands at 0x400. TQ_DYN_SMEM declares `smem`
// (char*) in a kernel: its dynamic shared memory.
#pragma once
#ifdef __CUDACC__
TQ_DEV uint32_t lds_abs(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
}
TQ_DEV uint32_t shared_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
#define TQ_DYN_SMEM extern __shared__ int4 smem4[]; char* smem = reinterpret_cast<char*>(smem4)
#else
using std::max;
using std::min;
TQ_DEV uint32_t lds_abs(uint32_t addr) {
    uint32_t v;
    std::memcpy(&v, reinterpret_cast<const char*>(smem) + addr - 0x400, 4);
    return v;
}
TQ_DEV uint32_t shared_addr(const void* p) {
    return 0x400u + (uint32_t)(reinterpret_cast<const char*>(p) -
                               reinterpret_cast<const char*>(smem));
}
#define TQ_DYN_SMEM char* smem = reinterpret_cast<char*>(::smem)
#endif
