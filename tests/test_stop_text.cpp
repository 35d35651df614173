// StopStringFilter: streamed text is released except a tail that could become a stop string;
// a stop string cuts the text before it, wherever the chunk boundaries fall.
#include <gtest/gtest.h>

#include <random>

#include "engine/stop_text.h"

namespace hydragen {
namespace {

using engine::StopStringFilter;

// The text a filter shows for `text` pushed in the given chunk sizes.
std::string shown(const std::vector<std::string>& stops, const std::string& text, const std::vector<std::size_t>& cuts) {
  StopStringFilter filter(stops);
  std::string out;
  std::size_t at = 0;
  for (std::size_t cut : cuts) {
    out += filter.push(std::string_view(text).substr(at, cut - at));
    at = cut;
  }
  out += filter.push(std::string_view(text).substr(at));
  return out + filter.finish();
}

TEST(StopStringFilter, CutsBeforeTheFirstStopAcrossAnyChunking) {
  const std::string text = "def f():\n    return 1\n\n\nclass A:\n";
  const std::vector<std::string> stops{"\n\n\n", "class", "zzz"};
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::size_t> cuts;
    for (std::size_t i = 1; i < text.size(); ++i)
      if (rng() % 3 == 0) cuts.push_back(i);
    EXPECT_EQ(shown(stops, text, cuts), "def f():\n    return 1") << trial;
  }
}

TEST(StopStringFilter, HoldsOnlyWhatCouldBecomeAStop) {
  StopStringFilter filter({"END"});
  EXPECT_EQ(filter.push("abcE"), "abc");  // "E" may start "END"
  EXPECT_EQ(filter.push("Nx"), "ENx");    // "ENx" cannot
  EXPECT_EQ(filter.push("EN"), "");
  EXPECT_EQ(filter.push("D tail"), "");   // stopped: the rest is dropped
  EXPECT_TRUE(filter.stopped());
  EXPECT_EQ(filter.finish(), "");
}

TEST(StopStringFilter, ReleasesEverythingWithoutStopsOrAtTheEnd) {
  EXPECT_EQ(shown({}, "plain text", {3, 5}), "plain text");
  StopStringFilter filter({"\n\n"});
  EXPECT_EQ(filter.push("line\n"), "line");
  EXPECT_FALSE(filter.stopped());
  EXPECT_EQ(filter.finish(), "\n");  // generation ended for another reason: nothing is lost
  EXPECT_EQ(shown({"b", "ab"}, "xxab", {3}), "xx");  // the stop that starts first wins
  EXPECT_EQ(shown({"é"}, "caf\xc3\xa9 au lait", {4}), "caf");  // multi-byte, split mid-character
}

}  // namespace
}  // namespace hydragen
