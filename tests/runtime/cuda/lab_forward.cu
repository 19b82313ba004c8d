// The kernel lab's forward checks: the chunkwise forward (runChunkCase), the recurrent step
// (runStepCase) and HGRN's scan (runScanCase), each on NaN-poisoned outputs against the float64
// token recurrence (lab_common.cu's refToken; the scan's here).
#include "lab_common.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace lab {

void runChunkCase(const Case& cs) {
  const auto& kind = cs.kind;
  const int B = cs.B, T = cs.T, H = cs.H, dk = cs.dk, dv = cs.dv;
  const bool varlen = !cs.cu.empty();
  const int N = varlen ? int(cs.cu.size()) - 1 : B;
  const std::string shp = caseShape(cs, false), kn = "fwd " + kindName(kind);
  if (!caseSelected(kn, cs.dtype, shp)) return;
  Inputs in = makeInputs(kind, cs.dtype, B, T, H, dk, dv, N, cs.gmul, cs.gclamp, cs.h0, cs.wsigma);
  const double scale = 1.0 / std::sqrt(double(dk));
  const size_t tok = size_t(B) * T * H;

  // reference
  std::vector<double> o_ref(tok * dv), ht_ref(size_t(N) * H * dk * dv);
  std::vector<double> lam(dk);
  for (int n = 0; n < N; ++n) {
    const int64_t bos = varlen ? cs.cu[n] : int64_t(n) * T;
    const int64_t len = varlen ? cs.cu[n + 1] - cs.cu[n] : T;
    for (int h = 0; h < H; ++h) {
      std::vector<double> S(size_t(dk) * dv, 0.0);
      if (cs.h0)
        for (size_t i = 0; i < S.size(); ++i) S[i] = in.h0[(size_t(n) * H + h) * dk * dv + i];
      for (int64_t t = 0; t < len; ++t) {
        const size_t th = size_t(bos + t) * H + h;
        decayOf(kind, in, th, h, dk, lam.data());
        refToken(kind, dk, dv, &in.q[th * dk], &in.k[th * dk], &in.v[th * dv], lam.data(),
                 in.beta.empty() ? 0.0 : in.beta[th], in.u.empty() ? nullptr : &in.u[size_t(h) * dk],
                 scale, S, &o_ref[th * dv]);
      }
      std::copy(S.begin(), S.end(), ht_ref.begin() + (size_t(n) * H + h) * dk * dv);
    }
  }

  // device
  DevBuf q(in.qb.data(), in.qb.size()), k(in.kb.data(), in.kb.size()), v(in.vb.data(), in.vb.size());
  DevBuf g(in.g.data(), in.g.size() * 4), beta(in.beta.data(), in.beta.size() * 4),
      u(in.u.data(), in.u.size() * 4), h0(in.h0.data(), in.h0.size() * 4);
  DevBuf cu(cs.cu.data(), cs.cu.size() * 8);
  DevBuf o(tok * dv * dtypeSize(cs.dtype)), ht(ht_ref.size() * 4);
  o.poison();
  ht.poison();
  RecurrenceShape shape;
  shape.batch = B; shape.seq_len = T; shape.heads = H; shape.key_dim = dk; shape.value_dim = dv;
  shape.cu_seqlens = varlen ? cu.as<int64_t>() : nullptr;
  shape.num_seqs = N;
  RecurrenceForwardArgs a;
  a.q = q.p; a.k = k.p; a.v = v.p;
  a.g = g.as<float>(); a.beta = beta.as<float>(); a.u = u.as<float>(); a.h0 = h0.as<float>();
  a.scale = float(scale);
  a.o = o.p; a.ht = ht.as<float>();
  kc::chunkForward(kind, cs.dtype, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> ob(o.bytes);
  LINAC_CUDA_CHECK(cudaMemcpy(ob.data(), o.p, o.bytes, cudaMemcpyDeviceToHost));
  const auto o_dev = decode(ob, cs.dtype, tok * dv);
  const auto ht_f = download<float>(ht, ht_ref.size());
  const std::vector<double> ht_dev(ht_f.begin(), ht_f.end());

  report(kn, cs.dtype, shp, "o", relRms(o_dev, o_ref));
  report(kn, cs.dtype, shp, "ht", relRms(ht_dev, ht_ref));
}

void runStepCase(const RecurrenceKind& kind, DType dt, int B, int H, int dk, int dv) {
  Inputs in = makeInputs(kind, dt, B, 1, H, dk, dv, B, 1.0, -1e30, true);
  const double scale = 1.0 / std::sqrt(double(dk));
  std::vector<double> o_ref(size_t(B) * H * dv), S_ref(in.h0.begin(), in.h0.end());
  std::vector<double> lam(dk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const size_t th = size_t(b) * H + h;
      decayOf(kind, in, th, h, dk, lam.data());
      std::vector<double> S(S_ref.begin() + th * dk * dv, S_ref.begin() + (th + 1) * dk * dv);
      refToken(kind, dk, dv, &in.q[th * dk], &in.k[th * dk], &in.v[th * dv], lam.data(),
               in.beta.empty() ? 0.0 : in.beta[th], in.u.empty() ? nullptr : &in.u[size_t(h) * dk],
               scale, S, &o_ref[th * dv]);
      std::copy(S.begin(), S.end(), S_ref.begin() + th * dk * dv);
    }
  DevBuf q(in.qb.data(), in.qb.size()), k(in.kb.data(), in.kb.size()), v(in.vb.data(), in.vb.size());
  DevBuf g(in.g.data(), in.g.size() * 4), beta(in.beta.data(), in.beta.size() * 4),
      u(in.u.data(), in.u.size() * 4), st(in.h0.data(), in.h0.size() * 4);
  DevBuf o(o_ref.size() * dtypeSize(dt));
  o.poison();
  RecurrenceShape shape;
  shape.batch = B; shape.seq_len = 1; shape.heads = H; shape.key_dim = dk; shape.value_dim = dv;
  RecurrenceStepArgs a;
  a.q = q.p; a.k = k.p; a.v = v.p; a.g = g.as<float>(); a.beta = beta.as<float>(); a.u = u.as<float>();
  a.scale = float(scale); a.state = st.as<float>(); a.o = o.p;
  kc::recurrentStep(kind, dt, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> ob(o.bytes);
  LINAC_CUDA_CHECK(cudaMemcpy(ob.data(), o.p, o.bytes, cudaMemcpyDeviceToHost));
  const auto o_dev = decode(ob, dt, o_ref.size());
  const auto sf = download<float>(st, S_ref.size());
  char shp[96];
  std::snprintf(shp, sizeof shp, "B%d H%d dk%d dv%d", B, H, dk, dv);
  report("step " + kindName(kind), dt, shp, "o", relRms(o_dev, o_ref));
  report("step " + kindName(kind), dt, shp, "S", relRms(std::vector<double>(sf.begin(), sf.end()), S_ref));
}

void runScanCase(DType dt, int B, int T, int D, std::vector<int64_t> cuv) {
  const bool varlen = !cuv.empty();
  const int N = varlen ? int(cuv.size()) - 1 : B;
  const size_t n = size_t(B) * T * D;
  std::vector<float> x(n), g(n), h0(size_t(N) * D);
  fillNormal(x);
  fillDrawn(g, logsigmoid);
  fillNormal(h0);
  auto xb = encode(x, dt);
  std::vector<double> h_ref(n), ht_ref(size_t(N) * D);
  for (int s = 0; s < N; ++s) {
    const int64_t bos = varlen ? cuv[s] : int64_t(s) * T, len = varlen ? cuv[s + 1] - cuv[s] : T;
    for (int c = 0; c < D; ++c) {
      double hc = h0[size_t(s) * D + c];
      for (int64_t t = 0; t < len; ++t) {
        const size_t i = size_t(bos + t) * D + c;
        hc = std::exp(double(g[i])) * hc + x[i];
        h_ref[i] = hc;
      }
      ht_ref[size_t(s) * D + c] = hc;
    }
  }
  DevBuf xd(xb.data(), xb.size()), gd(g.data(), n * 4), h0d(h0.data(), h0.size() * 4),
      cu(cuv.data(), cuv.size() * 8), hd(n * dtypeSize(dt)), htd(ht_ref.size() * 4);
  hd.poison();
  htd.poison();
  ScanShape shape;
  shape.batch = B; shape.seq_len = T; shape.channels = D;
  shape.cu_seqlens = varlen ? cu.as<int64_t>() : nullptr; shape.num_seqs = N;
  ScanForwardArgs a;
  a.x = xd.p; a.g = gd.as<float>(); a.h0 = h0d.as<float>(); a.h = hd.p; a.ht = htd.as<float>();
  kc::scanForward(dt, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> hb(hd.bytes);
  LINAC_CUDA_CHECK(cudaMemcpy(hb.data(), hd.p, hd.bytes, cudaMemcpyDeviceToHost));
  const auto h_dev = decode(hb, dt, n);
  const auto htf = download<float>(htd, ht_ref.size());
  char shp[96];
  std::snprintf(shp, sizeof shp, "B%d T%d D%d%s", B, T, D, varlen ? " varlen" : "");
  report("scan hgrn", dt, shp, "h", relRms(h_dev, h_ref));
  report("scan hgrn", dt, shp, "ht", relRms(std::vector<double>(htf.begin(), htf.end()), ht_ref));
}

}  // namespace lab
