// Streaming token bytes as text: a token may end inside a UTF-8 character, so whole
// characters are released and a partial one is held back until its last byte arrives.
#pragma once
#include <string>

namespace oscar {

class Utf8Stream {
 public:
  std::string push(const std::string& bytes);
  std::string flush();  // whatever is held back, complete or not

 private:
  std::string pending_;
};

}  // namespace oscar
