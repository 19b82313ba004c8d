#include "tasks/words.h"

#include <array>

namespace linac::tasks {
namespace {

constexpr std::array kAdjectives = std::to_array<std::string_view>({
    "able",     "absent",   "active",   "afraid",   "agile",    "alert",    "ancient",  "angry",
    "anxious",  "bare",     "bashful",  "better",   "big",      "bitter",   "blank",    "bold",
    "brave",    "brief",    "bright",   "brisk",    "broad",    "busy",     "calm",     "careful",
    "cheap",    "cheerful", "chilly",   "clean",    "clever",   "close",    "cloudy",   "clumsy",
    "coarse",   "cold",     "common",   "cool",     "cozy",     "crisp",    "cruel",    "curious",
    "damp",     "dark",     "dear",     "deep",     "dense",    "direct",   "dizzy",    "dry",
    "dull",     "dusty",    "eager",    "early",    "easy",     "elegant",  "empty",    "equal",
    "exact",    "faint",    "fair",     "famous",   "fancy",    "fast",     "fierce",   "fine",
    "firm",     "flat",     "fond",     "formal",   "fragile",  "free",     "fresh",    "friendly",
    "full",     "funny",    "gentle",   "giant",    "glad",     "golden",   "good",     "grand",
    "grateful", "great",    "green",    "gray",     "happy",    "hard",     "harsh",    "heavy",
    "helpful",  "hidden",   "high",     "hollow",   "honest",   "hot",      "huge",     "humble",
    "hungry",   "icy",      "idle",     "jolly",    "juicy",    "keen",     "kind",     "large",
    "late",     "lazy",     "light",    "little",   "lively",   "lonely",   "long",     "loud",
    "lucky",    "mad",      "magic",    "mellow",   "mild",     "misty",    "modern",   "modest",
    "narrow",   "neat",     "new",      "nice",     "noble",    "noisy",    "odd",      "old",
    "open",     "orange",   "pale",     "plain",    "polite",   "poor",     "proud",    "purple",
    "quick",    "quiet",    "rapid",    "rare",     "ready",    "red",      "rich",     "rigid",
    "ripe",     "rough",    "round",    "royal",    "rude",     "rusty",    "sad",      "safe",
    "salty",    "sharp",    "shiny",    "short",    "shy",      "silent",   "silly",    "simple",
    "slim",     "slow",     "small",    "smart",    "smooth",   "soft",     "solid",    "sour",
    "spare",    "spicy",    "steady",   "steep",    "stiff",    "still",    "strange",  "strict",
    "strong",   "sturdy",   "sudden",   "sunny",    "sweet",    "swift",    "tall",     "tame",
    "tender",   "thick",    "thin",     "tidy",     "tiny",     "tough",    "tricky",   "true",
    "ugly",     "vast",     "vivid",    "warm",     "weak",     "wealthy",  "weary",    "wet",
    "white",    "whole",    "wide",     "wild",     "wise",     "witty",    "wooden",   "young",
});

constexpr std::array kNouns = std::to_array<std::string_view>({
    "acorn",    "actor",    "airport",  "album",    "anchor",   "angle",    "ankle",    "apple",
    "apron",    "arch",     "arrow",    "artist",   "attic",    "badge",    "bakery",   "balcony",
    "banana",   "banner",   "barrel",   "basket",   "beach",    "beard",    "bell",     "bench",
    "berry",    "bicycle",  "blanket",  "blossom",  "bottle",   "boulder",  "bracelet", "branch",
    "bread",    "bridge",   "broom",    "bucket",   "button",   "cabin",    "cable",    "cactus",
    "camera",   "canal",    "candle",   "canyon",   "captain",  "carpet",   "carrot",   "castle",
    "cellar",   "chair",    "chalk",    "cherry",   "chimney",  "circle",   "city",     "cliff",
    "clock",    "cloud",    "coast",    "coconut",  "coin",     "comet",    "compass",  "cookie",
    "copper",   "cottage",  "cousin",   "crayon",   "cricket",  "crown",    "crystal",  "cup",
    "curtain",  "cushion",  "daisy",    "desert",   "diamond",  "doctor",   "dolphin",  "donkey",
    "door",     "dragon",   "drawer",   "drum",     "eagle",    "engine",   "envelope", "falcon",
    "farmer",   "feather",  "fence",    "fern",     "ferry",    "field",    "finger",   "flag",
    "flute",    "forest",   "fountain", "fox",      "garden",   "garlic",   "gate",     "ghost",
    "giraffe",  "glacier",  "glove",    "goose",    "grape",    "guitar",   "hammer",   "harbor",
    "helmet",   "hill",     "honey",    "horizon",  "hotel",    "island",   "jacket",   "jungle",
    "kettle",   "kitchen",  "kite",     "ladder",   "lake",     "lamp",     "lantern",  "lemon",
    "letter",   "library",  "lighthouse", "lily",   "lion",     "lizard",   "lobster",  "locket",
    "magnet",   "mango",    "map",      "marble",   "market",   "meadow",   "melon",    "mirror",
    "monkey",   "moon",     "mountain", "muffin",   "museum",   "napkin",   "needle",   "nest",
    "notebook", "ocean",    "office",   "onion",    "orchard",  "otter",    "oven",     "owl",
    "paddle",   "palace",   "panda",    "parrot",   "peach",    "pebble",   "pencil",   "pepper",
    "piano",    "pillow",   "pilot",    "planet",   "plate",    "pocket",   "pond",     "potato",
    "puppet",   "puzzle",   "rabbit",   "radio",    "raft",     "rainbow",  "ribbon",   "river",
    "robot",    "rocket",   "saddle",   "sailor",   "salmon",   "sandal",   "scarf",    "school",
    "scissors", "shadow",   "shell",    "shovel",   "signal",   "singer",   "sled",     "spoon",
    "squirrel", "stadium",  "star",     "statue",   "stone",    "storm",    "stove",    "street",
    "sugar",    "suitcase", "summit",   "sweater",  "table",    "teacher",  "temple",   "tent",
    "thunder",  "ticket",   "tiger",    "tomato",   "tower",    "tractor",  "train",    "tree",
    "trumpet",  "tulip",    "tunnel",   "turtle",   "umbrella", "valley",   "vase",     "violin",
    "volcano",  "wagon",    "wallet",   "walnut",   "whale",    "whistle",  "window",   "wizard",
});

constexpr std::array kVerbs = std::to_array<std::string_view>({
    "accept",   "add",      "admire",   "agree",    "allow",    "answer",   "appear",   "arrange",
    "arrive",   "ask",      "bake",     "balance",  "bathe",    "begin",    "believe",  "bend",
    "blink",    "boil",     "borrow",   "bounce",   "breathe",  "bring",    "build",    "bury",
    "calculate", "call",    "carry",    "catch",    "change",   "chase",    "cheer",    "chew",
    "choose",   "clap",     "climb",    "collect",  "comb",     "compare",  "cook",     "copy",
    "count",    "crawl",    "cross",    "dance",    "decide",   "deliver",  "describe", "dig",
    "discover", "dive",     "draw",     "dream",    "drink",    "drive",    "dust",     "earn",
    "enjoy",    "enter",    "escape",   "explain",  "explore",  "fetch",    "fill",     "find",
    "finish",   "fix",      "float",    "fly",      "fold",     "follow",   "forget",   "gather",
    "giggle",   "glow",     "grab",     "greet",    "grow",     "guess",    "guide",    "hang",
    "help",     "hide",     "hike",     "hold",     "hop",      "hug",      "hum",      "hunt",
    "hurry",    "imagine",  "invent",   "invite",   "join",     "juggle",   "jump",     "kick",
    "knit",     "knock",    "laugh",    "lead",     "learn",    "lend",     "lift",     "listen",
    "march",    "measure",  "melt",     "mend",     "mix",      "move",     "nod",      "notice",
    "obey",     "offer",    "open",     "order",    "paint",    "pack",     "paddle",   "pass",
    "pause",    "peel",     "pick",     "plant",    "play",     "point",    "polish",   "pour",
    "practice", "pray",     "prepare",  "print",    "promise",  "pull",     "push",     "race",
    "read",     "relax",    "remember", "repair",   "rest",     "return",   "ride",     "roll",
    "row",      "run",      "sail",     "scrub",    "search",   "sew",      "shake",    "share",
    "shout",    "sing",     "sip",      "skate",    "ski",      "sleep",    "slide",    "smile",
    "sneeze",   "solve",    "sort",     "speak",    "spin",     "splash",   "stack",    "stir",
    "stretch",  "swim",     "swing",    "talk",     "taste",    "teach",    "throw",    "tickle",
    "travel",   "trust",    "tumble",   "type",     "unlock",   "visit",    "wait",     "walk",
    "wander",   "wash",     "watch",    "wave",     "whisper",  "win",      "wink",     "wish",
});

}  // namespace

std::span<const std::string_view> adjectives() { return kAdjectives; }
std::span<const std::string_view> nouns() { return kNouns; }
std::span<const std::string_view> verbs() { return kVerbs; }

}  // namespace linac::tasks
