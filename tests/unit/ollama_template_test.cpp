// Ollama's Go template syntax, the subset a /api/generate override may use, without a model.
#include <gtest/gtest.h>

#include "server/http/http_error.hpp"
#include "server/protocols/ollama/go_template.hpp"

namespace {

using llamapp::detail::HttpException;
using llamapp::detail::render_go_template;

TEST(OllamaTemplate, FieldsAndConditionsAreFilledIn) {
    const std::string t = "{{ if .System }}S:{{ .System }}\n{{ end }}U:{{ .Prompt }}\nA:";
    EXPECT_EQ(render_go_template(t, "be brief", "hi", ""), "S:be brief\nU:hi\nA:");
    EXPECT_EQ(render_go_template(t, "", "hi", ""), "U:hi\nA:");
    EXPECT_EQ(render_go_template("{{if .Suffix}}<pre>{{.Prompt}}<suf>{{.Suffix}}<mid>{{else}}"
                                 "{{.Prompt}}{{end}}",
                                 "", "a", "b"),
              "<pre>a<suf>b<mid>");
    EXPECT_EQ(render_go_template("{{if .Suffix}}x{{else}}{{.Prompt}}{{end}}", "", "a", ""), "a");
}

TEST(OllamaTemplate, TheReplyGoesWhereResponseIs) {
    EXPECT_EQ(render_go_template("U:{{ .Prompt }}\nA:{{ .Response }}<end>", "", "hi", ""),
              "U:hi\nA:");
}

TEST(OllamaTemplate, DashesTrimTheWhiteSpaceBeside) {
    EXPECT_EQ(render_go_template("a  \n{{- .Prompt -}}  \n b", "", "P", ""), "aPb");
    // Only the template's own text is trimmed, never a value filled in.
    EXPECT_EQ(render_go_template("A {{ .Prompt }}   {{- .System }}", "S", "p   ", ""), "A p   S");
    EXPECT_EQ(render_go_template("{{- if .System }}\n{{ .System }}{{ end -}}\n\nU", "", "", ""),
              "U");
}

TEST(OllamaTemplate, AnythingElseIsRefusedNamingTheTemplate) {
    for (const char* bad :
         {"{{ .Messages }}", "{{ range .Messages }}{{ end }}", "{{ if .System }}x", "{{ end }}",
          "{{ .Prompt", "{{ if .Nope }}{{ end }}", "{{ else }}"}) {
        try {
            render_go_template(bad, "s", "p", "");
            ADD_FAILURE() << bad << " was accepted";
        } catch (const HttpException& e) {
            EXPECT_EQ(e.error.status, 400) << bad;
            EXPECT_EQ(e.error.param, "template") << bad;
        }
    }
}

}  // namespace
