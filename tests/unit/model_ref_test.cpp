// Model references: what each spelling means, and what is refused before it reaches a file
// system or the hub.
#include "llamapp/model_ref.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace llamapp {
namespace {

TEST(ModelRef, EachSpellingMeansOneKind) {
    struct Case {
        std::string text;
        ModelRefKind kind;
        std::string value;  // the path, the name, or the repository
        std::string file = {};
        std::string quant = {};
    };
    const std::vector<Case> cases = {
        {"/models/llama.gguf", ModelRefKind::path, "/models/llama.gguf"},
        {"./llama.gguf", ModelRefKind::path, "./llama.gguf"},
        {"../up/llama", ModelRefKind::path, "../up/llama"},
        {"~/models/x.gguf", ModelRefKind::path, "~/models/x.gguf"},
        {"llama.gguf", ModelRefKind::path, "llama.gguf"},
        {"models/Llama.GGUF", ModelRefKind::path, "models/Llama.GGUF"},
        {"ggml-org/gemma-3-1b-it-GGUF", ModelRefKind::hub, "ggml-org/gemma-3-1b-it-GGUF"},
        {"ggml-org/gemma-3-1b-it-GGUF:Q4_K_M", ModelRefKind::hub, "ggml-org/gemma-3-1b-it-GGUF", "",
         "Q4_K_M"},
        {"owner/repo:sub/dir/model-Q8_0.gguf", ModelRefKind::hub, "owner/repo",
         "sub/dir/model-Q8_0.gguf"},
        {"hf://owner/repo:q4_0", ModelRefKind::hub, "owner/repo", "", "q4_0"},
        {"hf:owner/repo", ModelRefKind::hub, "owner/repo"},
        // Ollama's spelling of what it pulled from the hub, and its implied tag.
        {"hf.co/owner/repo:Q8_0", ModelRefKind::hub, "owner/repo", "", "Q8_0"},
        {"huggingface.co/owner/repo:latest", ModelRefKind::hub, "owner/repo"},
        {"https://huggingface.co/owner/repo", ModelRefKind::hub, "owner/repo"},
        {"owner/repo:latest", ModelRefKind::hub, "owner/repo"},
        {"qwen3-0.6b", ModelRefKind::name, "qwen3-0.6b"},
        {"qwen3:0.6b", ModelRefKind::name, "qwen3:0.6b"},
        {"stories260K", ModelRefKind::name, "stories260K"},
    };
    for (const Case& c : cases) {
        auto ref = parse_model_ref(c.text);
        ASSERT_TRUE(ref) << c.text << ": " << ref.error().describe();
        EXPECT_EQ(ref->kind, c.kind) << c.text;
        switch (c.kind) {
            case ModelRefKind::path:
                EXPECT_EQ(ref->path.string(), c.value) << c.text;
                break;
            case ModelRefKind::name:
                EXPECT_EQ(ref->name, c.value) << c.text;
                break;
            case ModelRefKind::hub:
                EXPECT_EQ(ref->hub.repo, c.value) << c.text;
                EXPECT_EQ(ref->hub.file, c.file) << c.text;
                EXPECT_EQ(ref->hub.quant, c.quant) << c.text;
                // The canonical spelling parses back to the same reference.
                auto again = parse_model_ref(ref->hub.to_string());
                ASSERT_TRUE(again) << ref->hub.to_string();
                EXPECT_EQ(again->hub.to_string(), ref->hub.to_string());
                break;
        }
    }
}

TEST(ModelRef, MalformedReferencesAreRefusedNamingThePartAtFault) {
    struct Case {
        std::string text;
        std::string context;  // what the error names
    };
    const std::vector<Case> cases = {
        {"", ""},
        {std::string("a\0b", 3), ""},
        {"owner/repo/extra", "owner/repo/extra"},
        {"hf://owner", "owner"},
        {"-owner/repo", "-owner"},
        {"owner/repo.", "repo."},
        {"own..er/repo", "own..er"},
        {"own--er/repo", "own--er"},
        {"owner/re po", "re po"},
        {std::string(97, 'a') + "/repo", std::string(97, 'a')},
        {"owner/repo:", "owner/repo:"},
        {"owner/repo:../../etc/passwd.gguf", "../../etc/passwd.gguf"},
        {"owner/repo:/abs/model.gguf", "/abs/model.gguf"},
        {"owner/repo:a//b.gguf", "a//b.gguf"},
        {"owner/repo:a\\b.gguf", "a\\b.gguf"},
        {"owner/repo:a\nb.gguf", "a\nb.gguf"},
        {"owner/repo:Q4 K M", "Q4 K M"},
        {"owner/repo:Q4:K", "Q4:K"},
        {"name:", "name:"},
        {"a:b:c", "a:b:c"},
        {"na me", "na me"},
        {std::string(129, 'n'), std::string(129, 'n')},
    };
    for (const Case& c : cases) {
        auto ref = parse_model_ref(c.text);
        ASSERT_FALSE(ref) << c.text;
        EXPECT_EQ(ref.error().code, ErrorCode::invalid_argument) << c.text;
        EXPECT_EQ(ref.error().context, c.context) << c.text;
        EXPECT_FALSE(ref.error().message.empty());
    }
}

// Every name llamapp prints for a hub model finds it again: the repository in any case, the
// file, or a tag the file carries; a tag it does not carry, another file or repository do not.
TEST(ModelRef, AHubModelAnswersToItsFileAndItsTag) {
    const HubRef pulled{"acme/tiny-GGUF", "", "Q8_0"};
    const std::filesystem::path file = "/cache/models--acme--tiny-GGUF/snapshots/c/tiny-Q8_0.gguf";
    const auto names = [&](const std::string& text, const HubRef& have,
                           const std::filesystem::path& at) {
        auto ref = parse_model_ref(text);
        EXPECT_TRUE(ref && ref->kind == ModelRefKind::hub) << text;
        return ref && hub_ref_names(ref->hub, have, at);
    };
    for (const char* text : {"acme/tiny-GGUF:Q8_0", "hf.co/acme/tiny-GGUF:q8_0",
                             "acme/tiny-gguf:tiny-Q8_0.gguf", "ACME/tiny-GGUF:Q8_0"}) {
        EXPECT_TRUE(names(text, pulled, file)) << text;
    }
    EXPECT_TRUE(names("acme/tiny-GGUF:Q8_0", pulled, {}));  // not in the cache yet: as asked
    for (const char* text : {"acme/tiny-GGUF:Q4_K_M", "acme/tiny-GGUF:other-Q8_0.gguf",
                             "acme/small-GGUF:Q8_0", "acme/tiny-GGUF"}) {
        EXPECT_FALSE(names(text, pulled, file)) << text;
    }
    // A model pulled without a tag answers to the bare repository and to its file's tag.
    EXPECT_TRUE(names("hf.co/acme/tiny-GGUF:latest", HubRef{"acme/tiny-GGUF"}, file));
    EXPECT_TRUE(names("acme/tiny-GGUF:Q8_0", HubRef{"acme/tiny-GGUF"}, file));
}

}  // namespace
}  // namespace llamapp
