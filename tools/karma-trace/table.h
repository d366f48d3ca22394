// A plain-text table: columns sized to their widest cell, numbers right-aligned.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace karma::tools {

class TextTable {
 public:
  enum Align { kLeft, kRight };
  void AddColumn(std::string title, Align align) {
    titles_.push_back(std::move(title));
    aligns_.push_back(align);
  }
  void AddRow(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string Render() const;
  void Print(FILE* out = stdout) const { std::fputs(Render().c_str(), out); }

 private:
  std::vector<std::string> titles_;
  std::vector<Align> aligns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace karma::tools
