// Rendering of TextTable.
#include "tools/karma-trace/table.h"

#include <algorithm>

namespace karma::tools {

std::string TextTable::Render() const {
  std::vector<size_t> width(titles_.size());
  for (size_t c = 0; c < titles_.size(); ++c) width[c] = titles_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
      if (c > 0) out += "  ";
      const bool last = c + 1 == width.size();
      out += aligns_[c] == kRight ? pad + cell : (last ? cell : cell + pad);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
    return out;
  };
  std::string out = line(titles_);
  for (const auto& row : rows_) out += line(row);
  return out;
}

}  // namespace karma::tools
