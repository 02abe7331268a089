// LoadYamlDocuments: one document of a YAML text, documents counted with a bound.
#include "common/yaml_load.h"

#include <yaml-cpp/eventhandler.h>

#include <sstream>

namespace longhaul {
namespace {

// Records where each document starts and ignores the rest, so counting costs no memory.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { last_start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  YAML::Mark last_start = YAML::Mark::null_mark();
};

}  // namespace

YamlDocuments LoadYamlDocuments(const std::string& text) {
  YamlDocuments docs;
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (docs.count < YamlDocuments::kMaxCounted && parser.HandleNextDocument(starts)) {
    if (++docs.count == 2) docs.second_start = starts.last_start;
  }
  if (docs.count > 0) docs.first = YAML::Load(text);
  return docs;
}

std::string TooManyDocuments(const YamlDocuments& docs) {
  return "expected one YAML document, found " + std::to_string(docs.count) +
         (docs.count >= YamlDocuments::kMaxCounted ? " or more" : "");
}

}  // namespace longhaul
