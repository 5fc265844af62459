#include <gtest/gtest.h>

#include "llamapp/tokenizer.hpp"

using namespace llamapp;

TEST(Utf8, CompletePrefixHoldsBackUnfinishedSequences) {
    EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
    EXPECT_EQ(utf8_complete_prefix(""), 0u);
    const std::string euro = "\xE2\x82\xAC";  // U+20AC, 3 bytes
    const std::string a = "a";
    EXPECT_EQ(utf8_complete_prefix(a + euro), 4u);
    EXPECT_EQ(utf8_complete_prefix(a + euro.substr(0, 1)), 1u);
    EXPECT_EQ(utf8_complete_prefix(a + euro.substr(0, 2)), 1u);
    const std::string emoji = "\xF0\x9F\x98\x80";  // 4 bytes
    EXPECT_EQ(utf8_complete_prefix(emoji.substr(0, 3)), 0u);
    EXPECT_EQ(utf8_complete_prefix(emoji), 4u);
}

TEST(Utf8, InvalidBytesAreNeverHeldForever) {
    EXPECT_EQ(utf8_complete_prefix("a\x80"), 2u);  // stray continuation byte
    EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);  // never valid
    EXPECT_EQ(utf8_complete_prefix("\xE2"
                                   "a"),
              2u);  // lead byte followed by ASCII
}

TEST(Utf8, SanitizeReplacesInvalidSequences) {
    EXPECT_EQ(utf8_sanitize("ok"), "ok");
    EXPECT_EQ(utf8_sanitize("a\xFF"
                            "b"),
              "a\xEF\xBF\xBD"
              "b");
    EXPECT_EQ(utf8_sanitize("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
    EXPECT_EQ(utf8_sanitize("\xE2\x82\xAC"), "\xE2\x82\xAC");
}

// Feeding any split of a valid string through complete-prefix never yields a broken character.
TEST(Utf8, EveryByteSplitReassemblesExactly) {
    const std::string text = "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80!";
    for (std::size_t cut = 0; cut <= text.size(); ++cut) {
        std::string pending, out;
        for (std::string_view part :
             {std::string_view(text).substr(0, cut), std::string_view(text).substr(cut)}) {
            pending += part;
            const std::size_t n = utf8_complete_prefix(pending);
            const std::string emitted = pending.substr(0, n);
            EXPECT_EQ(utf8_sanitize(emitted), emitted) << "cut at " << cut;
            out += emitted;
            pending.erase(0, n);
        }
        EXPECT_EQ(out + pending, text);
        EXPECT_TRUE(pending.empty());
    }
}
