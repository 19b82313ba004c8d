// The kernel lab's shared helpers (declared and described in lab_common.h): the random stream,
// dtype encoding, the rel-RMS gate and its report line, a case's inputs, its float64 token
// recurrence, and the --cases filter.
#include "lab_common.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>

namespace lab {

std::mt19937_64 rng;
double normal() {
  static std::normal_distribution<double> d(0.0, 1.0);
  return d(rng);
}
double logsigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

void fillNormal(std::vector<float>& x, double scale) {
  fillDrawn(x, [scale](double z) { return scale * z; });
}

const char* dtypeName(DType d) { return d == DType::F32 ? "f32" : d == DType::BF16 ? "bf16" : "f16"; }
size_t dtypeSize(DType d) { return d == DType::F32 ? 4 : 2; }
const char* decayName(DecayClass d) {
  static const char* n[] = {"none", "fixed", "scalar", "diag"};
  return n[int(d)];
}

std::vector<uint8_t> encode(std::vector<float>& x, DType d) {
  std::vector<uint8_t> out(x.size() * dtypeSize(d));
  for (size_t i = 0; i < x.size(); ++i) {
    if (d == DType::F32) {
      std::memcpy(&out[4 * i], &x[i], 4);
    } else if (d == DType::BF16) {
      __nv_bfloat16 b = __float2bfloat16_rn(x[i]);
      x[i] = __bfloat162float(b);
      std::memcpy(&out[2 * i], &b, 2);
    } else {
      __half b = __float2half_rn(x[i]);
      x[i] = __half2float(b);
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}
std::vector<double> decode(const std::vector<uint8_t>& b, DType d, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (d == DType::F32) { float f; std::memcpy(&f, &b[4 * i], 4); out[i] = f; }
    else if (d == DType::BF16) { __nv_bfloat16 h; std::memcpy(&h, &b[2 * i], 2); out[i] = __bfloat162float(h); }
    else { __half h; std::memcpy(&h, &b[2 * i], 2); out[i] = __half2float(h); }
  }
  return out;
}

double relRms(const std::vector<double>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

int g_fail = 0;
uint64_t g_seed = 0;
const char* g_dump_dir = nullptr;
int g_dumps = 0;
void report(const std::string& kind, DType d, const std::string& shape, const char* what, double err) {
  const double tol = d == DType::F32 ? 1e-5 : 5e-3;
  const bool ok = err < tol;
  if (!ok) ++g_fail;
  std::printf("%-28s %-5s %-34s %-4s %10.3e  %s\n", kind.c_str(), dtypeName(d), shape.c_str(), what,
              err, ok ? "PASS" : "FAIL");
}

std::string kindName(const RecurrenceKind& k) {
  return std::string(k.update == UpdateRule::Delta ? "delta" : "additive") + "-" + decayName(k.decay) +
         (k.readout == Readout::ExclusiveBonus ? "-bonus" : "");
}

Inputs makeInputs(const RecurrenceKind& kind, DType dt, int B, int T, int H, int dk, int dv, int N,
                  double gmul, double gclamp, bool with_h0, double wsigma) {
  Inputs in;
  const size_t tok = size_t(B) * T * H;
  in.q.resize(tok * dk); in.k.resize(tok * dk); in.v.resize(tok * dv);
  fillNormal(in.q);
  fillNormal(in.k);
  fillNormal(in.v);
  if (kind.update == UpdateRule::Delta) {  // DeltaNet: L2-normalized q and k
    for (size_t t = 0; t < tok; ++t)
      for (auto* a : {&in.q, &in.k}) {
        double s = 0;
        for (int c = 0; c < dk; ++c) s += double((*a)[t * dk + c]) * (*a)[t * dk + c];
        const double inv = 1.0 / std::sqrt(s + 1e-6);
        for (int c = 0; c < dk; ++c) (*a)[t * dk + c] = float((*a)[t * dk + c] * inv);
      }
    in.beta.resize(tok);
    fillDrawn(in.beta, [](double z) { return 1.0 / (1.0 + std::exp(-z)); });
  }
  auto gate = [=](double z) { return wsigma > 0 ? -std::exp(wsigma * z) : std::max(gclamp, gmul * logsigmoid(z)); };
  switch (kind.decay) {
    case DecayClass::None: break;
    case DecayClass::Fixed:
      in.g.resize(H);
      for (int h = 0; h < H; ++h) in.g[h] = float(std::log(1.0 - std::pow(2.0, -5.0 - h)));
      break;
    case DecayClass::Scalar: in.g.resize(tok); fillDrawn(in.g, gate); break;
    case DecayClass::Diagonal: in.g.resize(tok * dk); fillDrawn(in.g, gate); break;
  }
  if (kind.readout == Readout::ExclusiveBonus) {
    in.u.resize(size_t(H) * dk);
    fillNormal(in.u, 0.5);
  }
  if (with_h0) {
    in.h0.resize(size_t(N) * H * dk * dv);
    fillNormal(in.h0, 0.5);
  }
  in.qb = encode(in.q, dt); in.kb = encode(in.k, dt); in.vb = encode(in.v, dt);
  return in;
}

void refToken(const RecurrenceKind& kind, int dk, int dv, const float* q, const float* k,
              const float* v, const double* lam, double beta, const float* u, double scale,
              std::vector<double>& S, double* o) {
  std::vector<double> ob(dv, 0.0);
  if (kind.readout == Readout::ExclusiveBonus) {
    double bonus = 0;
    for (int c = 0; c < dk; ++c) bonus += double(q[c]) * u[c] * k[c];
    for (int j = 0; j < dv; ++j) {
      double acc = 0;
      for (int c = 0; c < dk; ++c) acc += S[size_t(c) * dv + j] * q[c];
      ob[j] = acc + bonus * v[j];
    }
  }
  for (int c = 0; c < dk; ++c)
    for (int j = 0; j < dv; ++j) S[size_t(c) * dv + j] *= lam[c];
  if (kind.update == UpdateRule::Delta) {
    for (int j = 0; j < dv; ++j) {
      double ks = 0;
      for (int c = 0; c < dk; ++c) ks += double(k[c]) * S[size_t(c) * dv + j];
      const double d = beta * (v[j] - ks);
      for (int c = 0; c < dk; ++c) S[size_t(c) * dv + j] += double(k[c]) * d;
    }
  } else {
    for (int c = 0; c < dk; ++c)
      for (int j = 0; j < dv; ++j) S[size_t(c) * dv + j] += double(k[c]) * v[j];
  }
  if (kind.readout == Readout::Inclusive) {
    for (int j = 0; j < dv; ++j) {
      double acc = 0;
      for (int c = 0; c < dk; ++c) acc += S[size_t(c) * dv + j] * q[c];
      ob[j] = acc;
    }
  }
  for (int j = 0; j < dv; ++j) o[j] = scale * ob[j];
}

void decayOf(const RecurrenceKind& kind, const Inputs& in, size_t tokhead, int h, int dk, double* lam) {
  for (int c = 0; c < dk; ++c) {
    double g = 0;
    if (kind.decay == DecayClass::Fixed) g = in.g[h];
    else if (kind.decay == DecayClass::Scalar) g = in.g[tokhead];
    else if (kind.decay == DecayClass::Diagonal) g = in.g[tokhead * dk + c];
    lam[c] = std::exp(g);
  }
}

bool matchesAny(const char* filter, const std::string& name) {
  if (filter == nullptr) return true;
  const std::string parts = filter;
  for (size_t from = 0; from <= parts.size();) {
    const size_t comma = std::min(parts.find(',', from), parts.size());
    const std::string part = parts.substr(from, comma - from);
    if (!part.empty() && name.find(part) != std::string::npos) return true;
    from = comma + 1;
  }
  return false;
}

const char* caseFilter = nullptr;

std::string caseShape(const Case& cs, bool backward) {
  char shp[96];
  const bool varlen = !cs.cu.empty();
  const char* gates = cs.gclamp > -1e29 ? (cs.gclamp <= -20 ? " g>=-20" : " g>=-5") : "";
  if (!backward)
    std::snprintf(shp, sizeof shp, "B%d T%d H%d dk%d dv%d%s%s", cs.B, cs.T, cs.H, cs.dk, cs.dv,
                  varlen ? " varlen" : "", gates);
  else
    std::snprintf(shp, sizeof shp, "B%d T%d H%d dk%d dv%d%s%s%s%s%s", cs.B, cs.T, cs.H, cs.dk, cs.dv,
                  varlen ? " varlen" : "", gates, cs.wsigma > 0 ? " g=-exp(w)" : "", cs.h0 ? "" : " noh0",
                  cs.all_grads ? "" : " no-dq-dg");
  return shp;
}

bool caseSelected(const std::string& kind, DType dt, const std::string& shape) {
  return matchesAny(caseFilter, kind + " " + dtypeName(dt) + " " + shape);
}

}  // namespace lab
