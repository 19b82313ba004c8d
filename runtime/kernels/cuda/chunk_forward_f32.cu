// Instantiations of the chunkwise forward for float inputs.
#include "chunk_forward_inst.cuh"

LINAC_INSTANTIATE_CHUNK_FORWARD(float)
