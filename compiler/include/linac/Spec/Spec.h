// The parsed form of a linac spec: a linear-attention (or attention) variant, a layer schedule and
// a model preset. Produced by the parser (SpecParser.h), consumed by spec-to-IR and the runtime.
// No MLIR here: the runtime reads specs on machines without MLIR. specs/README.md documents the
// YAML these structures come from, field by field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace linac::spec {

/// A position in a spec file, 1-based. col points inside an expression string where the
/// thing it locates is inside one.
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;
};

// ----- expressions ---------------------------------------------------------------------------

enum class ExprKind { Number, Ref, Neg, Binary, Call };

/// An expression tree: numbers, references (inputs, params, definitions, `head`, `layer`,
/// `num_layers`, `head_dim`...), unary minus, + - * /, and calls of the built-in functions
/// (exp log sigmoid logsigmoid softplus silu tanh sqrt rsqrt min max clamp abs pow).
struct Expr {
  ExprKind kind = ExprKind::Number;
  SourceLoc loc;                             // where the node starts
  double number = 0.0;                       // Number
  std::string name;                          // Ref: the name; Call: the function
  char op = 0;                               // Binary: one of + - * /
  std::vector<std::shared_ptr<const Expr>> args;  // Neg: 1, Binary: 2, Call: its arguments

  /// Releases the operands without recursion (a long sum is a deep chain of nodes).
  ~Expr();
};
using ExprPtr = std::shared_ptr<const Expr>;

/// Renders an expression back to text (fully parenthesised binary ops), for dumps and tests.
std::string toString(const Expr& e);

// ----- variant spec --------------------------------------------------------------------------

/// The per-token size of a value within one head (for `hidden`: the whole model width).
enum class Extent { Scalar, Head, Key, Value, Hidden };

/// Lower-case spelling of an extent, as specs write it ("head", "key", ...).
const char* extentName(Extent e);

// Swish is an alias of Silu; it comes last so that it does not renumber the others.
enum class Activation { None, Silu, Sigmoid, Relu, Tanh, Elu1, Swish = Silu };

/// A per-head dimension, absolute or as a ratio of the model width (total width = expand *
/// hidden, split over heads).
struct DimSpec {
  int64_t absolute = 0;    // per-head size, when > 0
  double expand = 0.0;     // total = expand * hidden, when > 0
  SourceLoc loc;
  /// Per-head size for a model of width `hidden` with `heads` heads; throws SpecError when
  /// the total is not an integer or does not divide by heads.
  int64_t resolve(int64_t hidden, int64_t heads) const;
};

/// A per-token input: a projection of the layer input x, post-processed.
struct InputSpec {
  std::string name;
  SourceLoc loc;
  Extent extent = Extent::Key;   // output size per head (Hidden: whole width, no heads)
  int64_t lowRank = 0;           // > 0: x -> rank -> extent (GLA's gate, RWKV-6's LoRAs)
  int64_t conv = 0;              // > 0: short causal depthwise conv of this width
  Activation activation = Activation::None;
  bool l2norm = false;           // L2-normalise per head
  bool tokenShift = false;       // RWKV-style: project (x_{t-1} - x_t) mixed into x_t
  bool bias = false;
  bool rope = false;             // rotary position embedding on this input (RetNet's q, k)
};

enum class InitKind { Zeros, Ones, Constant, Normal, Uniform, LogUniform, DtBias };

/// How a parameter is initialised. Constant: a; Normal: std a; Uniform / LogUniform: [a, b];
/// DtBias: Mamba's inverse-softplus of a log-uniform dt in [a, b].
struct InitSpec {
  InitKind kind = InitKind::Zeros;
  double a = 0.0, b = 0.0;
  SourceLoc loc;
};

/// A learned parameter of the layer, constant over tokens.
struct ParamSpec {
  std::string name;
  SourceLoc loc;
  Extent extent = Extent::Head;  // Scalar: one per layer; Head: [H]; Key: [H, dk]; Value: [H, dv]
  InitSpec init;
};

/// A named derived quantity, e.g. HGRN-2's forget gate f, reused by decay and tied keys.
struct DefSpec {
  std::string name;
  SourceLoc loc;
  ExprPtr expr;
};

enum class StateKind { Matrix, Vector };
enum class UpdateKind { Additive, Delta };
enum class ReadoutKind { Inclusive, ExclusiveBonus };

struct RecurrenceSpec {
  SourceLoc loc;
  StateKind state = StateKind::Matrix;
  ExprPtr q, k, v;          // usually plain references to inputs or definitions
  ExprPtr decay;            // log-space decay g <= 0; null: no decay
  UpdateKind update = UpdateKind::Additive;
  ExprPtr beta;             // delta only
  ReadoutKind readout = ReadoutKind::Inclusive;
  std::string bonus;        // exclusive_bonus: name of the [H, dk] parameter u
  std::optional<double> scale;  // absent: key_dim^-0.5
};

enum class NormKind { None, RMSNorm, GroupNorm, LayerNorm };

struct OutputSpec {
  SourceLoc loc;
  NormKind norm = NormKind::RMSNorm;
  ExprPtr gate;             // multiplies the normed output; null: no gate
  ExprPtr residual;         // added to o before the norm (Mamba-2's D * x); null: none
};

enum class VariantKind { Linear, Attention };

/// Full attention's extra settings (kind: attention).
struct AttentionSpec {
  int64_t kvHeads = 0;      // 0: = heads (no GQA)
  double ropeTheta = 10000.0;
  bool rope = true;
};

struct VariantSpec {
  std::string file;         // the path it was read from
  std::string name;
  SourceLoc loc;
  VariantKind kind = VariantKind::Linear;
  std::string description;
  int64_t heads = 0;
  DimSpec keyDim, valueDim;
  std::vector<InputSpec> inputs;
  std::vector<ParamSpec> params;
  std::vector<DefSpec> defs;
  RecurrenceSpec recurrence;
  OutputSpec output;
  AttentionSpec attention;
  int64_t chunk = 64;       // chunk-size hint for the chunkwise algorithm
  std::string hash;         // hex SHA-256 of the file's bytes, for generated banners and caches
};

// ----- schedule and preset -------------------------------------------------------------------

enum class ScheduleKind { Ratio, Pure, Transformer, Explicit };

/// Which layers are full attention. Ratio r: blocks of r linear + 1 attention repeated;
/// Explicit: the listed 0-based attention layer indices (fla's attn.layers).
struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::Pure;
  int64_t ratio = 0;
  std::vector<int64_t> attentionLayers;
  std::string text;         // as written, for messages and names ("3:1")
  SourceLoc loc;            // where it was written, for expand()'s range errors
  /// true at index i when layer i is full attention; throws SpecError when an explicit index
  /// is out of range.
  std::vector<bool> expand(int64_t numLayers) const;
};

/// A model size (fla/flame's configs).
struct PresetSpec {
  std::string name;
  std::string file;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t vocab = 0;
  int64_t attnHeads = 0;        // heads of the full-attention layers
  int64_t intermediate = 0;     // SwiGLU width; 0: fla's default (hidden * 4 * 2/3 rounded to 256)
  int64_t maxSeqLen = 2048;
  bool tieEmbeddings = false;
};

}  // namespace linac::spec
