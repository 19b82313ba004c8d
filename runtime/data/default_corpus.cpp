// The default corpus: English-like text generated from templates by a fixed-seed program, so the
// repository ships no third-party text and needs no download. It is made to be learnable by a tiny
// model within a few hundred CPU steps: a small vocabulary of words and names, recurring sentence
// frames, facts that are always stated the same way (a cow always says moo, Tuesday always follows
// Monday) and correct arithmetic, so there is structure beyond letter frequencies at every range
// from bigrams to whole sentences.
#include "data/data.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <vector>

#include "data/rng.h"

namespace linac::data {
namespace {

using detail::Rng;

struct Person {
  std::string_view name, subject, object, possessive;
};
constexpr std::array<Person, 32> kPeople{{
    {"Anna", "she", "her", "her"},  {"Ben", "he", "him", "his"},    {"Clara", "she", "her", "her"},
    {"David", "he", "him", "his"},  {"Elena", "she", "her", "her"}, {"Felix", "he", "him", "his"},
    {"Grace", "she", "her", "her"}, {"Hugo", "he", "him", "his"},   {"Iris", "she", "her", "her"},
    {"Jack", "he", "him", "his"},   {"Kira", "she", "her", "her"},  {"Leo", "he", "him", "his"},
    {"Maya", "she", "her", "her"},  {"Nico", "he", "him", "his"},   {"Olga", "she", "her", "her"},
    {"Paul", "he", "him", "his"},   {"Rosa", "she", "her", "her"},  {"Sam", "he", "him", "his"},
    {"Tara", "she", "her", "her"},  {"Omar", "he", "him", "his"},   {"Vera", "she", "her", "her"},
    {"Will", "he", "him", "his"},   {"Zoe", "she", "her", "her"},   {"Yuri", "he", "him", "his"},
    {"Lena", "she", "her", "her"},  {"Marco", "he", "him", "his"},  {"Nina", "she", "her", "her"},
    {"Oscar", "he", "him", "his"},  {"Sofia", "she", "her", "her"}, {"Theo", "he", "him", "his"},
    {"Hana", "she", "her", "her"},  {"Ivan", "he", "him", "his"},
}};

// Fixed facts: the same animal always has the same home, food, sound and legs.
struct Animal {
  std::string_view name, plural, home, food, sound;
  int legs;
};
constexpr std::array<Animal, 14> kAnimals{{
    {"cat", "cats", "house", "fish", "meow", 4},
    {"dog", "dogs", "yard", "meat", "woof", 4},
    {"cow", "cows", "field", "grass", "moo", 4},
    {"duck", "ducks", "pond", "seeds", "quack", 2},
    {"owl", "owls", "forest", "mice", "hoot", 2},
    {"horse", "horses", "stable", "hay", "neigh", 4},
    {"sheep", "sheep", "meadow", "grass", "baa", 4},
    {"frog", "frogs", "pond", "flies", "croak", 4},
    {"hen", "hens", "farm", "corn", "cluck", 2},
    {"bee", "bees", "hive", "nectar", "buzz", 6},
    {"pig", "pigs", "farm", "apples", "oink", 4},
    {"goat", "goats", "hill", "leaves", "bleat", 4},
    {"mouse", "mice", "barn", "cheese", "squeak", 4},
    {"spider", "spiders", "garden", "flies", "nothing", 8},
}};

struct Thing {
  std::string_view name, color;
};
constexpr std::array<Thing, 12> kThings{{
    {"sky", "blue"},
    {"grass", "green"},
    {"snow", "white"},
    {"night", "black"},
    {"sun", "yellow"},
    {"sea", "blue"},
    {"coal", "black"},
    {"milk", "white"},
    {"leaf", "green"},
    {"cherry", "red"},
    {"orange", "orange"},
    {"plum", "purple"},
}};

constexpr std::array<std::string_view, 7> kDays{"Monday", "Tuesday",  "Wednesday", "Thursday",
                                                "Friday", "Saturday", "Sunday"};
constexpr std::array<std::string_view, 12> kMonths{"January",   "February", "March",    "April",
                                                   "May",       "June",     "July",     "August",
                                                   "September", "October",  "November", "December"};
constexpr std::array<std::string_view, 21> kNumberWords{
    "zero",     "one",     "two",     "three",     "four",     "five",     "six",
    "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",   "thirteen",
    "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};

constexpr auto kAdjectives =
    std::to_array<std::string_view>({"little", "brave", "curious", "sleepy", "clever", "shy", "happy", "old",
                                     "young", "quiet", "kind", "funny"});
constexpr auto kPlaces = std::to_array<std::string_view>(
    {"village", "small town", "forest", "farm", "big city", "valley", "harbor", "island"});
constexpr auto kLandmarks = std::to_array<std::string_view>(
    {"river", "hill", "old bridge", "lake", "mountain", "market", "school", "library"});
constexpr auto kActivities = std::to_array<std::string_view>(
    {"read books", "paint pictures", "go for long walks", "sing songs", "plant flowers", "bake bread",
     "fly kites", "play chess", "swim in the lake", "watch the stars"});
constexpr auto kObjects = std::to_array<std::string_view>({"red ball", "small key", "old map", "blue box",
                                                           "shiny stone", "wooden boat", "golden feather",
                                                           "lost letter", "green hat", "silver coin"});
constexpr auto kFeelings =
    std::to_array<std::string_view>({"happy", "surprised", "proud", "glad", "excited", "calm"});
constexpr auto kWeather =
    std::to_array<std::string_view>({"sunny", "rainy", "windy", "cloudy", "cold", "warm", "foggy"});
constexpr auto kGoods = std::to_array<std::string_view>(
    {"apples", "eggs", "carrots", "potatoes", "oranges", "pears", "onions", "lemons", "cakes", "candles"});

template <typename T, size_t N>
const T& pick(Rng& rng, const std::array<T, N>& list) {
  return list[rng.below(N)];
}
int64_t between(Rng& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng.below(hi - lo + 1));
}

std::string capital(std::string_view s) {
  std::string out(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}
std::string num(int64_t n) { return std::to_string(n); }
std::string article(std::string_view noun) {
  std::string out = std::string_view("aeiou").find(noun[0]) != std::string_view::npos ? "an " : "a ";
  out += noun;
  return out;
}

std::string story(Rng& rng) {
  const Person& p = pick(rng, kPeople);
  Person q = pick(rng, kPeople);
  while (q.name == p.name) q = pick(rng, kPeople);
  const Animal& a = pick(rng, kAnimals);
  const std::string_view place = pick(rng, kPlaces), landmark = pick(rng, kLandmarks),
                         object = pick(rng, kObjects);
  std::string s = "Once upon a time, there was " + article(pick(rng, kAdjectives)) + " " +
                  std::string(a.name) + " named " + std::string(p.name) + ". " + std::string(p.name) +
                  " lived in " + article(place) + " near the " + std::string(landmark) + ". Every morning, " +
                  std::string(p.subject) + " liked to " + std::string(pick(rng, kActivities)) + ". ";
  s += "One " + std::string(pick(rng, kDays)) + ", " + std::string(p.name) + " found " + article(object) +
       " by the " + std::string(pick(rng, kLandmarks)) + ". ";
  switch (rng.below(3)) {
    case 0:
      s += capital(p.subject) + " showed the " + std::string(object) + " to " + std::string(q.name) +
           ". \"Where did you find it?\" asked " + std::string(q.name) + ". \"By the " +
           std::string(landmark) + ",\" said " + std::string(p.name) + ". ";
      break;
    case 1:
      s += capital(p.subject) + " carried it home and put it on " + std::string(p.possessive) + " table. ";
      break;
    default:
      s += capital(p.subject) + " did not know who it belonged to, so " + std::string(p.subject) + " asked " +
           std::string(q.name) + " for help. ";
  }
  const int64_t friends = between(rng, 2, 6);
  s += "Later, " + std::string(kNumberWords[friends]) +
       " friends came to visit, and they played until the sun went down. ";
  s += std::string(p.name) + " felt very " + std::string(pick(rng, kFeelings)) + ". The end.";
  return s;
}

std::string arithmetic(Rng& rng) {
  std::string s;
  const int64_t count = between(rng, 5, 10);
  for (int64_t i = 0; i < count; ++i) {
    switch (rng.below(4)) {
      case 0: {
        const int64_t x = between(rng, 0, 50), y = between(rng, 0, 50);
        s += num(x) + " plus " + num(y) + " is " + num(x + y) + ". ";
        break;
      }
      case 1: {
        const int64_t x = between(rng, 0, 60), y = between(rng, 0, x);
        s += num(x) + " minus " + num(y) + " is " + num(x - y) + ". ";
        break;
      }
      case 2: {
        const int64_t x = between(rng, 0, 12), y = between(rng, 0, 12);
        s += num(x) + " times " + num(y) + " is " + num(x * y) + ". ";
        break;
      }
      default: {
        const int64_t x = between(rng, 1, 10), y = between(rng, 1, 10);
        s += num(x * y) + " divided by " + num(x) + " is " + num(y) + ". ";
      }
    }
  }
  s.pop_back();
  return s;
}

std::string counting(Rng& rng) {
  const int64_t step = between(rng, 1, 10), start = step * between(rng, 0, 10), n = between(rng, 6, 12);
  std::string s = "Counting by " + num(step) + " from " + num(start) + ": ";
  for (int64_t i = 0; i < n; ++i) s += num(start + i * step) + (i + 1 < n ? ", " : ".");
  if (rng.below(2)) {
    const int64_t k = between(rng, 1, 20);
    s += " Counting down from " + std::string(kNumberWords[k]) + ":";
    for (int64_t i = k; i >= 0 && i > k - 6; --i) {
      s += ' ';
      s += kNumberWords[i];
      s += i > 0 && i > k - 5 ? ',' : '.';
    }
  }
  return s;
}

std::string animalFacts(Rng& rng) {
  const Animal& a = pick(rng, kAnimals);
  std::string s = "The " + std::string(a.name) + " lives in the " + std::string(a.home) + ". ";
  s += capital(a.plural) + " eat " + std::string(a.food) + ". ";
  s += "A " + std::string(a.name) + " has " + std::string(kNumberWords[a.legs]) + " legs. ";
  s += a.sound == "nothing" ? "A " + std::string(a.name) + " makes no sound."
                            : "A " + std::string(a.name) + " says " + std::string(a.sound) + ".";
  const int64_t n = between(rng, 2, 9);
  s += " If there are " + num(n) + " " + std::string(n == 1 ? a.name : a.plural) + ", they have " +
       num(n * a.legs) + " legs in all.";
  return s;
}

std::string shopping(Rng& rng) {
  const Person& p = pick(rng, kPeople);
  const int64_t items = between(rng, 2, 4);
  std::string s =
      std::string(p.name) + " went to the market on " + std::string(pick(rng, kDays)) + " and bought ";
  int64_t total = 0;
  std::vector<std::string_view> bought;
  for (int64_t i = 0; i < items; ++i) {
    std::string_view good = pick(rng, kGoods);
    while (std::find(bought.begin(), bought.end(), good) != bought.end()) good = pick(rng, kGoods);
    bought.push_back(good);
    const int64_t n = between(rng, 2, 9);
    total += n;
    s += num(n) + " " + std::string(good) + (i + 2 < items ? ", " : i + 1 < items ? " and " : ". ");
  }
  s += capital(p.subject) + " bought " + num(total) + " things in all.";
  if (rng.below(2)) {
    const int64_t price = between(rng, 2, 5);
    s += " Each one cost " + num(price) + " coins, so " + std::string(p.subject) + " paid " +
         num(price * total) + " coins.";
  }
  return s;
}

std::string calendar(Rng& rng) {
  std::string s;
  const int64_t count = between(rng, 3, 6);
  for (int64_t i = 0; i < count; ++i) {
    switch (rng.below(4)) {
      case 0: {
        const size_t d = rng.below(7);
        s += "The day after " + std::string(kDays[d]) + " is " + std::string(kDays[(d + 1) % 7]) + ". ";
        break;
      }
      case 1: {
        const size_t d = rng.below(7);
        s += "The day before " + std::string(kDays[d]) + " is " + std::string(kDays[(d + 6) % 7]) + ". ";
        break;
      }
      case 2: {
        const size_t m = rng.below(12);
        s +=
            "The month after " + std::string(kMonths[m]) + " is " + std::string(kMonths[(m + 1) % 12]) + ". ";
        break;
      }
      default:
        s += rng.below(2) ? "There are seven days in a week. " : "There are twelve months in a year. ";
    }
  }
  s.pop_back();
  return s;
}

std::string ages(Rng& rng) {
  const Person& p = pick(rng, kPeople);
  Person q = pick(rng, kPeople);
  while (q.name == p.name) q = pick(rng, kPeople);
  const int64_t x = between(rng, 3, 40), y = between(rng, 3, 40);
  std::string s = std::string(p.name) + " is " + num(x) + " years old. " + std::string(q.name) + " is " +
                  num(y) + " years old. ";
  if (x == y)
    s += "They are the same age.";
  else {
    const Person& older = x > y ? p : q;
    const Person& younger = x > y ? q : p;
    s += std::string(older.name) + " is older than " + std::string(younger.name) + " by " +
         num(x > y ? x - y : y - x) + " years.";
  }
  s += " In " + num(x % 5 + 1) + " years, " + std::string(p.name) + " will be " + num(x + x % 5 + 1) + ".";
  return s;
}

std::string colors(Rng& rng) {
  std::string s;
  const int64_t count = between(rng, 3, 6);
  for (int64_t i = 0; i < count; ++i) {
    const Thing& t = pick(rng, kThings);
    s += rng.below(2) ? "The " + std::string(t.name) + " is " + std::string(t.color) + ". "
                      : "What color is the " + std::string(t.name) + "? It is " + std::string(t.color) + ". ";
  }
  s.pop_back();
  return s;
}

std::string letter(Rng& rng) {
  const Person& to = pick(rng, kPeople);
  Person from = pick(rng, kPeople);
  while (from.name == to.name) from = pick(rng, kPeople);
  const std::string_view weather = pick(rng, kWeather);
  std::string s = "Dear " + std::string(to.name) + ",\nThe weather by the " +
                  std::string(pick(rng, kLandmarks)) + " is " + std::string(weather) + " today. ";
  s += weather == "rainy" ? "I stayed inside and " : "I went outside and ";
  s += "tried to " + std::string(pick(rng, kActivities)) + ". On " + std::string(pick(rng, kMonths)) + " " +
       num(between(rng, 1, 28)) + " I will come to visit you. Please bring your " +
       std::string(pick(rng, kObjects)) + ".\n";
  s += "Your friend,\n" + std::string(from.name);
  return s;
}

}  // namespace

std::vector<std::string> defaultCorpusDocuments() {
  // ~2400 documents, about 0.5 MB: big enough that a tiny model does not memorize it within a few
  // hundred steps, small enough to generate in a few milliseconds.
  constexpr int64_t kDocuments = 2400;
  constexpr uint64_t kSeed = 0x6c696e6163ull;  // "linac"
  using Generator = std::string (*)(Rng&);
  constexpr std::array<Generator, 9> generators{story,    arithmetic, counting, animalFacts, shopping,
                                                calendar, ages,       colors,   letter};
  Rng rng(kSeed);
  std::vector<std::string> documents;
  documents.reserve(kDocuments);
  for (int64_t i = 0; i < kDocuments; ++i) documents.push_back(generators[rng.below(generators.size())](rng));
  return documents;
}

Corpus defaultCorpus(const Tokenizer& tokenizer, double heldOutFraction) {
  const std::vector<std::string> texts = defaultCorpusDocuments();
  std::vector<std::vector<int64_t>> documents;
  documents.reserve(texts.size());
  for (const std::string& text : texts) {
    std::vector<int64_t> ids = tokenizer.encode(text);
    ids.push_back(tokenizer.documentSeparator());
    documents.push_back(std::move(ids));
  }
  return makeCorpus(std::move(documents), heldOutFraction,
                    "default corpus (generated, tokenizer " + tokenizer.name() + ")");
}

}  // namespace linac::data
