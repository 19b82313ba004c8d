#include "linac/Emit/PythonLayerEmitter.h"

#include "linac/Emit/LayerEmitter.h"
#include "linac/Emit/ScalarEmitter.h"

#include <sstream>
#include <stdexcept>
#include <vector>

namespace linac::emit {
namespace {

namespace ml = mlir::linac;

/// One prologue function in Python, and its MAPS entry.
struct PythonMap {
  std::string role;
  std::vector<std::string> args;
};

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

void emitMap(ml::MapOp map, std::ostringstream& os, std::vector<PythonMap>& maps) {
  const std::string role = map.getRole() ? map.getRole()->str() : "map";
  if (role.rfind("grad:", 0) == 0) return;  // torch differentiates the forward
  std::vector<std::string> names;
  for (auto [i, v] : llvm::enumerate(map.getInputs())) names.push_back(mapOperandName(v, i));
  const ScalarCode code = emitScalarBody(map.getBodyBlock(), names, ScalarLanguage::Torch);
  std::string params;
  for (size_t i = 0; i < names.size(); ++i) params += (i ? ", " : "") + names[i];
  os << "\n\ndef " << role << "(" << params << "):\n";
  if (auto loc = llvm::dyn_cast<mlir::FileLineColLoc>(map.getLoc()))
    os << "    # `" << role << "` at line " << loc.getLine() << ", column " << loc.getColumn() << " of the spec\n";
  for (const std::string& s : code.statements) os << "    " << s << "\n";
  os << "    return " << code.results.at(0) << "\n";
  maps.push_back({role, names});
}

}  // namespace

std::string pythonLayerSource(ml::VariantOp variant, const std::string& banner, const std::string& specHash) {
  const std::string name = variant.getSymName().str();
  auto recs = variant.getBodyBlock().getOps<ml::RecurrenceOp>();
  if (recs.empty()) throw std::runtime_error("emit: a variant without recurrence");
  ml::RecurrenceOp rec = *recs.begin();

  std::ostringstream os;
  os << banner
     << "\"\"\"" << name << "'s layer for linac.nn: its kind, its description (LAYER) and its prologue\n"
     << "functions (MAPS: role -> (function, the names of its operands)), printed from the compiled IR\n"
     << "as " << name << ".h and " << name << "_register.cpp are. The functions compute elementwise over\n"
     << "float32 operands broadcast to one shape.\"\"\"\n"
     << "import torch\n\n"
     << "NAME = " << quoted(name) << "\n"
     << "SPEC_SHA256 = " << quoted(specHash) << "\n"
     << "KIND = {\"state\": " << quoted(ml::stringifyStateKind(rec.getState()).str())
     << ", \"decay\": " << quoted(ml::stringifyDecayClass(rec.getDecayClass()).str())
     << ", \"update\": " << quoted(ml::stringifyUpdateRule(rec.getUpdate()).str())
     << ", \"readout\": " << quoted(ml::stringifyReadout(rec.getReadout()).str()) << "}\n"
     << "CHUNK = " << variant.getChunk() << "\n\n"
     << layerDescriptionPython(variant);

  std::vector<PythonMap> maps;
  for (auto map : variant.getBodyBlock().getOps<ml::MapOp>()) emitMap(map, os, maps);
  os << "\n\nMAPS = {\n";
  for (const PythonMap& m : maps) {
    std::string args = "(";
    for (size_t i = 0; i < m.args.size(); ++i) args += (i ? ", " : "") + quoted(m.args[i]);
    args += m.args.size() == 1 ? ",)" : ")";  // a one-element tuple
    os << "    " << quoted(m.role) << ": (" << m.role << ", " << args << "),\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace linac::emit
