#pragma once
// Where tally keeps its files: $TALLY_HOME (default ~/.cache/tally), with the
// default model at $TALLY_HOME/models/<kDefaultModelFile>.
#include <string>

namespace tally {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string tally_home();
// Where the default model is installed: $TALLY_HOME/models/<kDefaultModelFile>.
std::string default_model_path();
// The path given with -m, or the installed default model; throws tally::Error
// explaining how to install the default model when neither exists.
std::string resolve_model_path(const std::string& given);

}  // namespace tally
