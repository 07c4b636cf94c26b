#include "oscar/core/read_file.h"

#include <fstream>
#include <sstream>

#include "oscar/core/error.h"

namespace oscar {

std::string read_text_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}'{}'", what, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace oscar
