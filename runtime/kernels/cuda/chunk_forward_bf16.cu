// Instantiations of the chunkwise forward for __nv_bfloat16 inputs.
#include "chunk_forward_inst.cuh"

LINAC_INSTANTIATE_CHUNK_FORWARD(__nv_bfloat16)
