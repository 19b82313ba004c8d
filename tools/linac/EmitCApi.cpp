#include "EmitCApi.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

namespace linac::cli {
namespace {

/// One parameter of a generated C function: its C declaration and the field of the
/// runtime/capi argument struct it fills ("" when passed separately).
struct Param {
  std::string declaration;
  std::string field;
};

std::string joinDeclarations(const std::vector<Param>& params, const std::string& indent) {
  std::string out;
  for (size_t i = 0; i < params.size(); ++i)
    out += (i ? ",\n" + indent : "") + params[i].declaration;
  return out;
}

std::string decayShape(const CApiVariant& v, bool tokens) {
  if (v.decayClass == "fixed") return "[H]";
  if (v.decayClass == "scalar") return tokens ? "[B, T, H]" : "[B, H]";
  return tokens ? "[B, T, H, dk]" : "[B, H, dk]";
}

std::string gateDoc(const CApiVariant& v, const std::string& gate, bool tokens) {
  if (gate == "g") return "g " + decayShape(v, tokens) + " F32 log-decay (<= 0)";
  if (gate == "beta") return std::string("beta ") + (tokens ? "[B, T, H]" : "[B, H]") + " F32";
  return "u [H, dk] F32 bonus";
}

std::string kindText(const CApiVariant& v) {
  if (v.vectorState) return "vector state (h_t = exp(g_t) * h_{t-1} + x_t per channel)";
  return "matrix state, " + v.update + " update, " + v.decayClass + " decay, " + v.readout + " readout";
}

std::vector<Param> matrixInputs(const CApiVariant& v) {
  std::vector<Param> params{{"const linac_tensor* q", "q"}, {"const linac_tensor* k", "k"},
                            {"const linac_tensor* v", "v"}};
  for (const std::string& gate : gates(v)) params.push_back({"const linac_tensor* " + gate, gate});
  params.push_back({"float scale", "scale"});
  return params;
}

struct Functions {
  std::vector<Param> forward, backward, step;
};

Functions matrixFunctions(const CApiVariant& v) {
  Functions f;
  f.forward = matrixInputs(v);
  f.forward.push_back({"const linac_tensor* initial_state", "initialState"});
  f.forward.push_back({"const linac_tensor* cu_seqlens", "cuSeqlens"});
  f.backward = f.forward;
  f.forward.push_back({"linac_tensor* o", ""});
  f.forward.push_back({"linac_tensor* final_state", ""});
  f.backward.push_back({"const linac_tensor* d_o", ""});
  f.backward.push_back({"const linac_tensor* d_final_state", ""});
  for (const char* grad : {"d_q", "d_k", "d_v"}) f.backward.push_back({std::string("linac_tensor* ") + grad, ""});
  for (const std::string& gate : gates(v)) f.backward.push_back({"linac_tensor* d_" + gate, ""});
  f.backward.push_back({"linac_tensor* d_initial_state", ""});
  f.step = matrixInputs(v);
  f.step.push_back({"linac_tensor* state", "state"});
  f.step.push_back({"linac_tensor* o", "o"});
  for (std::vector<Param>* list : {&f.forward, &f.backward, &f.step}) list->push_back({"void* stream", ""});
  return f;
}

Functions vectorFunctions() {
  Functions f;
  f.forward = {{"const linac_tensor* x", "x"},
               {"const linac_tensor* g", "g"},
               {"const linac_tensor* initial_state", "initialState"},
               {"const linac_tensor* cu_seqlens", "cuSeqlens"}};
  f.backward = f.forward;
  f.forward.push_back({"linac_tensor* h", ""});
  f.forward.push_back({"linac_tensor* final_state", ""});
  for (const char* p : {"const linac_tensor* d_h", "const linac_tensor* d_final_state",
                        "linac_tensor* d_x", "linac_tensor* d_g", "linac_tensor* d_initial_state"})
    f.backward.push_back({p, ""});
  f.step = {{"const linac_tensor* x", ""}, {"const linac_tensor* g", ""},
            {"linac_tensor* state", ""}, {"linac_tensor* h", ""}};
  for (std::vector<Param>* list : {&f.forward, &f.backward, &f.step}) list->push_back({"void* stream", ""});
  return f;
}

std::string declare(const std::string& name, const std::vector<Param>& params) {
  const std::string head = "LINAC_API linac_status " + name + "(";
  return head + joinDeclarations(params, std::string(head.size(), ' ')) + ");\n";
}

std::string define(const std::string& name, const std::vector<Param>& params, const std::string& body) {
  const std::string head = "LINAC_API linac_status " + name + "(";
  return head + joinDeclarations(params, std::string(head.size(), ' ')) + ") {\n" + body + "}\n";
}

/// `in.q = q;` for every parameter that fills the argument struct.
std::string assignFields(const std::vector<Param>& params, const std::string& target) {
  std::string out;
  for (const Param& p : params) {
    if (p.field.empty()) continue;
    const std::string arg = p.declaration.substr(p.declaration.rfind(' ') + 1);
    out += "  " + target + "." + p.field + " = " + arg + ";\n";
  }
  return out;
}

std::string enumOf(const std::string& value, const std::string& type) {
  static const std::vector<std::pair<std::string, std::string>> names{
      {"none", "None"},         {"fixed", "Fixed"},       {"scalar", "Scalar"},
      {"diagonal", "Diagonal"}, {"additive", "Additive"}, {"delta", "Delta"},
      {"inclusive", "Inclusive"}, {"exclusive_bonus", "ExclusiveBonus"}};
  for (const auto& [spec, cpp] : names)
    if (spec == value) return "kernels::" + type + "::" + cpp;
  throw std::runtime_error("manifest value '" + value + "' has no kernels::" + type);
}

}  // namespace

std::vector<std::string> gates(const CApiVariant& v) {
  std::vector<std::string> names;
  if (v.decayClass != "none") names.push_back("g");
  if (v.update == "delta") names.push_back("beta");
  if (v.readout == "exclusive_bonus") names.push_back("u");
  return names;
}

CApiVariant parseManifest(const std::string& manifestJson, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(manifestJson, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error(where + ": not a JSON object");
  auto field = [&](const char* key) -> std::string {
    if (!j.contains(key) || !j[key].is_string())
      throw std::runtime_error(where + ": no string field '" + key + "'; regenerate it with `linac compile`");
    return j[key].get<std::string>();
  };
  CApiVariant v;
  v.name = field("name");
  v.specHash = field("sha256");
  if (field("kind") != "linear")
    throw std::runtime_error(where + ": '" + v.name + "' is not a linear variant (full attention "
                             "has no linac kernels: it runs through SDPA)");
  v.vectorState = field("state") == "vector";
  v.decayClass = field("decay_class");
  v.update = field("update");
  v.readout = field("readout");
  return v;
}

std::string emitCApiHeader(const std::vector<CApiVariant>& variants, const std::string& version) {
  std::string out =
      "/* Generated by `linac emit`. Do not edit: emit again.\n"
      " * The C API of linac_kernels " + version + ": per variant a forward, a backward and a decode step over\n"
      " * the tensors of linac_capi.h (fla's [B, T, H, D] layout; N sequences: B, or the length of\n"
      " * cu_seqlens minus one). Optional tensors may be NULL: initial_state (zeros), cu_seqlens\n"
      " * (B separate sequences), final_state (not written), d_final_state (zeros), and every\n"
      " * gradient output (not computed). Each call returns LINAC_OK or a status with the reason in\n"
      " * linac_last_error(). */\n"
      "#ifndef LINAC_KERNELS_H\n#define LINAC_KERNELS_H\n\n#include \"linac_capi.h\"\n\n"
      "#define LINAC_KERNELS_VERSION \"" + version + "\"\n\n"
      "#ifdef __cplusplus\nextern \"C\" {\n#endif\n";
  for (const CApiVariant& v : variants) {
    const std::string p = "linac_" + v.name;
    out += "\n/* " + v.name + ": " + kindText(v) + "; spec sha256 " + v.specHash + ".\n";
    if (v.vectorState) {
      out += " * x, h, d_x [B, T, D] F32 / BF16 / F16; g, d_g [B, T, D] F32 log-decay (<= 0);\n"
             " * states [N, D] F32. The step: x, h [B, D], g [B, D], state [B, D] updated in place. */\n";
      const Functions f = vectorFunctions();
      out += declare(p + "_forward", f.forward) + declare(p + "_backward", f.backward) +
             declare(p + "_step", f.step);
      continue;
    }
    std::string gateLines;
    for (const std::string& gate : gates(v)) gateLines += "; " + gateDoc(v, gate, true);
    std::string stepLines;
    for (const std::string& gate : gates(v)) stepLines += "; " + gateDoc(v, gate, false);
    out += " * q, k [B, T, H, dk], v, o [B, T, H, dv] F32 / BF16 / F16" + gateLines +
           "; states [N, H, dk, dv] F32;\n"
           " * gradients take their input's shape. The step: q, k [B, H, dk], v, o [B, H, dv]" + stepLines +
           ",\n * state [B, H, dk, dv] updated in place. */\n";
    const Functions f = matrixFunctions(v);
    out += declare(p + "_forward", f.forward) + declare(p + "_backward", f.backward) +
           declare(p + "_step", f.step);
  }
  out += "\n#ifdef __cplusplus\n}\n#endif\n\n#endif /* LINAC_KERNELS_H */\n";
  return out;
}

std::string emitCApiSource(const CApiVariant& v) {
  const std::string p = "linac_" + v.name;
  std::string out =
      "// Generated by `linac emit`. Do not edit: emit again.\n"
      "// spec sha256: " + v.specHash + "\n//\n"
      "// " + v.name + "'s C functions (linac_kernels.h) over the kernels, with the generated header's kind.\n"
      "#include \"linac_kernels.h\"\n\n#include \"capi_internal.h\"\n#include \"" + v.name + "/" + v.name +
      ".h\"\n\nusing namespace linac;\nusing namespace linac::generated::" + v.name + ";\n\n";
  out += std::string("static_assert(kVectorState == ") + (v.vectorState ? "true" : "false") + ", \"" + v.name +
         ".h and its manifest disagree on the state; emit again\");\n";
  if (!v.vectorState)
    out += "static_assert(kKind.decay == " + enumOf(v.decayClass, "DecayClass") +
           " && kKind.update == " + enumOf(v.update, "UpdateRule") +
           " && kKind.readout == " + enumOf(v.readout, "Readout") + ",\n              \"" + v.name +
           ".h and its manifest disagree on the kind; emit again\");\n";
  out += "\nextern \"C\" {\n\n";
  if (v.vectorState) {
    const Functions f = vectorFunctions();
    out += define(p + "_forward", f.forward,
                  "  capi::ScanInputs in;\n  in.function = \"" + p + "_forward\";\n" +
                      assignFields(f.forward, "in") + "  return capi::scanForward(in, h, final_state, stream);\n");
    out += "\n" + define(p + "_backward", f.backward,
                         "  capi::ScanInputs in;\n  in.function = \"" + p + "_backward\";\n" +
                             assignFields(f.backward, "in") +
                             "  return capi::scanBackward(in, d_h, d_final_state, d_x, d_g, "
                             "d_initial_state, stream);\n");
    out += "\n" + define(p + "_step", f.step,
                         "  return capi::scanStep(\"" + p + "_step\", x, g, state, h, stream);\n");
  } else {
    const Functions f = matrixFunctions(v);
    out += define(p + "_forward", f.forward,
                  "  capi::RecurrenceInputs in;\n  in.function = \"" + p + "_forward\";\n" +
                      assignFields(f.forward, "in") +
                      "  return capi::recurrenceForward(kKind, kChunk, in, {o, final_state}, stream);\n");
    std::string grads = "  capi::BackwardTensors grads;\n  grads.dO = d_o;\n  grads.dFinalState = d_final_state;\n"
                        "  grads.dQ = d_q;\n  grads.dK = d_k;\n  grads.dV = d_v;\n";
    for (const std::string& gate : gates(v))
      grads += std::string("  grads.d") + (gate == "g" ? "G" : gate == "beta" ? "Beta" : "U") + " = d_" + gate + ";\n";
    grads += "  grads.dInitialState = d_initial_state;\n";
    out += "\n" + define(p + "_backward", f.backward,
                         "  capi::RecurrenceInputs in;\n  in.function = \"" + p + "_backward\";\n" +
                             assignFields(f.backward, "in") + grads +
                             "  return capi::recurrenceBackward(kKind, kChunk, in, grads, stream);\n");
    out += "\n" + define(p + "_step", f.step,
                         "  capi::StepTensors step;\n  step.function = \"" + p + "_step\";\n" +
                             assignFields(f.step, "step") +
                             "  return capi::recurrenceStep(kKind, step, stream);\n");
  }
  out += "\n}  // extern \"C\"\n";
  return out;
}

}  // namespace linac::cli
