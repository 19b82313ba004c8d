// Plain English word lists written for linac (no third-party list is copied), used where RULER
// draws words: the keys of its needles ("adjective-noun") and the words of common-word
// extraction (nouns, adjectives and verbs). Lowercase ASCII, no duplicates within a list.
#pragma once

#include <span>
#include <string_view>

namespace linac::tasks {

std::span<const std::string_view> adjectives();
std::span<const std::string_view> nouns();
std::span<const std::string_view> verbs();

}  // namespace linac::tasks
