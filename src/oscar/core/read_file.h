// A whole file read into memory, for the small text and JSON inputs (prompts, calibration
// texts, manifests); model weights are mapped instead (mapped_file.h).
#pragma once
#include <string>
#include <string_view>

namespace oscar {

// The whole file as bytes; throws oscar::Error "cannot read <what>'<path>'".
std::string read_text_file(const std::string& path, std::string_view what = "");

}  // namespace oscar
