// The generator of tokenizer sample text (see sample_text.h).
#include "data/sample_text.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/splitmix64.h"

namespace longhaul::data {
namespace {

class Rng : public SplitMix64 {
 public:
  explicit Rng(uint64_t seed) : SplitMix64(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
  bool Chance(int per_mille) { return Below(1000) < size_t(per_mille); }
  // Skewed towards the front of the list (a rough Zipf law): common words come first.
  template <typename T>
  const T& Zipf(const std::vector<T>& v) {
    const size_t a = Below(v.size()), b = Below(v.size());
    return v[Chance(700) ? std::min(a, b) : a];
  }
};

const std::vector<std::string> kFunctionWords = {
    "the",   "of",   "and",   "to",   "a",    "in",    "that",  "is",    "was",   "he",
    "for",   "it",   "with",  "as",   "his",  "on",    "be",    "at",    "by",    "I",
    "this",  "had",  "not",   "are",  "but",  "from",  "or",    "have",  "an",    "they",
    "which", "one",  "you",   "were", "her",  "all",   "she",   "there", "would", "their",
    "we",    "him",  "been",  "has",  "when", "who",   "will",  "more",  "no",    "if",
    "out",   "so",   "said",  "what", "up",   "its",   "about", "into",  "than",  "them",
    "can",   "only", "other", "new",  "some", "could", "time",  "these", "two",   "may",
    "then",  "do",   "first", "any",  "my",   "now",   "such",  "like",  "our",   "over"};

const std::vector<std::string> kContentWords = {"people",
                                                "year",
                                                "way",
                                                "day",
                                                "man",
                                                "thing",
                                                "woman",
                                                "life",
                                                "child",
                                                "world",
                                                "school",
                                                "state",
                                                "family",
                                                "student",
                                                "group",
                                                "country",
                                                "problem",
                                                "hand",
                                                "part",
                                                "place",
                                                "case",
                                                "week",
                                                "company",
                                                "system",
                                                "program",
                                                "question",
                                                "work",
                                                "government",
                                                "number",
                                                "night",
                                                "point",
                                                "home",
                                                "water",
                                                "room",
                                                "mother",
                                                "area",
                                                "money",
                                                "story",
                                                "fact",
                                                "month",
                                                "lot",
                                                "right",
                                                "study",
                                                "book",
                                                "eye",
                                                "job",
                                                "word",
                                                "business",
                                                "issue",
                                                "side",
                                                "kind",
                                                "head",
                                                "house",
                                                "service",
                                                "friend",
                                                "father",
                                                "power",
                                                "hour",
                                                "game",
                                                "line",
                                                "end",
                                                "member",
                                                "law",
                                                "car",
                                                "city",
                                                "community",
                                                "name",
                                                "president",
                                                "team",
                                                "minute",
                                                "idea",
                                                "kid",
                                                "body",
                                                "information",
                                                "back",
                                                "parent",
                                                "face",
                                                "others",
                                                "level",
                                                "office",
                                                "door",
                                                "health",
                                                "person",
                                                "art",
                                                "war",
                                                "history",
                                                "party",
                                                "result",
                                                "change",
                                                "morning",
                                                "reason",
                                                "research",
                                                "girl",
                                                "guy",
                                                "moment",
                                                "air",
                                                "teacher",
                                                "force",
                                                "education",
                                                "foot",
                                                "boy",
                                                "age",
                                                "policy",
                                                "everything",
                                                "process",
                                                "music",
                                                "market",
                                                "sense",
                                                "nation",
                                                "plan",
                                                "college",
                                                "interest",
                                                "death",
                                                "experience",
                                                "effect",
                                                "use",
                                                "class",
                                                "control",
                                                "care",
                                                "field",
                                                "development",
                                                "role",
                                                "effort",
                                                "rate",
                                                "heart",
                                                "drug",
                                                "show",
                                                "leader",
                                                "light",
                                                "voice",
                                                "wife",
                                                "police",
                                                "mind",
                                                "price",
                                                "report",
                                                "decision",
                                                "son",
                                                "view",
                                                "relationship",
                                                "town",
                                                "road",
                                                "arm",
                                                "difference",
                                                "value",
                                                "building",
                                                "action",
                                                "model",
                                                "season",
                                                "society",
                                                "tax",
                                                "director",
                                                "position",
                                                "player",
                                                "record",
                                                "paper",
                                                "space",
                                                "ground",
                                                "form",
                                                "event",
                                                "official",
                                                "matter",
                                                "center",
                                                "couple",
                                                "site",
                                                "project",
                                                "activity",
                                                "star",
                                                "table",
                                                "need",
                                                "court",
                                                "American",
                                                "oil",
                                                "situation",
                                                "cost",
                                                "industry",
                                                "figure",
                                                "street",
                                                "image",
                                                "phone",
                                                "data",
                                                "picture",
                                                "practice",
                                                "piece",
                                                "land",
                                                "product",
                                                "doctor",
                                                "wall",
                                                "patient",
                                                "worker",
                                                "news",
                                                "test",
                                                "movie",
                                                "north",
                                                "love",
                                                "support",
                                                "technology",
                                                "step",
                                                "baby",
                                                "computer",
                                                "type",
                                                "attention",
                                                "film",
                                                "tree",
                                                "source",
                                                "organization",
                                                "hair",
                                                "window",
                                                "evidence",
                                                "population",
                                                "site",
                                                "extraordinarily",
                                                "counterintuitive",
                                                "photosynthesis",
                                                "infrastructure",
                                                "telecommunications",
                                                "misunderstanding",
                                                "bureaucratic",
                                                "archaeological",
                                                "thermodynamics",
                                                "parliamentarian",
                                                "incomprehensibility",
                                                "electroencephalogram"};

const std::vector<std::string> kVerbs = {
    "see",        "make",   "take",    "find",     "give",    "tell",  "work",   "call",
    "try",        "ask",    "need",    "feel",     "become",  "leave", "put",    "mean",
    "keep",       "let",    "begin",   "seem",     "help",    "talk",  "turn",   "start",
    "show",       "hear",   "play",    "run",      "move",    "like",  "live",   "believe",
    "hold",       "bring",  "happen",  "write",    "provide", "sit",   "stand",  "lose",
    "pay",        "meet",   "include", "continue", "set",     "learn", "change", "lead",
    "understand", "watch",  "follow",  "stop",     "create",  "speak", "read",   "allow",
    "add",        "spend",  "grow",    "open",     "walk",    "win",   "offer",  "remember",
    "consider",   "appear", "buy",     "wait",     "serve",   "die",   "send",   "expect",
    "build",      "stay",   "fall",    "cut",      "reach",   "kill",  "remain", "suggest"};

const std::vector<std::string> kAdjectives = {
    "good",   "new",      "first",         "last",     "long",    "great",     "little",
    "own",    "other",    "old",           "right",    "big",     "high",      "different",
    "small",  "large",    "next",          "early",    "young",   "important", "few",
    "public", "bad",      "same",          "able",     "late",    "hard",      "major",
    "better", "economic", "strong",        "possible", "whole",   "free",      "military",
    "true",   "federal",  "international", "full",     "special", "easy",      "clear",
    "recent", "certain",  "personal",      "open",     "red",     "difficult", "available",
    "likely", "short",    "single",        "medical",  "current", "wrong",     "private",
    "past",   "foreign",  "fine",          "common",   "poor",    "natural",   "significant",
    "quiet",  "unusual",  "peculiar",      "luminous", "sturdy",  "anxious",   "meticulous"};

const std::vector<std::string> kNames = {
    "Anna",         "Ben",     "Clara",   "David",      "Emma",   "Felix",    "Grace",
    "Henry",        "Isabel",  "James",   "Karim",      "Lucia",  "Mohammed", "Nadia",
    "Oliver",       "Priya",   "Quentin", "Rosa",       "Stefan", "Tomoko",   "Ulrich",
    "Valentina",    "Wei",     "Xavier",  "Yusuf",      "Zoe",    "O'Brien",  "McAllister",
    "van der Berg", "Smith",   "Johnson", "Washington", "London", "Paris",    "Berlin",
    "Tokyo",        "Nairobi", "Toronto", "Sydney"};

const std::vector<std::string> kContractions = {
    "don't",   "can't", "won't",   "it's",        "I'm",      "you're", "we've",  "they'll",
    "he'd",    "she's", "isn't",   "wasn't",      "couldn't", "I've",   "we'd",   "that's",
    "there's", "let's", "DON'T",   "CAN'T",       "IT'S",     "I'LL",   "YOU'RE", "WE'VE",
    "ain't",   "y'all", "o'clock", "rock'n'roll", "'tis",     "'em",    "ma'am",  "shouldn't've"};

const std::vector<std::string> kConnectives = {
    "because", "while", "although", "and then", "but",   "so that",     "unless",
    "whereas", "since", "after",    "before",   "until", "even though", "as soon as"};

const std::vector<std::string> kPunctuationEnd = {".", ".",   ".",  ".", "!",
                                                  "?", "...", "?!", ";", ":"};

const std::vector<std::string> kSyllables = {
    "ka", "lo", "mi",  "ne",  "ru",  "ta",  "shi", "pra", "ven", "dor", "qua", "zel", "thro",
    "ix", "um", "bel", "gra", "fen", "cor", "sti", "pel", "wyn", "ost", "ark", "ium", "eth"};

std::string Capitalize(std::string word) {
  if (!word.empty()) word[0] = char(std::toupper(static_cast<unsigned char>(word[0])));
  return word;
}

std::string Upper(std::string word) {
  for (char& c : word) c = char(std::toupper(static_cast<unsigned char>(c)));
  return word;
}

std::string PseudoWord(Rng& rng) {
  std::string w;
  const size_t n = 2 + rng.Below(4);
  for (size_t i = 0; i < n; ++i) w += rng.Pick(kSyllables);
  return w;
}

std::string Number(Rng& rng) {
  switch (rng.Below(12)) {
    case 0:
      return absl::StrCat(1800 + rng.Below(230));  // a year
    case 1:
      return absl::StrFormat("%d.%02d", rng.Below(1000), rng.Below(100));
    case 2:
      return absl::StrFormat("$%d.%02d", rng.Below(10000), rng.Below(100));
    case 3:
      return absl::StrCat(rng.Below(101), "%");
    case 4:
      return absl::StrFormat("%d,%03d,%03d", 1 + rng.Below(999), rng.Below(1000), rng.Below(1000));
    case 5:
      return absl::StrFormat("%02d:%02d", rng.Below(24), rng.Below(60));
    case 6:
      return absl::StrFormat("%04d-%02d-%02d", 1990 + rng.Below(40), 1 + rng.Below(12),
                             1 + rng.Below(28));
    case 7:
      return absl::StrFormat("+1 (%03d) %03d-%04d", rng.Below(1000), rng.Below(1000),
                             rng.Below(10000));
    case 8:
      return absl::StrCat(rng.Next());  // a long digit run
    case 9:
      return absl::StrFormat("%dth", 4 + rng.Below(16));
    case 10:
      return absl::StrFormat("0x%08x", uint32_t(rng.Next()));
    default:
      return absl::StrCat(rng.Below(100));
  }
}

std::string Noun(Rng& rng) {
  if (rng.Chance(40)) return PseudoWord(rng);
  return rng.Zipf(kContentWords);
}

std::string NounPhrase(Rng& rng) {
  if (rng.Chance(120)) return rng.Pick(kNames);
  if (rng.Chance(40)) return absl::StrCat(rng.Pick(kNames), "'s ", Noun(rng));
  std::string np = rng.Chance(500) ? "the" : rng.Zipf(kFunctionWords);
  if (rng.Chance(400)) absl::StrAppend(&np, " ", rng.Zipf(kAdjectives));
  if (rng.Chance(30)) absl::StrAppend(&np, " ", rng.Zipf(kAdjectives), "-looking");
  absl::StrAppend(&np, " ", Noun(rng));
  if (rng.Chance(60)) absl::StrAppend(&np, rng.Chance(500) ? "'s" : "s'");
  if (rng.Chance(80)) absl::StrAppend(&np, " of ", Number(rng), " ", Noun(rng), "s");
  return np;
}

std::string Clause(Rng& rng) {
  std::string c = NounPhrase(rng);
  if (rng.Chance(150)) {
    absl::StrAppend(&c, " ", rng.Pick(kContractions));
  } else if (rng.Chance(100)) {
    absl::StrAppend(&c, " will");
  }
  absl::StrAppend(&c, " ", rng.Zipf(kVerbs), rng.Chance(300) ? "s" : "");
  absl::StrAppend(&c, " ", NounPhrase(rng));
  if (rng.Chance(150)) absl::StrAppend(&c, " (", NounPhrase(rng), ")");
  if (rng.Chance(100)) absl::StrAppend(&c, ", ", rng.Pick(kNames), ",");
  if (rng.Chance(80)) absl::StrAppend(&c, " \xE2\x80\x94 ", NounPhrase(rng), " \xE2\x80\x94");
  return c;
}

std::string Sentence(Rng& rng) {
  std::string s = Clause(rng);
  while (rng.Chance(350)) absl::StrAppend(&s, " ", rng.Pick(kConnectives), " ", Clause(rng));
  s = Capitalize(s);
  if (rng.Chance(30)) s = Upper(s);
  absl::StrAppend(&s, rng.Pick(kPunctuationEnd));
  if (rng.Chance(60)) s = absl::StrCat("\"", s, "\" said ", rng.Pick(kNames), ".");
  if (rng.Chance(30)) s = absl::StrCat("\xE2\x80\x9C", s, "\xE2\x80\x9D");
  if (rng.Chance(15)) s = absl::StrCat("'", s, "'");
  return s;
}

// A line that is not prose: code, a URL, a list item, a table row, odd whitespace.
std::string OddLine(Rng& rng) {
  switch (rng.Below(9)) {
    case 0:
      return absl::StrFormat("    for (int i = 0; i < %d; ++i) { sum += x[i] * %s; }",
                             rng.Below(1000), PseudoWord(rng));
    case 1:
      return absl::StrCat("See https://www.", PseudoWord(rng), ".org/wiki/",
                          Capitalize(PseudoWord(rng)), "_(", Noun(rng), ")?id=", rng.Below(99999),
                          "&lang=en or mail ", rng.Pick(kNames), "@example.com.");
    case 2:
      return absl::StrCat("  - ", Capitalize(NounPhrase(rng)), ": ", Number(rng));
    case 3:
      return absl::StrCat("| ", Noun(rng), " | ", Number(rng), " | ", Number(rng), " |");
    case 4:
      return absl::StrCat("\t\t", Capitalize(Clause(rng)), ".   ");  // tabs, trailing spaces
    case 5:
      return absl::StrCat(Capitalize(Clause(rng)), ".\r");  // a CRLF line
    case 6:
      return absl::StrCat("def ", PseudoWord(rng), "(self, n=", rng.Below(10),
                          "):  # returns 'n' items");
    case 7:
      return std::string(1 + rng.Below(12), ' ') + Capitalize(Clause(rng)) + "." +
             std::string(rng.Below(5), ' ');
    default:
      return absl::StrCat("## ", Capitalize(NounPhrase(rng)), " (", Number(rng), ")");
  }
}

}  // namespace

std::string EnglishSampleText(uint64_t seed, size_t bytes) {
  Rng rng(seed);
  std::string text;
  text.reserve(bytes + 4096);
  while (text.size() < bytes) {
    if (rng.Chance(120)) {
      absl::StrAppend(&text, OddLine(rng), "\n");
      continue;
    }
    const size_t sentences = 1 + rng.Below(6);
    for (size_t i = 0; i < sentences; ++i) {
      if (i > 0) text += rng.Chance(100) ? "  " : " ";
      text += Sentence(rng);
    }
    text += rng.Chance(300) ? "\n\n" : "\n";
  }
  return text;
}

const std::vector<std::string>& MultilingualSampleLines() {
  static const std::vector<std::string> lines = {
      // Chinese, Japanese, Korean
      "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。我们在三个数据中心训练模型。",
      "東京は日本の首都です。ひらがな、カタカナ、漢字を混ぜて書きます。ﾊﾝｶｸｶﾀｶﾅもあります。",
      "대규모 언어 모델은 여러 데이터 센터에서 학습됩니다. 한국어 문장입니다!",
      // Arabic (with Arabic-Indic digits), Hebrew, Persian
      "تعلم الآلة هو فرع من الذكاء الاصطناعي، وفي عام ٢٠٢٤ تم تدريب ١٠٠ نموذج.",
      "שלום עולם! זוהי שורה בעברית עם מספרים 123 ופיסוק.",
      "این یک جملهٔ فارسی است با نیم‌فاصله و اعداد ۱۲۳۴.",
      // Hindi (Devanagari combining marks and digits), Bengali, Tamil, Thai
      "मशीन लर्निंग कृत्रिम बुद्धिमत्ता की एक शाखा है। संख्या १२३४ है।",
      "আমি বাংলায় গান গাই। তামিল: வணக்கம் உலகம்.",
      "ภาษาไทยไม่มีช่องว่างระหว่างคำ แต่มีระหว่างประโยค",
      // Cyrillic, Greek
      "Съешь же ещё этих мягких французских булок, да выпей чаю. Ґанок і їжак — українською.",
      "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Η γλώσσα μου έδωσαν ελληνική.",
      // Accented Latin, precomposed and decomposed (NFD: e + U+0301), ligatures
      "Crème brûlée, naïve café, façade, Ærøskøbing, Straße, Łódź, Việt Nam, Ñandú, œuvre.",
      "Decomposed: Cafe\xCC\x81, re\xCC\x81sume\xCC\x81, n\xCC\x83, A\xCC\x8A; ligatures: "
      "\xEF\xAC\x81nance \xEF\xAC\x82ow.",
      "ĀĂĄĆĈĊČĎĐĒĔĖĘĚĜĞĠĢĤĦĨĪĬĮİĲĴĶĹĻĽĿŁŃŅŇŊŌŎŐŒŔŖŘŚŜŞŠŢŤŦŨŪŬŮŰŲŴŶŸŹŻŽ",
      // Emoji: plain, skin tones, ZWJ families and professions, flags, keycaps, variation
      "Emoji: 😀😃😄 👍🏽👍🏿 "
      "👨‍👩‍👧‍👦 👩🏾‍💻 🧑‍🚀 "
      "🏳️‍🌈 🏴‍☠️ 🇯🇵🇺🇸🇪🇺 "
      "1️⃣#️⃣ ❤️‍🔥 ☺︎ ☺️",
      "Mixed: hello🌍world, dataset📊v2, "
      "🤖🤖🤖 robots, ✅ done; ❌ failed; ⚠️ warn",
      // Unicode spaces (NBSP, en, em, thin, ideographic, line separator), ZWJ/ZWNJ, zero width
      "a\xC2\xA0"
      "b\xE2\x80\x82"
      "c\xE2\x80\x83"
      "d\xE2\x80\x89"
      "e\xE3\x80\x80"
      "f\xE2\x80\xA8"
      "g\xE2\x80\x8B"
      "h\xE2\x80\x8C"
      "i\xE2\x80\x8D"
      "j \xC2\xA0 k\xE2\x80\xAF"
      "l\xE2\x81\x9F"
      "m",
      // Digits in other scripts, fractions, superscripts, Roman numerals, fullwidth
      "Digits: ١٢٣ ۴۵۶ १२३ ১২৩ ๑๒๓ １２３ ½ ¾ ² ³ Ⅻ ⅻ 12345678901234567890 3.14159e-10",
      "Fullwidth: Ｈｅｌｌｏ，ｗｏｒｌｄ！ＡＢＣ１２３",
      // Math and symbols, box drawing, currency
      "∀x∈ℝ: x²≥0 ⇒ √(x²)=|x|; "
      "∑ᵢ aᵢ ≤ ∞; α+β=γ; ≠ ≈ ≡ "
      "€ £ ¥ ₹ ₿ ©®™ ─│┌┐└┘",
      // Contractions in every case, the kind both patterns special-case
      "don't DON'T Don'T 'S 'S's JOHN'S john's we'll WE'LL We'Ll I'd I'D they've THEY'VE "
      "you're YOU'RE 'm 'M 'll 'LL 't 'T 're 'RE 've 'VE 'd 'D",
      "''s '''t ' s 's's''s 'x 'll'll 're're \"'s\" ('t) [‘s] ’s ʼs",
      // Whitespace runs: many spaces, tabs, mixed, spaces before newline-free text
      "spaces:          ten before, tabs:\t\t\tthree, mixed: \t \t \t end",
      std::string(200, ' ') + "two hundred spaces before this",
      "trailing spaces after this" + std::string(33, ' '),
      "\t \t" + std::string(50, '\t') + "x" + std::string(7, ' ') + "\t",
      // Special token strings as ordinary text, and almost-special strings
      "Document one.<|endoftext|>Document two. <|endoftext|> <|fim_prefix|>a<|fim_middle|>b"
      "<|fim_suffix|>c<|endofprompt|>",
      "Not special: <|endoftext| <endoftext|> <|endoftext|><|endoftext|> < |endoftext| > <||>",
      // Long single pieces: letters, digits, punctuation, one repeated letter
      std::string(300, 'a') + " " + std::string(150, 'z') + "y" + std::string(150, 'z'),
      std::string(120, '7') + " " + std::string(90, '-') + " " + std::string(60, '=') + "!!!",
      "Pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious "
      "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch",
      // Control characters and rarely seen ASCII
      std::string("ctrl:\0\x01\x02\x03\x07\x1b[0m\x7f end\x0b\x0c vt ff", 27),
      "~!@#$%^&*()_+`-={}|[]\\:\";'<>?,./ ...---... ;;;; :::: ''''",
  };
  return lines;
}

std::string MixedSampleText(uint64_t seed, size_t bytes, size_t every) {
  const std::string english = EnglishSampleText(seed, bytes);
  const std::vector<std::string>& extra = MultilingualSampleLines();
  std::string text;
  text.reserve(english.size() + bytes / 8);
  size_t line = 0, next_extra = 0, pos = 0;
  while (pos < english.size() || next_extra < extra.size()) {
    if (pos < english.size()) {
      size_t end = english.find('\n', pos);
      end = end == std::string::npos ? english.size() : end + 1;
      text.append(english, pos, end - pos);
      pos = end;
    }
    if (++line % every == 0 || pos >= english.size()) {
      text += extra[next_extra % extra.size()];
      text += '\n';
      ++next_extra;
    }
  }
  return text;
}

}  // namespace longhaul::data
