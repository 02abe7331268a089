// A tiny sentence grammar that generates the built-in corpus (see corpus.h).
#include "model/corpus.h"

#include <cctype>
#include <vector>

#include "common/splitmix64.h"

namespace longhaul::model {
namespace {

class Rng : public SplitMix64 {
 public:
  explicit Rng(uint64_t seed) : SplitMix64(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  bool Chance(int percent) { return Below(100) < size_t(percent); }
};

const std::vector<std::string> kDeterminers = {"the", "a", "my", "our", "that", "every"};
const std::vector<std::string> kAdjectives = {"old",   "little", "happy",  "quiet", "red",
                                              "brave", "tired",  "clever", "small", "green"};
const std::vector<std::string> kNouns = {"cat",    "dog",   "bird",  "farmer", "teacher",
                                         "child",  "fox",   "horse", "sailor", "baker",
                                         "garden", "river", "house", "apple",  "letter"};
const std::vector<std::string> kNames = {"Anna", "Ben", "Clara", "David", "Emma", "Felix"};
// Verb stems; the third person singular adds "s" (or "es").
const std::vector<std::string> kVerbs = {"see",  "like", "follow", "find", "watch",
                                         "help", "call", "visit",  "draw", "carry"};
const std::vector<std::string> kPlaces = {"in the garden",  "near the river", "under the table",
                                          "at the market",  "on the hill",    "by the sea",
                                          "in the morning", "after dinner"};
const std::vector<std::string> kConnectives = {"because", "while", "and then", "but"};
const std::vector<std::string> kFacts = {"the sun is warm.",        "the sea is deep.",
                                         "snow is cold and white.", "one and one make two.",
                                         "birds can fly.",          "fish live in water."};

std::string ThirdPerson(const std::string& verb) {
  const char last = verb.back();
  if (last == 'h' || last == 's' || last == 'x') return verb + "es";
  return verb + "s";
}

std::string NounPhrase(Rng& rng) {
  if (rng.Chance(15)) return rng.Pick(kNames);
  std::string np = rng.Pick(kDeterminers);
  if (rng.Chance(50)) np += " " + rng.Pick(kAdjectives);
  return np + " " + rng.Pick(kNouns);
}

std::string Clause(Rng& rng) {
  std::string subject = NounPhrase(rng);
  std::string verb = rng.Pick(kVerbs);
  if (rng.Chance(25)) {
    subject += " and " + NounPhrase(rng);  // plural subject: bare verb
  } else {
    verb = ThirdPerson(verb);
  }
  std::string clause = subject + " " + verb + " " + NounPhrase(rng);
  if (rng.Chance(40)) clause += " " + rng.Pick(kPlaces);
  return clause;
}

std::string Sentence(Rng& rng) {
  if (rng.Chance(8)) return rng.Pick(kFacts);
  std::string s;
  if (rng.Chance(15)) s = rng.Pick(kPlaces) + ", ";
  s += Clause(rng);
  if (rng.Chance(25)) s += " " + rng.Pick(kConnectives) + " " + Clause(rng);
  return s + (rng.Chance(10) ? "!" : ".");
}

}  // namespace

std::string BuiltinCorpus(uint64_t seed, size_t bytes) {
  Rng rng(seed);
  std::string text;
  text.reserve(bytes + 256);
  int in_paragraph = 0;
  while (text.size() < bytes) {
    std::string s = Sentence(rng);
    s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
    text += s;
    if (++in_paragraph >= 4 + int(rng.Below(4))) {
      text += "\n";
      in_paragraph = 0;
    } else {
      text += " ";
    }
  }
  text.resize(bytes);
  return text;
}

}  // namespace longhaul::model
