// Instantiations of the chunkwise forward for __half inputs.
#include "chunk_forward_inst.cuh"

LINAC_INSTANTIATE_CHUNK_FORWARD(__half)
