#pragma once
// One generated sequence's step, the same wherever a token is produced (run,
// chat, --parallel, the server's scheduler): the logits of its last
// position go through the sampler (penalties, temperature, top-k/top-p/
// min-p, a seeded draw), then the stop checks, then out as an emission.
//
//   logits -> sample -> end-of-generation token?   -> finish "stop" (not emitted)
//                    -> text; a stop string in it?  -> emit the text before it, finish "stop"
//                    -> max_tokens reached?         -> emit, finish "length"
//                    -> no room to grow?            -> emit, finish "context"
//                    -> emit; the token goes back in (next())
//
// With a constraint (grammar/grammar.h), the logits are masked before the
// sampler to the tokens the grammar allows next, and the token chosen
// advances the grammar: no token it refuses is ever emitted, and an end token
// is chosen only where the grammar may end (a guess the grammar refuses is
// never kept). The masked logits are the distribution logprobs report.
//
// Text is decoded as it comes (complete UTF-8 only); the tail that could be
// the start of a stop string is held back until it cannot be, and whatever
// is held is emitted (token -1) when the sequence finishes. Without a
// tokenizer there is no text (and no stop strings).
// Invariants: a finished Generation stays finished; generated() counts the
// tokens emitted (the end-of-generation token is not one); the concatenated
// texts equal the decoded emitted tokens, cut at the first stop string.
// Not thread-safe: one Generation per sequence, stepped by one thread.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "sampler/sampler.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace tally {

struct GenerationParams {
  SamplerParams sampling;
  int64_t max_tokens = 128;               // -1: no limit
  std::vector<std::string> stop;          // stop strings (need a tokenizer); not emitted
  std::function<bool(int32_t)> is_stop;   // end-of-generation tokens (not emitted); null: none
  int top_logprobs = -1;                  // -1: no logprobs; k >= 0: the token's and the k best
  // The grammar the output must follow (compiled for this model's vocabulary); none: any text.
  std::optional<grammar::Constraint> constraint;

  void validate() const;  // throws tally::Error naming the bad field
};

// The model's vocabulary as grammars see it: each token's bytes as the
// generation decodes them (none for control and unused tokens), the logits'
// size, and the end-of-generation tokens. Built once per model (it indexes
// every token); constraints compiled against it fit that model only.
grammar::Vocabulary grammar_vocabulary(const Tokenizer& tok, int32_t n_logits);

// Failed: the step could not pick a token (the sampler refused the logits:
// not finite, or every token banned); the caller that catches that ends the
// sequence so.
enum class Finish { None, EndToken, StopString, MaxTokens, ContextFull, Cancelled, Failed };
// "stop", "length", "cancelled" as OpenAI names them (a full context is
// "length"), and "error" for Failed.
const char* finish_reason(Finish f);

// A draft's guess for one position (speculative decoding): the token, and the
// draft's distribution there (empty: a point mass on the token, as prompt
// lookup guesses).
struct Guess {
  int32_t token = -1;
  std::vector<std::pair<int32_t, float>> q;  // (id, probability), any order
};

struct Emission {
  int32_t token = -1;  // -1: held text flushed at the end, no token
  std::string text;    // may be empty (an unfinished character, a held-back stop-string prefix)
  double logprob = 0;  // with top_logprobs >= 0
  std::vector<std::pair<int32_t, double>> top;
};

class Generation {
 public:
  // tok: for text and stop strings (null: tokens only).
  Generation(const GenerationParams& p, const Tokenizer* tok);

  // One step. history: the sequence's tokens so far (prompt and generated);
  // room: positions it may still grow by. Returns the token's emission
  // (nothing when it finished on an end token or was already at its limit).
  // Once finished(), tail() has the held text.
  std::optional<Emission> step(std::span<const float> logits, std::span<const int32_t> history, int64_t room);
  // The same for a position a draft guessed: the token chosen is distributed
  // exactly as step()'s would be (greedy: the same token), by the standard
  // rule: the guess x is kept with probability min(1, p(x) / q(x)), else a
  // token is drawn from max(0, p - q), normalized. took_guess() says which.
  std::optional<Emission> step(std::span<const float> logits, std::span<const int32_t> history, int64_t room,
                               const Guess& guess);
  bool took_guess() const { return took_guess_; }
  // The token to append to the sequence, once step() emitted one and did not finish.
  int32_t next() const { return next_; }
  bool finished() const { return finish_ != Finish::None; }
  Finish finish() const { return finish_; }
  // Ends it for a reason of the caller's (cancelled, the pool cannot grow it).
  void end(Finish why);
  // Once finished: the text held back (a possible stop string's start, an
  // unfinished character), as an emission without a token; then nothing.
  std::optional<Emission> tail();
  int64_t generated() const { return generated_; }
  const GenerationParams& params() const { return p_; }

 private:
  // The checks before a token is chosen, and the grammar's mask applied to
  // `logits`; false when the generation ends here (length, or a grammar with
  // nothing left to allow).
  bool begin_step(std::span<const float>& logits);
  std::optional<Emission> finish_step(Emission e, std::span<const float> logits, int64_t room);
  // The logits the sampler sees: masked by the grammar, if there is one.
  std::span<const float> constrained(std::span<const float> logits);
  int32_t choose(std::span<const Sampler::Candidate> dist, const Guess& guess);

  GenerationParams p_;
  Sampler sampler_;
  bool took_guess_ = false;
  std::vector<Sampler::Candidate> residual_;
  std::optional<StreamDecoder> decoder_;
  std::string held_;
  int64_t generated_ = 0;
  int32_t next_ = -1;
  Finish finish_ = Finish::None;
  std::vector<double> lp_;
  std::optional<grammar::State> grammar_;
  std::vector<float> masked_;
};

}  // namespace tally
