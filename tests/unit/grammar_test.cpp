#include <gtest/gtest.h>

#include "llamapp/grammar.hpp"

using namespace llamapp;

TEST(Grammar, ValidGbnfParses) {
    EXPECT_TRUE(validate_gbnf("root ::= \"yes\" | \"no\""));
    EXPECT_TRUE(validate_gbnf("root ::= [a-z]+ ws\nws ::= [ \\t\\n]*"));
}

TEST(Grammar, MalformedGbnfIsATypedError) {
    for (const char* bad : {"root ::= \"unterminated", "root ::= undefined_rule",
                            "not a grammar at all", "rule ::= \"x\"", "", "%llguidance {}"}) {
        auto r = validate_gbnf(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_EQ(r.error().code, ErrorCode::invalid_grammar) << bad;
    }
}

TEST(Grammar, JsonSchemaConvertsToAGrammarThatParses) {
    auto g = json_schema_to_gbnf(R"({"type":"object","properties":{"name":{"type":"string"},
        "age":{"type":"integer"}},"required":["name","age"]})");
    ASSERT_TRUE(g) << g.error().describe();
    EXPECT_NE(g->find("root"), std::string::npos);
    EXPECT_TRUE(validate_gbnf(*g));
}

TEST(Grammar, InvalidJsonSchemaIsATypedError) {
    for (const char* bad :
         {"{not json", "[1,2]", "42", R"({"type":"string","pattern":"(unbalanced"})",
          R"({"type":"string","pattern":"^(unbalanced$"})",
          R"({"properties":{"a":{"type":"string","pattern":"[a-z]+"}}})",
          R"({"$ref":"#/definitions/missing"})"}) {
        auto r = json_schema_to_gbnf(bad);
        ASSERT_FALSE(r) << bad;
        EXPECT_EQ(r.error().code, ErrorCode::invalid_json_schema) << bad;
    }
}

// Found by tests/fuzz/fuzz_grammar: llama.cpp's converter copied a pattern's empty class "[]"
// into a grammar its own parser refuses. The schema is refused, with the reason.
TEST(Grammar, ASchemaWhoseGrammarWouldNotParseIsRefused) {
    auto g =
        llamapp::json_schema_to_gbnf(R"({"type": "string", "pattern": "^[a-z]{2,4}(-[]?9+-)0$"})");
    ASSERT_FALSE(g);
    EXPECT_EQ(g.error().code, llamapp::ErrorCode::invalid_json_schema);
}

// Found by tests/fuzz/fuzz_grammar: "{5,4}" made llama.cpp's parser loop, growing without bound,
// whether written in GBNF or reached through a schema's pattern.
TEST(Grammar, AnInvertedRepetitionIsRefusedNotExpanded) {
    for (const char* inverted : {R"(root ::= "a"{5,4})", R"(root ::= "a"{5, 2})",
                                 "root ::= \"a\"{ 5,\t2 }", "root ::= \"a\"{5,\n2}"}) {
        auto g = llamapp::validate_gbnf(inverted);
        ASSERT_FALSE(g) << inverted;
        EXPECT_EQ(g.error().code, llamapp::ErrorCode::invalid_grammar);
    }
    EXPECT_TRUE(llamapp::validate_gbnf(R"(root ::= "a"{4,5} [{]{1,2} "{5,4}")"));
    auto s = llamapp::json_schema_to_gbnf(R"({"type": "string", "pattern": "^[a-z]{5,4}$"})");
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, llamapp::ErrorCode::invalid_json_schema);
}
