// The kernel lab's backward checks: the chunkwise backward (runBwdCase: every gradient against a
// float64 reverse-mode sweep of the token recurrence, the bits of a second run where the path is
// deterministic, and --dump-failing's draw files) and HGRN's scan backward (runScanBwdCase).
#include "lab_common.h"
#include "lab_dump.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace lab {
namespace {

/// The kind as linac-select-algorithm would mark it: a diagonal decay read out exclusively takes a
/// precise d_g (its tile's precise_decay_grad) whatever the decay's expression.
RecurrenceKind asCompiled(RecurrenceKind kind) {
  if (kind.decay == DecayClass::Diagonal && kind.readout == Readout::ExclusiveBonus) kind.preciseDecayGrad = true;
  return kind;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Backward: float64 reference = exact reverse-mode sweep of the naive token recurrence (section 3),
// written here independently of the kernels. Loss = <o, d_o> + <ht, d_ht>.
void runBwdCase(const Case& cs) {
  const RecurrenceKind kind = asCompiled(cs.kind);
  const int B = cs.B, T = cs.T, H = cs.H, dk = cs.dk, dv = cs.dv;
  const bool varlen = !cs.cu.empty();
  const int N = varlen ? int(cs.cu.size()) - 1 : B;
  const bool delta = kind.update == UpdateRule::Delta, excl = kind.readout == Readout::ExclusiveBonus;
  const std::string shp = caseShape(cs, true), kn = "bwd " + kindName(kind);
  if (!caseSelected(kn, cs.dtype, shp)) return;
  Inputs in = makeInputs(kind, cs.dtype, B, T, H, dk, dv, N, cs.gmul, cs.gclamp, cs.h0, cs.wsigma);
  const double scale = 1.0 / std::sqrt(double(dk));
  const size_t tok = size_t(B) * T * H, SS = size_t(dk) * dv;
  std::vector<float> dof(tok * dv), dhtf(cs.h0 ? size_t(N) * H * SS : 0);
  fillNormal(dof);
  fillNormal(dhtf);
  auto dob = encode(dof, cs.dtype);

  std::vector<double> rdq(tok * dk, 0), rdk(tok * dk, 0), rdv(tok * dv, 0), rdb(tok, 0),
      rdu(size_t(H) * dk, 0), rdh0(size_t(N) * H * SS, 0);
  std::vector<double> rdg(kind.decay == DecayClass::Fixed ? H : kind.decay == DecayClass::Scalar ? tok
                          : kind.decay == DecayClass::Diagonal ? tok * dk : 0, 0.0);
  // a fixed decay's d_g[h] sums one term a token: their squared norm, the scale its check takes
  double fixedTerms2 = 0.0;
  std::vector<double> lam(dk), o(dv);
  for (int n = 0; n < N; ++n) {
    const int64_t bos = varlen ? cs.cu[n] : int64_t(n) * T;
    const int64_t len = varlen ? cs.cu[n + 1] - cs.cu[n] : T;
    for (int h = 0; h < H; ++h) {
      std::vector<double> St((len + 1) * SS, 0.0);  // St[t] = S_{t-1}
      if (cs.h0)
        for (size_t i = 0; i < SS; ++i) St[i] = in.h0[(size_t(n) * H + h) * SS + i];
      for (int64_t t = 0; t < len; ++t) {
        const size_t th = size_t(bos + t) * H + h;
        std::vector<double> S(St.begin() + t * SS, St.begin() + (t + 1) * SS);
        decayOf(kind, in, th, h, dk, lam.data());
        refToken(kind, dk, dv, &in.q[th * dk], &in.k[th * dk], &in.v[th * dv], lam.data(),
                 in.beta.empty() ? 0.0 : in.beta[th], in.u.empty() ? nullptr : &in.u[size_t(h) * dk],
                 scale, S, o.data());
        std::copy(S.begin(), S.end(), St.begin() + (t + 1) * SS);
      }
      std::vector<double> dS(SS, 0.0), Pp(SS), res(dv), xw(dv), dxw(dv);
      if (cs.h0)
        for (size_t i = 0; i < SS; ++i) dS[i] = dhtf[(size_t(n) * H + h) * SS + i];
      for (int64_t t = len - 1; t >= 0; --t) {
        const size_t th = size_t(bos + t) * H + h;
        const float *q = &in.q[th * dk], *k = &in.k[th * dk], *v = &in.v[th * dv], *d_o = &dof[th * dv];
        const double* P = &St[t * SS];
        decayOf(kind, in, th, h, dk, lam.data());
        const double beta = delta ? in.beta[th] : 0.0;
        for (int c = 0; c < dk; ++c)
          for (int e = 0; e < dv; ++e) Pp[size_t(c) * dv + e] = lam[c] * P[size_t(c) * dv + e];
        for (int e = 0; e < dv; ++e) {
          res[e] = v[e];
          if (delta)
            for (int c = 0; c < dk; ++c) res[e] -= double(k[c]) * Pp[size_t(c) * dv + e];
          xw[e] = delta ? beta * res[e] : double(v[e]);
        }
        // readout
        if (!excl) {
          for (int c = 0; c < dk; ++c) {
            double a = 0;
            for (int e = 0; e < dv; ++e) a += (Pp[size_t(c) * dv + e] + double(k[c]) * xw[e]) * d_o[e];
            rdq[th * dk + c] = scale * a;
            for (int e = 0; e < dv; ++e) dS[size_t(c) * dv + e] += scale * q[c] * d_o[e];
          }
        } else {
          const float* u = &in.u[size_t(h) * dk];
          double vdo = 0, bon = 0;
          for (int e = 0; e < dv; ++e) vdo += double(v[e]) * d_o[e];
          for (int c = 0; c < dk; ++c) {
            double a = 0;
            for (int e = 0; e < dv; ++e) a += P[size_t(c) * dv + e] * d_o[e];
            rdq[th * dk + c] = scale * (a + vdo * u[c] * k[c]);
            rdk[th * dk + c] = scale * vdo * q[c] * u[c];
            rdu[size_t(h) * dk + c] += scale * vdo * q[c] * k[c];
            bon += double(q[c]) * u[c] * k[c];
          }
          for (int e = 0; e < dv; ++e) rdv[th * dv + e] = scale * bon * d_o[e];
        }
        // update S_t = Pp + k xw^T
        for (int e = 0; e < dv; ++e) {
          double a = 0;
          for (int c = 0; c < dk; ++c) a += dS[size_t(c) * dv + e] * k[c];
          dxw[e] = a;
        }
        for (int c = 0; c < dk; ++c) {
          double a = 0;
          for (int e = 0; e < dv; ++e) a += dS[size_t(c) * dv + e] * xw[e];
          rdk[th * dk + c] += a;
        }
        if (delta) {
          double db = 0;
          for (int e = 0; e < dv; ++e) {
            db += dxw[e] * res[e];
            rdv[th * dv + e] += beta * dxw[e];
          }
          rdb[th] = db;
          for (int c = 0; c < dk; ++c) {
            double a = 0;
            for (int e = 0; e < dv; ++e) {
              const double dw = -beta * dxw[e];
              a += Pp[size_t(c) * dv + e] * dw;
              dS[size_t(c) * dv + e] += double(k[c]) * dw;
            }
            rdk[th * dk + c] += a;
          }
        } else {
          for (int e = 0; e < dv; ++e) rdv[th * dv + e] += dxw[e];
        }
        // decay
        double tokenDg = 0.0;
        for (int c = 0; c < dk; ++c) {
          double a = 0;
          for (int e = 0; e < dv; ++e) {
            a += Pp[size_t(c) * dv + e] * dS[size_t(c) * dv + e];
            dS[size_t(c) * dv + e] *= lam[c];
            if (excl) dS[size_t(c) * dv + e] += scale * q[c] * d_o[e];
          }
          if (kind.decay == DecayClass::Fixed) rdg[h] += a;
          else if (kind.decay == DecayClass::Scalar) rdg[th] += a;
          else if (kind.decay == DecayClass::Diagonal) rdg[th * dk + c] = a;
          tokenDg += a;
        }
        fixedTerms2 += tokenDg * tokenDg;
      }
      std::copy(dS.begin(), dS.end(), rdh0.begin() + (size_t(n) * H + h) * SS);
    }
  }

  // device
  const size_t es = dtypeSize(cs.dtype);
  DevBuf q(in.qb.data(), in.qb.size()), k(in.kb.data(), in.kb.size()), v(in.vb.data(), in.vb.size());
  DevBuf g(in.g.data(), in.g.size() * 4), beta(in.beta.data(), in.beta.size() * 4),
      u(in.u.data(), in.u.size() * 4), h0(in.h0.data(), in.h0.size() * 4);
  DevBuf cu(cs.cu.data(), cs.cu.size() * 8), dO(dob.data(), dob.size()), dht(dhtf.data(), dhtf.size() * 4);
  DevBuf dq(tok * dk * es), dkb(tok * dk * es), dvb(tok * dv * es), dg(rdg.size() * 4),
      db(delta ? tok * 4 : 0), du(excl ? rdu.size() * 4 : 0), dh0(rdh0.size() * 4);
  DevBuf* const outs[] = {&dq, &dkb, &dvb, &dg, &db, &du, &dh0};
  auto poisonOutputs = [&] {
    for (DevBuf* b : outs)
      if (b->bytes) b->poison();
  };
  poisonOutputs();
  RecurrenceShape shape;
  shape.batch = B; shape.seq_len = T; shape.heads = H; shape.key_dim = dk; shape.value_dim = dv;
  shape.cu_seqlens = varlen ? cu.as<int64_t>() : nullptr;
  shape.num_seqs = N;
  RecurrenceBackwardArgs a;
  a.fwd.q = q.p; a.fwd.k = k.p; a.fwd.v = v.p;
  a.fwd.g = g.as<float>(); a.fwd.beta = beta.as<float>(); a.fwd.u = u.as<float>(); a.fwd.h0 = h0.as<float>();
  a.fwd.scale = float(scale);
  a.d_o = dO.p; a.d_ht = dht.as<float>();
  a.d_q = cs.all_grads ? dq.p : nullptr; a.d_k = dkb.p; a.d_v = dvb.p;
  a.d_g = cs.all_grads ? dg.as<float>() : nullptr; a.d_beta = db.as<float>();
  a.d_u = du.as<float>(); a.d_h0 = dh0.as<float>();
  kc::chunkBackward(kind, cs.dtype, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  // A path that chunkBackwardAtomics calls deterministic gives the same bits on a second run (into
  // freshly poisoned outputs): the "bits" line (0 when equal).
  const bool deterministic = kc::chunkBackwardAtomics(kind, cs.dtype, shape, a) == nullptr;
  bool sameBits = true;
  if (deterministic) {
    auto bytesOf = [](const DevBuf& b) { return b.bytes ? download<uint8_t>(b, b.bytes) : std::vector<uint8_t>{}; };
    std::vector<std::vector<uint8_t>> first;
    for (const DevBuf* b : outs) first.push_back(bytesOf(*b));
    poisonOutputs();
    kc::chunkBackward(kind, cs.dtype, shape, a, nullptr);
    LINAC_CUDA_CHECK(cudaDeviceSynchronize());
    for (size_t i = 0; i < first.size(); ++i) sameBits &= bytesOf(*outs[i]) == first[i];
  }
  auto get = [&](const DevBuf& b, size_t n, bool typed) {
    if (typed) {
      std::vector<uint8_t> raw(b.bytes);
      LINAC_CUDA_CHECK(cudaMemcpy(raw.data(), b.p, b.bytes, cudaMemcpyDeviceToHost));
      return decode(raw, cs.dtype, n);
    }
    const auto f = download<float>(b, n);
    return std::vector<double>(f.begin(), f.end());
  };
  const int failsBefore = g_fail;
  if (cs.all_grads) report(kn, cs.dtype, shp, "dq", relRms(get(dq, rdq.size(), true), rdq));
  report(kn, cs.dtype, shp, "dk", relRms(get(dkb, rdk.size(), true), rdk));
  report(kn, cs.dtype, shp, "dv", relRms(get(dvb, rdv.size(), true), rdv));
  if (!rdg.empty() && cs.all_grads) {
    std::vector<double> dgv = get(dg, rdg.size(), false);
    double err = relRms(dgv, rdg);
    if (kind.decay == DecayClass::Fixed) {
      // d_g[h] is a sum over every token whose terms can be 10-1000x the total: measured, as `linac
      // verify` measures it (verify/common.cpp, compareTotal), against the larger of the total's
      // norm and the terms' (the error an fp32 sum of those terms leaves is relative to the terms)
      double total2 = 0.0;
      for (double x : rdg) total2 += x * x;
      if (fixedTerms2 > total2) err *= std::sqrt(total2 / fixedTerms2);
    }
    report(kn, cs.dtype, shp, "dg", err);
    if (cs.wsigma > 0) {  // d_w = d_g . dg/dw = d_g . g: the small d_g of strongly decaying channels weigh most
      std::vector<double> rdw(rdg.size());
      for (size_t i = 0; i < rdg.size(); ++i) {
        dgv[i] *= in.g[i];
        rdw[i] = rdg[i] * in.g[i];
      }
      report(kn, cs.dtype, shp, "dw", relRms(dgv, rdw));
    }
  }
  if (delta) report(kn, cs.dtype, shp, "dbet", relRms(get(db, rdb.size(), false), rdb));
  if (excl) report(kn, cs.dtype, shp, "du", relRms(get(du, rdu.size(), false), rdu));
  if (cs.h0) report(kn, cs.dtype, shp, "dh0", relRms(get(dh0, rdh0.size(), false), rdh0));
  if (deterministic) report(kn, cs.dtype, shp, "bits", sameBits ? 0.0 : INFINITY);
  if (!g_dump_dir || g_fail == failsBefore) return;

  // The draw, the float64 reference and the kernels' gradients, for the host to replay.
  lab::CaseDump dump;
  dump.meta("kind", kindName(kind));
  dump.meta("dtype", dtypeName(cs.dtype));
  dump.meta("shape", shp);
  dump.meta("seed", std::to_string(g_seed));
  for (const auto& [key, value] : {std::pair<const char*, int>{"B", B}, {"T", T}, {"H", H}, {"dk", dk}, {"dv", dv}, {"N", N}})
    dump.meta(key, double(value));
  dump.meta("scale", scale);
  dump.meta("precise_decay_grad", kind.preciseDecayGrad ? 1.0 : 0.0);  // the Hopper diagonal stage's two halves
  dump.meta("cu_seqlens", cs.cu);
  const std::vector<int64_t> tokK{B, T, H, dk}, tokV{B, T, H, dv}, tokens{B, T, H}, heads{H, dk},
      states{N, H, dk, dv};
  const std::vector<int64_t> gShape = kind.decay == DecayClass::Fixed      ? std::vector<int64_t>{H}
                                      : kind.decay == DecayClass::Diagonal ? tokK
                                                                           : tokens;
  dump.array("q", in.q, tokK); dump.array("k", in.k, tokK); dump.array("v", in.v, tokV);
  dump.array("g", in.g, gShape); dump.array("beta", in.beta, tokens); dump.array("u", in.u, heads);
  dump.array("h0", in.h0, states); dump.array("d_o", dof, tokV); dump.array("d_ht", dhtf, states);
  dump.array("ref_dq", rdq, tokK); dump.array("ref_dk", rdk, tokK); dump.array("ref_dv", rdv, tokV);
  dump.array("ref_dg", rdg, gShape); dump.array("ref_dbeta", delta ? rdb : std::vector<double>{}, tokens);
  dump.array("ref_du", excl ? rdu : std::vector<double>{}, heads); dump.array("ref_dh0", rdh0, states);
  if (cs.all_grads) dump.array("dq", get(dq, rdq.size(), true), tokK);
  dump.array("dk", get(dkb, rdk.size(), true), tokK);
  dump.array("dv", get(dvb, rdv.size(), true), tokV);
  if (cs.all_grads && !rdg.empty()) dump.array("dg", get(dg, rdg.size(), false), gShape);
  if (delta) dump.array("dbeta", get(db, rdb.size(), false), tokens);
  if (excl) dump.array("du", get(du, rdu.size(), false), heads);
  if (cs.h0) dump.array("dh0", get(dh0, rdh0.size(), false), states);
  const std::string path = std::string(g_dump_dir) + "/bwd-" + std::to_string(++g_dumps) + ".bin";
  if (dump.write(path)) std::printf("  (draw written to %s)\n", path.c_str());
  else std::printf("  (could not write %s)\n", path.c_str());
}

void runScanBwdCase(DType dt, int B, int T, int D, std::vector<int64_t> cuv) {
  const bool varlen = !cuv.empty();
  const int N = varlen ? int(cuv.size()) - 1 : B;
  const size_t n = size_t(B) * T * D;
  std::vector<float> x(n), g(n), h0(size_t(N) * D), dh(n), dht(size_t(N) * D);
  fillNormal(x);
  fillDrawn(g, logsigmoid);
  fillNormal(h0);
  fillNormal(dh);
  fillNormal(dht);
  auto xb = encode(x, dt);
  auto dhb = encode(dh, dt);
  std::vector<double> rdx(n, 0), rdg(n, 0), rdh0(size_t(N) * D);
  for (int s = 0; s < N; ++s) {
    const int64_t bos = varlen ? cuv[s] : int64_t(s) * T, len = varlen ? cuv[s + 1] - cuv[s] : T;
    for (int c = 0; c < D; ++c) {
      std::vector<double> hp(len + 1);
      hp[0] = h0[size_t(s) * D + c];
      for (int64_t t = 0; t < len; ++t) {
        const size_t i = size_t(bos + t) * D + c;
        hp[t + 1] = std::exp(double(g[i])) * hp[t] + x[i];
      }
      double acc = dht[size_t(s) * D + c];
      for (int64_t t = len - 1; t >= 0; --t) {
        const size_t i = size_t(bos + t) * D + c;
        acc += dh[i];
        rdx[i] = acc;
        const double lam = std::exp(double(g[i]));
        rdg[i] = acc * lam * hp[t];
        acc *= lam;
      }
      rdh0[size_t(s) * D + c] = acc;
    }
  }
  DevBuf xd(xb.data(), xb.size()), gd(g.data(), n * 4), h0d(h0.data(), h0.size() * 4),
      cu(cuv.data(), cuv.size() * 8), dhd(dhb.data(), dhb.size()), dhtd(dht.data(), dht.size() * 4),
      dxd(n * dtypeSize(dt)), dgd(n * 4), dh0d(rdh0.size() * 4);
  dxd.poison(); dgd.poison(); dh0d.poison();
  ScanShape shape;
  shape.batch = B; shape.seq_len = T; shape.channels = D;
  shape.cu_seqlens = varlen ? cu.as<int64_t>() : nullptr; shape.num_seqs = N;
  ScanBackwardArgs a;
  a.fwd.x = xd.p; a.fwd.g = gd.as<float>(); a.fwd.h0 = h0d.as<float>();
  a.d_h = dhd.p; a.d_ht = dhtd.as<float>(); a.d_x = dxd.p; a.d_g = dgd.as<float>(); a.d_h0 = dh0d.as<float>();
  kc::scanBackward(dt, shape, a, nullptr);
  LINAC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> raw(dxd.bytes);
  LINAC_CUDA_CHECK(cudaMemcpy(raw.data(), dxd.p, dxd.bytes, cudaMemcpyDeviceToHost));
  const auto dgf = download<float>(dgd, n), dh0f = download<float>(dh0d, rdh0.size());
  char shp[96];
  std::snprintf(shp, sizeof shp, "B%d T%d D%d%s", B, T, D, varlen ? " varlen" : "");
  report("bwd scan hgrn", dt, shp, "dx", relRms(decode(raw, dt, n), rdx));
  report("bwd scan hgrn", dt, shp, "dg", relRms(std::vector<double>(dgf.begin(), dgf.end()), rdg));
  report("bwd scan hgrn", dt, shp, "dh0", relRms(std::vector<double>(dh0f.begin(), dh0f.end()), rdh0));
}

}  // namespace lab
