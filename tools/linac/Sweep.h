// `linac sweep`: a grid of training runs (linear-attention specs x layer schedules x seeds, plus
// an all-attention Transformer) kept as one resumable folder:
//
//   DIR/sweep.json                 the grid and the settings every cell shares
//   DIR/cells/<cell>/run/          the cell's `linac train` run directory (eval.jsonl inside)
//   DIR/cells/<cell>/train.log     its output; eval.log likewise
//   DIR/cells/<cell>/cell.json     {"status": "done" | "failed", "stage", "exit_code", "seconds"}
//   DIR/cells/<cell>/memory.json   `linac memory --json` of the cell at the sweep's memory context
//   DIR/results.csv, results.json  one row per cell (results are re-read from the run directories)
//   DIR/plots/*.png, *.svg         tools/sweep_plots.py, when Python has matplotlib
//
// A cell whose cell.json says "done" is skipped on a re-run; a failed one is tried again (its
// training resumed from its last checkpoint).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace linac::cli {

/// What every cell shares; a re-run must give the same (sweep.json keeps it).
struct SweepSettings {
  std::string preset;
  int64_t steps = 0;
  std::string tasks;                  // linac eval --tasks
  std::string device;                 // cpu | cuda
  std::vector<std::string> trainArgs; // further `linac train` flags, as given
  std::vector<std::string> evalArgs;  // further `linac eval` flags, as given
  int64_t memoryContext = 0;          // tokens at which `linac memory` sizes each cell's cache
  nlohmann::ordered_json toJson() const;
};

struct SweepGrid {
  std::vector<std::string> specs;      // absolute paths of linear-attention specs
  std::vector<std::string> schedules;  // "3:1", "pure", "transformer", "3,7", ...
  std::vector<int64_t> seeds;
};

/// One training run of the grid.
struct SweepCell {
  std::string name;      // folder name: "<spec>-<schedule>[-seed<N>]", or "transformer[-seed<N>]"
  std::string spec;      // the spec trained (for the Transformer the first spec: no linear layer uses it)
  std::string variant;   // the spec's file stem, or "transformer"
  std::string schedule;
  int64_t seed = 0;
};

/// The grid's cells in run order: per spec its schedules, the Transformer last (once per seed).
std::vector<SweepCell> planCells(const SweepGrid& grid);

/// A schedule as a folder-name part: "3:1" -> "3to1", "3,7" -> "attn3_7".
std::string scheduleSlug(const std::string& schedule);

/// One results row for a cell from its folder: settings, status, training loss, throughput and
/// its cache bytes (memory.json: "cache_bytes", "cache_share_of_transformer") and every
/// eval.jsonl score of its final checkpoint, flattened ("ppl", "mqar_4", "mqar",
/// "ruler_1024", "ruler_niah_single_1_1024", "arc_easy_acc", ...).
nlohmann::ordered_json cellResults(const SweepCell& cell, const std::string& cellDir);

/// results.json (an array of rows) and results.csv (the union of the rows' keys as columns, the
/// cell's identity first), each written to a temporary file and renamed.
void writeResults(const std::string& dir, const std::vector<nlohmann::ordered_json>& rows);

}  // namespace linac::cli
