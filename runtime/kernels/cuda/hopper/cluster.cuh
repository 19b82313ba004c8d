// Distributed shared memory across the CTAs of a thread-block cluster (sm_90): the address a
// shared-memory location has in a peer CTA, stores to it and loads from it, and the fence that hands such stores to
// the peer's tensor cores. The barrier that orders them is CuTe's cluster_sync() (an arrive with
// release semantics, then a wait with acquire semantics, by every thread of every CTA).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace linac::kernels::cuda::hopper {

/// The shared::cluster address, in CTA `rank` of this cluster, of the location that has the
/// shared::cta address `addr` in this CTA (the same offset in the peer's shared memory).
__device__ inline uint32_t clusterAddress(uint32_t addr, int rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}

__device__ inline void stsCluster32(uint32_t clusterAddr, uint32_t v) {
  asm volatile("st.shared::cluster.b32 [%0], %1;\n" ::"r"(clusterAddr), "r"(v) : "memory");
}

__device__ inline void stsCluster64(uint32_t clusterAddr, float2 v) {
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(clusterAddr), "f"(v.x), "f"(v.y) : "memory");
}

__device__ inline float ldsCluster32f(uint32_t clusterAddr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(clusterAddr) : "memory");
  return v;
}

/// Orders this thread's generic-proxy stores to any CTA's shared memory in the cluster before
/// later async-proxy reads (a peer's wgmma operands), ahead of the cluster barrier that publishes
/// them.
__device__ inline void fenceClusterToAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cluster;\n" ::: "memory");
}

}  // namespace linac::kernels::cuda::hopper
