/* The plain C interface of an emitted kernel library (`linac emit`): tensors as raw pointers with
 * shapes and strides, a status code per call and a message getter. The emitted linac_kernels.h
 * includes this header and declares each variant's forward, backward and decode step.
 *
 * Layout: fla's [B, T, H, D], row-major and contiguous (strides are checked, not followed); q, k,
 * v, o and their gradients in F32, BF16 or F16 (all the same); g, beta, u and states in F32;
 * cu_seqlens in I64. Every tensor of a call lives on the same device; CUDA calls are asynchronous
 * on the given stream (a cudaStream_t, NULL for the default stream), CPU calls ignore it. */
#ifndef LINAC_CAPI_H
#define LINAC_CAPI_H

#include <stdint.h>

#if defined(_WIN32)
#define LINAC_API
#else
#define LINAC_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum linac_status {
  LINAC_OK = 0,
  LINAC_INVALID_ARGUMENT = 1, /* a shape, dtype, device, layout or value the call does not take */
  LINAC_UNSUPPORTED = 2,      /* a backend this library was built without */
  LINAC_RUNTIME_ERROR = 3     /* a kernel or CUDA failure */
} linac_status;

typedef enum linac_dtype { LINAC_F32 = 0, LINAC_BF16 = 1, LINAC_F16 = 2, LINAC_I64 = 3 } linac_dtype;

typedef enum linac_device { LINAC_CPU = 0, LINAC_CUDA = 1 } linac_device;

#define LINAC_MAX_DIMS 4

/* A tensor the caller owns. strides are in elements; shape[i] and strides[i] for i >= ndim are
 * ignored. */
typedef struct linac_tensor {
  void* data;
  linac_dtype dtype;
  linac_device device;
  int32_t ndim;
  int64_t shape[LINAC_MAX_DIMS];
  int64_t strides[LINAC_MAX_DIMS];
} linac_tensor;

/* A row-major contiguous tensor over `data` (ndim <= LINAC_MAX_DIMS). */
LINAC_API linac_tensor linac_tensor_contiguous(void* data, linac_dtype dtype, linac_device device,
                                               int32_t ndim, const int64_t* shape);

/* The message of the last call on this thread that did not return LINAC_OK: what is wrong, with
 * the argument's name. Valid until the next call on this thread; "" after a success. */
LINAC_API const char* linac_last_error(void);

/* 1 when this library was built with its CUDA backend. */
LINAC_API int linac_has_cuda(void);

/* The library's version, "MAJOR.MINOR.PATCH". */
LINAC_API const char* linac_version(void);

#ifdef __cplusplus
}
#endif

#endif /* LINAC_CAPI_H */
