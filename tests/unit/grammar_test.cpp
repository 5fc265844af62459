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
