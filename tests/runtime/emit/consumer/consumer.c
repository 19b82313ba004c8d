/* Runs gated_deltanet's C API on inputs from a file and writes its outputs to another
 * (emit_package_test.cpp writes the inputs and checks the outputs against the float64 oracle).
 *
 * usage: consumer IN OUT SCALE
 * IN:  int64 B, T, H, dk, dv; then float32 q, k [B, T, H, dk], v [B, T, H, dv], g, beta
 *      [B, T, H], h0 [B, H, dk, dv], d_o [B, T, H, dv], d_ht [B, H, dk, dv]
 * OUT: float32 o, ht, d_q, d_k, d_v, d_g, d_beta, d_h0 (forward and backward), then o_step and
 *      the state after T decode steps from h0.
 * Bad calls (a wrong shape, a non-contiguous tensor, cu_seqlens not ending at T, a wrong dtype)
 * must fail with LINAC_INVALID_ARGUMENT; their messages go to stdout as "rejected: ...". */
#include <linac_kernels.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kHeaderDims = 5 };

static float* readFloats(FILE* f, int64_t n) {
  float* p = (float*)malloc((size_t)n * sizeof(float));
  if (!p || fread(p, sizeof(float), (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "consumer: short input\n");
    exit(1);
  }
  return p;
}

static int check(linac_status status, const char* what) {
  if (status == LINAC_OK) return 0;
  fprintf(stderr, "consumer: %s failed (%d): %s\n", what, (int)status, linac_last_error());
  return 1;
}

/* A call that must be refused as an invalid argument. */
static int expectRejected(linac_status status, const char* what) {
  if (status != LINAC_INVALID_ARGUMENT) {
    fprintf(stderr, "consumer: %s was not rejected (status %d)\n", what, (int)status);
    return 1;
  }
  printf("rejected: %s\n", linac_last_error());
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: consumer IN OUT SCALE\n");
    return 2;
  }
  FILE* in = fopen(argv[1], "rb");
  int64_t dims[kHeaderDims];
  if (!in || fread(dims, sizeof(int64_t), kHeaderDims, in) != kHeaderDims) {
    fprintf(stderr, "consumer: cannot read %s\n", argv[1]);
    return 1;
  }
  const int64_t B = dims[0], T = dims[1], H = dims[2], dk = dims[3], dv = dims[4];
  const int64_t nk = B * T * H * dk, nv = B * T * H * dv, nh = B * T * H, ns = B * H * dk * dv;
  float *q = readFloats(in, nk), *k = readFloats(in, nk), *v = readFloats(in, nv);
  float *g = readFloats(in, nh), *beta = readFloats(in, nh), *h0 = readFloats(in, ns);
  float *d_o = readFloats(in, nv), *d_ht = readFloats(in, ns);
  fclose(in);

  const int64_t keyShape[4] = {B, T, H, dk}, valueShape[4] = {B, T, H, dv};
  const int64_t headShape[3] = {B, T, H}, stateShape[4] = {B, H, dk, dv};
  linac_tensor tq = linac_tensor_contiguous(q, LINAC_F32, LINAC_CPU, 4, keyShape);
  linac_tensor tk = linac_tensor_contiguous(k, LINAC_F32, LINAC_CPU, 4, keyShape);
  linac_tensor tv = linac_tensor_contiguous(v, LINAC_F32, LINAC_CPU, 4, valueShape);
  linac_tensor tg = linac_tensor_contiguous(g, LINAC_F32, LINAC_CPU, 3, headShape);
  linac_tensor tbeta = linac_tensor_contiguous(beta, LINAC_F32, LINAC_CPU, 3, headShape);
  linac_tensor th0 = linac_tensor_contiguous(h0, LINAC_F32, LINAC_CPU, 4, stateShape);
  linac_tensor tdo = linac_tensor_contiguous(d_o, LINAC_F32, LINAC_CPU, 4, valueShape);
  linac_tensor tdht = linac_tensor_contiguous(d_ht, LINAC_F32, LINAC_CPU, 4, stateShape);

  float *o = calloc((size_t)nv, sizeof(float)), *ht = calloc((size_t)ns, sizeof(float));
  float *dq = calloc((size_t)nk, sizeof(float)), *dkk = calloc((size_t)nk, sizeof(float));
  float *dvv = calloc((size_t)nv, sizeof(float)), *dg = calloc((size_t)nh, sizeof(float));
  float *dbeta = calloc((size_t)nh, sizeof(float)), *dh0 = calloc((size_t)ns, sizeof(float));
  linac_tensor to = linac_tensor_contiguous(o, LINAC_F32, LINAC_CPU, 4, valueShape);
  linac_tensor tht = linac_tensor_contiguous(ht, LINAC_F32, LINAC_CPU, 4, stateShape);
  linac_tensor tdq = linac_tensor_contiguous(dq, LINAC_F32, LINAC_CPU, 4, keyShape);
  linac_tensor tdk = linac_tensor_contiguous(dkk, LINAC_F32, LINAC_CPU, 4, keyShape);
  linac_tensor tdv = linac_tensor_contiguous(dvv, LINAC_F32, LINAC_CPU, 4, valueShape);
  linac_tensor tdg = linac_tensor_contiguous(dg, LINAC_F32, LINAC_CPU, 3, headShape);
  linac_tensor tdbeta = linac_tensor_contiguous(dbeta, LINAC_F32, LINAC_CPU, 3, headShape);
  linac_tensor tdh0 = linac_tensor_contiguous(dh0, LINAC_F32, LINAC_CPU, 4, stateShape);
  const float scale = (float)atof(argv[3]);

  int failed = 0;
  failed |= check(linac_gated_deltanet_forward(&tq, &tk, &tv, &tg, &tbeta, scale, &th0, NULL, &to,
                                               &tht, NULL),
                  "forward");
  failed |= check(linac_gated_deltanet_backward(&tq, &tk, &tv, &tg, &tbeta, scale, &th0, NULL,
                                                &tdo, &tdht, &tdq, &tdk, &tdv, &tdg, &tdbeta,
                                                &tdh0, NULL),
                  "backward");

  /* The decode step, token by token from h0: o_step [B, T, H, dv], the state [B, H, dk, dv]. */
  float* ostep = calloc((size_t)nv, sizeof(float));
  float* state = malloc((size_t)ns * sizeof(float));
  memcpy(state, h0, (size_t)ns * sizeof(float));
  float *sq = malloc((size_t)(B * H * dk) * sizeof(float)), *sk = malloc((size_t)(B * H * dk) * sizeof(float));
  float *sv = malloc((size_t)(B * H * dv) * sizeof(float)), *so = malloc((size_t)(B * H * dv) * sizeof(float));
  float *sg = malloc((size_t)(B * H) * sizeof(float)), *sbeta = malloc((size_t)(B * H) * sizeof(float));
  const int64_t stepKey[3] = {B, H, dk}, stepValue[3] = {B, H, dv}, stepHead[2] = {B, H};
  linac_tensor tsq = linac_tensor_contiguous(sq, LINAC_F32, LINAC_CPU, 3, stepKey);
  linac_tensor tsk = linac_tensor_contiguous(sk, LINAC_F32, LINAC_CPU, 3, stepKey);
  linac_tensor tsv = linac_tensor_contiguous(sv, LINAC_F32, LINAC_CPU, 3, stepValue);
  linac_tensor tso = linac_tensor_contiguous(so, LINAC_F32, LINAC_CPU, 3, stepValue);
  linac_tensor tsg = linac_tensor_contiguous(sg, LINAC_F32, LINAC_CPU, 2, stepHead);
  linac_tensor tsbeta = linac_tensor_contiguous(sbeta, LINAC_F32, LINAC_CPU, 2, stepHead);
  linac_tensor tstate = linac_tensor_contiguous(state, LINAC_F32, LINAC_CPU, 4, stateShape);
  for (int64_t t = 0; t < T && !failed; ++t) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t token = (b * T + t) * H, slot = b * H;
      memcpy(sq + slot * dk, q + token * dk, (size_t)(H * dk) * sizeof(float));
      memcpy(sk + slot * dk, k + token * dk, (size_t)(H * dk) * sizeof(float));
      memcpy(sv + slot * dv, v + token * dv, (size_t)(H * dv) * sizeof(float));
      memcpy(sg + slot, g + token, (size_t)H * sizeof(float));
      memcpy(sbeta + slot, beta + token, (size_t)H * sizeof(float));
    }
    failed |= check(linac_gated_deltanet_step(&tsq, &tsk, &tsv, &tsg, &tsbeta, scale, &tstate, &tso, NULL),
                    "step");
    for (int64_t b = 0; b < B; ++b)
      memcpy(ostep + (b * T + t) * H * dv, so + b * H * dv, (size_t)(H * dv) * sizeof(float));
  }

  /* Bad calls. */
  const int64_t wrongKey[4] = {B, T, H, dk + 1};
  linac_tensor wrongK = linac_tensor_contiguous(k, LINAC_F32, LINAC_CPU, 4, wrongKey);
  failed |= expectRejected(
      linac_gated_deltanet_forward(&tq, &wrongK, &tv, &tg, &tbeta, scale, NULL, NULL, &to, NULL, NULL),
      "a k of the wrong shape");
  linac_tensor strided = tv;
  strided.strides[3] = 2;
  failed |= expectRejected(
      linac_gated_deltanet_forward(&tq, &tk, &strided, &tg, &tbeta, scale, NULL, NULL, &to, NULL, NULL),
      "a non-contiguous v");
  linac_tensor halfG = tg;
  halfG.dtype = LINAC_F16;
  failed |= expectRejected(
      linac_gated_deltanet_forward(&tq, &tk, &tv, &halfG, &tbeta, scale, NULL, NULL, &to, NULL, NULL),
      "an F16 g");
  /* Packed sequences need B = 1; a single packed row whose offsets end before T. */
  const int64_t rowKey[4] = {1, T, H, dk}, rowValue[4] = {1, T, H, dv}, rowHead[3] = {1, T, H};
  linac_tensor rq = linac_tensor_contiguous(q, LINAC_F32, LINAC_CPU, 4, rowKey);
  linac_tensor rk = linac_tensor_contiguous(k, LINAC_F32, LINAC_CPU, 4, rowKey);
  linac_tensor rv = linac_tensor_contiguous(v, LINAC_F32, LINAC_CPU, 4, rowValue);
  linac_tensor rg = linac_tensor_contiguous(g, LINAC_F32, LINAC_CPU, 3, rowHead);
  linac_tensor rbeta = linac_tensor_contiguous(beta, LINAC_F32, LINAC_CPU, 3, rowHead);
  linac_tensor ro = linac_tensor_contiguous(o, LINAC_F32, LINAC_CPU, 4, rowValue);
  int64_t offsets[3] = {0, T / 2, T - 1};
  const int64_t offsetsShape[1] = {3};
  linac_tensor cu = linac_tensor_contiguous(offsets, LINAC_I64, LINAC_CPU, 1, offsetsShape);
  failed |= expectRejected(
      linac_gated_deltanet_forward(&rq, &rk, &rv, &rg, &rbeta, scale, NULL, &cu, &ro, NULL, NULL),
      "cu_seqlens ending before T");
  offsets[2] = T;
  offsets[1] = T + 1;
  failed |= expectRejected(
      linac_gated_deltanet_forward(&rq, &rk, &rv, &rg, &rbeta, scale, NULL, &cu, &ro, NULL, NULL),
      "decreasing cu_seqlens");
  failed |= expectRejected(
      linac_gated_deltanet_forward(&tq, NULL, &tv, &tg, &tbeta, scale, NULL, NULL, &to, NULL, NULL),
      "a NULL k");
  if (failed) return 1;

  FILE* out = fopen(argv[2], "wb");
  if (!out) {
    fprintf(stderr, "consumer: cannot write %s\n", argv[2]);
    return 1;
  }
  /* forward / backward ran before the bad calls; o was not overwritten by them (each was
   * refused before any kernel ran). */
  fwrite(o, sizeof(float), (size_t)nv, out);
  fwrite(ht, sizeof(float), (size_t)ns, out);
  fwrite(dq, sizeof(float), (size_t)nk, out);
  fwrite(dkk, sizeof(float), (size_t)nk, out);
  fwrite(dvv, sizeof(float), (size_t)nv, out);
  fwrite(dg, sizeof(float), (size_t)nh, out);
  fwrite(dbeta, sizeof(float), (size_t)nh, out);
  fwrite(dh0, sizeof(float), (size_t)ns, out);
  fwrite(ostep, sizeof(float), (size_t)nv, out);
  fwrite(state, sizeof(float), (size_t)ns, out);
  fclose(out);
  printf("consumer: linac_kernels %s, cuda %d\n", linac_version(), linac_has_cuda());
  return 0;
}
