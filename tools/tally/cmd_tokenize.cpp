// tally tokenize / detokenize: the model's tokenizer from the command line.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "encode_input.h"
#include "model_options.h"
#include "option_checks.h"
#include "output.h"
#include "core/error.h"
#include "model/hf_folder.h"
#include "io/gguf.h"
#include "io/model_locator.h"
#include "io/text_file.h"
#include "tokenizer/tokenizer.h"

namespace tally::cli {
void add_tokenize(CLI::App& app) {
  struct Opts {
    std::string model, text, file;
    bool add_special = false, parse_special = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("-m,--model", o->model, "Model whose tokenizer to use: as for run's -m (a vocab-only GGUF is enough)")->check(nonempty_path());
  cmd->add_flag("--add-special", o->add_special, "Add BOS/EOS as the model's flags say");
  cmd->add_flag("--parse-special", o->parse_special, "Turn special-token text such as <|im_start|> into its token");
  cmd->add_flag("--json", o->json, "Print {\"ids\": [...], \"pieces\": [...]}");
  auto* text = cmd->add_option("text", o->text, "Text to tokenize");
  auto* file = cmd->add_option("-f,--file", o->file, "Read the text from FILE")->check(nonempty_path());
  text->excludes(file);
  cmd->callback([o, text, file] {
    if (!*text && !*file) fail("tokenize: give a TEXT or -f FILE");
    const std::string input = *file ? read_text_file(o->file, "text file", kMaxTextBytes) : o->text;
    const auto model_file = open_model_file(model_path(o->model));
    const Tokenizer tok = Tokenizer::from_gguf(*model_file);
    const auto ids = encode_input(tok, input, o->add_special, o->parse_special, *file ? "the text file" : "the text");
    if (o->json) {
      auto pieces = nlohmann::json::array();
      for (int32_t id : ids) pieces.push_back(tok.token_text(id));
      nlohmann::json j{{"ids", ids}, {"pieces", pieces}};
      print_json(j);
    } else {
      fmt::print("{}\n", fmt::join(ids, " "));
    }
  });
}

void add_detokenize(CLI::App& app) {
  struct Opts {
    std::string model;
    std::vector<int64_t> ids;
    bool render_special = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("detokenize", "Print the text of token ids");
  cmd->add_option("-m,--model", o->model, "Model whose tokenizer to use: as for run's -m (a vocab-only GGUF is enough)")->check(nonempty_path());
  cmd->add_flag("--special", o->render_special, "Render control tokens such as <|im_end|> as text");
  cmd->add_option("ids", o->ids, "Token ids")->required()->transform(integer_in(0, INT32_MAX));
  cmd->callback([o] {
    const auto model_file = open_model_file(model_path(o->model));
    const Tokenizer tok = Tokenizer::from_gguf(*model_file);
    std::vector<int32_t> ids;
    for (int64_t id : o->ids) {
      if (id < 0 || id >= tok.n_vocab()) fail("detokenize: token id {} is outside the vocabulary [0, {})", id, tok.n_vocab());
      ids.push_back(static_cast<int32_t>(id));
    }
    fmt::print("{}\n", tok.decode(ids, o->render_special));
  });
}

}  // namespace tally::cli
