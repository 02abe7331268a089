// Human-readable figures and aligned text tables for the CLI's output.
#pragma once

#include <string>
#include <vector>

namespace longhaul::cli {

// 52428800 bytes/s -> "419.4 Mbit/s"; 0 -> "-".
std::string FormatBitRate(double bytes_per_second);
// 1536 -> "1.5 KiB"; 0 -> "0 B".
std::string FormatBytes(double bytes);
// 0.000213 -> "0.21 ms"; 0 -> "-".
std::string FormatSeconds(double seconds);
// 3725 -> "1h02m"; 42 -> "42s".
std::string FormatDuration(double seconds);

// A table printed with columns padded to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void AddRow(std::vector<std::string> row);
  int rows() const { return static_cast<int>(rows_.size()) - 1; }  // not counting the header
  std::string str() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace longhaul::cli
