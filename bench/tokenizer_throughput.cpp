// Tokenizer throughput: encodes a text (a file, or ~5 MB of mixed text built
// from English prose, C++ source and multilingual lines) and prints MB/s for
// encode and decode, tokens/s and bytes per token.
//
// usage: tokenizer_throughput MODEL.gguf [TEXT_FILE] [--threads N]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) tally::fail("cannot open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Roughly 5 MB: prose, code (with indentation and digits) and non-Latin text.
std::string mixed_text() {
  const std::string root = TALLY_SOURCE_DIR;
  std::string prose, code;
  const std::string prose_path = root + "/tests/fixtures/text/pride_and_prejudice_ch1.txt";
  if (std::filesystem::exists(prose_path)) prose = read_file(prose_path);
  for (const auto& e : std::filesystem::recursive_directory_iterator(root + "/src"))
    if (e.is_regular_file() && (e.path().extension() == ".cpp" || e.path().extension() == ".h"))
      code += read_file(e.path().string());
  const std::string multi =
      "我喜欢自然语言处理。日本語のテキストも。 안녕하세요, 세계! Ça va? Où est l'hôtel? "
      "Ελληνικά, русский язык, مرحبا بالعالم, नमस्ते दुनिया 👍🚀 👨‍👩‍👧‍👦 1234567 3.14159\n";
  std::string out;
  while (out.size() < 5'000'000) {
    out += prose;
    out += code;
    for (int i = 0; i < 40; ++i) out += multi;
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of the calling thread: steadier than wall time on a busy machine.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      std::fprintf(stderr, "usage: %s MODEL.gguf [TEXT_FILE] [--threads N]\n", argv[0]);
      return 2;
    }
    std::string text_path;
    unsigned threads = 1;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--threads" && i + 1 < argc)
        threads = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
      else
        text_path = a;
    }
    const tally::GgufFile f(argv[1]);
    auto t0 = std::chrono::steady_clock::now();
    const tally::Tokenizer tok = tally::Tokenizer::from_gguf(f);
    std::printf("load: %.1f ms (%s, pre %s, %d tokens)\n", 1e3 * seconds_since(t0),
                tok.model_name().c_str(), tok.pre_name().c_str(), tok.n_vocab());

    const std::string text = text_path.empty() ? mixed_text() : read_file(text_path);
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::printf("text: %.2f MB (%s)\n", mb, text_path.empty() ? "mixed prose/code/multilingual" : text_path.c_str());

    (void)tok.encode(text.substr(0, 100000), false, false);  // warm up caches
    t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    const std::vector<int32_t> ids = tok.encode(text, false, false);
    const double enc_cpu = thread_cpu_seconds() - c0;
    const double enc_s = seconds_since(t0);
    std::printf("encode: %.2f MB/s wall, %.2f MB/s cpu, %.0f tokens/s, %zu tokens, %.2f bytes/token\n",
                mb / enc_s, mb / enc_cpu, static_cast<double>(ids.size()) / enc_s, ids.size(),
                static_cast<double>(text.size()) / static_cast<double>(ids.size()));

    t0 = std::chrono::steady_clock::now();
    const std::string back = tok.decode(ids);
    const double dec_s = seconds_since(t0);
    std::printf("decode: %.2f MB/s (round trip %s)\n", mb / dec_s, back == text ? "exact" : "differs");

    if (threads > 1) {
      // The same text split across threads sharing one tokenizer.
      std::vector<std::thread> pool;
      std::vector<size_t> counts(threads);
      const size_t chunk = text.size() / threads;
      t0 = std::chrono::steady_clock::now();
      for (unsigned t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          counts[t] = tok.encode(std::string_view(text).substr(t * chunk, chunk), false, false).size();
        });
      for (auto& th : pool) th.join();
      std::printf("encode, %u threads: %.2f MB/s\n", threads, mb / seconds_since(t0));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
