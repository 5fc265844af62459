// Drives the real `llamapp` binary: exit codes, error lines, JSON output.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "support/command.hpp"
#include "support/paths.hpp"
#include "support/temp_dir.hpp"

namespace {

using CliRun = llamapp::test::CommandResult;  // out: stdout, and stderr unless told otherwise

CliRun run(const std::string& args, bool with_stderr = true) {
    const std::string inner = llamapp::test::binary("llamapp").string() + " " + args +
                              (with_stderr ? " 2>&1" : " 2>/dev/null");
    // bash, not sh: some cases use process substitution.
    std::string quoted;
    for (char c : inner) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return llamapp::test::run_command("bash -c '" + quoted + "'");
}

// A function, not a constant: a missing fixture fails the tests that use it, not the binary.
std::string stories() {
    return llamapp::test::shared_model("stories260K.gguf").string();
}

// The number in "[N prompt tokens, ..." of each reply's summary line, in order.
std::vector<int> prompt_token_counts(const std::string& out) {
    static const std::regex summary(R"(\[(\d+) prompt tokens,)");
    std::vector<int> counts;
    for (auto it = std::sregex_iterator(out.begin(), out.end(), summary);
         it != std::sregex_iterator(); ++it)
        counts.push_back(std::stoi((*it)[1]));
    return counts;
}

}  // namespace

TEST(Cli, RunPrintsTheGoldenGreedyText) {
    CliRun r = run("run -m " + stories() + " -p 'Once upon a time' -n 30 --temp 0", false);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << r.out;
}

// `run MODEL PROMPT` as `ollama run` takes them; with -m the one word is the prompt.
TEST(Cli, RunTakesTheModelAndThePromptAsWords) {
    for (const std::string& args :
         {stories() + " 'Once upon a time'", "-m " + stories() + " 'Once upon a time'"}) {
        CliRun r = run("run " + args + " -n 30 --temp 0", false);
        ASSERT_EQ(r.status, 0) << args << "\n" << r.out;
        EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u)
            << r.out;
    }
    CliRun twice = run("run " + stories() + " hi -p hello");
    EXPECT_EQ(twice.status, 1) << twice.out;
    EXPECT_NE(twice.out.find("the prompt is given twice"), std::string::npos) << twice.out;
}

// A mistyped command or option says what was probably meant, in llamapp's error form, with the
// status of a usage error.
TEST(Cli, UsageErrorsSayWhatWasMeant) {
    const std::pair<std::string, std::string> cases[] = {
        {"serv", "unknown command 'serv'; did you mean 'serve'?"},
        {"bogus", "unknown command 'bogus'; `llamapp --help` lists the commands"},
        {"serve --prot 18500", "unknown option --prot; did you mean --port?"},
        {"run --tmep 0.5", "unknown option --tmep; did you mean --temp?"},
        {"run a b c", "see `llamapp run --help`"},
        {"ps --port x", "--port"},
    };
    for (const auto& [args, said] : cases) {
        CliRun r = run(args);
        EXPECT_EQ(r.status, 2) << args << "\n" << r.out;
        EXPECT_EQ(r.out.rfind("error: ", 0), 0u) << args << "\n" << r.out;
        EXPECT_NE(r.out.find(said), std::string::npos) << args << "\n" << r.out;
        EXPECT_NE(r.out.find("[invalid_argument]"), std::string::npos) << args << "\n" << r.out;
        EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << "\n" << r.out;
    }
    EXPECT_EQ(run("--help").status, 0);
    EXPECT_EQ(run("list").status, 0);  // Ollama's name for `ls`
}

TEST(Cli, RunJsonHasUsageAndTimings) {
    CliRun r = run("run -m " + stories() + " -p 'The cat' -n 12 --temp 0 --json", false);
    ASSERT_EQ(r.status, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["usage"]["completion_tokens"], 12);
    EXPECT_EQ(j["finish_reason"], "length");
    EXPECT_GT(j["timings"]["decode_tokens_per_s"].get<double>(), 0);
    EXPECT_EQ(j["tokens"].size(), 12u);
}

// Two processes: the second finds the first one's prompt on disk and answers the same.
TEST(Cli, RestartServesThePromptFromTheDiskCache) {
    llamapp::test::TempDir dir;
    const std::string args = "run -m " + stories() + " --json --temp 0 -n 16 --cache-ram 0 " +
                             "--cache-min-tokens 16 --cache-disk " + dir.path().string() +
                             " -p 'Once upon a time, there was a little girl named Lily. She " +
                             "loved to play outside in the park with her friends.'";
    CliRun cold = run(args, false);
    ASSERT_EQ(cold.status, 0) << cold.out;
    auto first = nlohmann::json::parse(cold.out);
    EXPECT_EQ(first["cache"]["source"], "none");
    CliRun warm = run(args, false);
    ASSERT_EQ(warm.status, 0) << warm.out;
    auto second = nlohmann::json::parse(warm.out);
    EXPECT_EQ(second["cache"]["source"], "stored");
    EXPECT_EQ(second["cache"]["tier"], "disk");
    EXPECT_EQ(second["cache"]["reused_tokens"].get<int>(),
              first["usage"]["prompt_tokens"].get<int>() - 1);
    EXPECT_EQ(second["text"], first["text"]);
    // Bad cache options are typed errors.
    CliRun bad = run("run -m " + stories() + " -p x -n 1 --cache-disk /proc/nope");
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.out.find("cache directory"), std::string::npos) << bad.out;
}

TEST(Cli, CacheShowsPrunesAndClearsADirectory) {
    llamapp::test::TempDir dir;
    const std::string at = " --cache-disk " + dir.path().string();
    auto fill = [&](const std::string& prompt) {
        CliRun r = run("run -m " + stories() + " -n 8 --temp 0 --cache-ram 0 --cache-min-tokens 8" +
                           at + " -p '" + prompt + "'",
                       false);
        ASSERT_EQ(r.status, 0) << r.out;
    };
    auto json_of = [&](const std::string& args) {
        CliRun r = run("cache " + args + at + " --json", false);
        EXPECT_EQ(r.status, 0) << r.out;
        return nlohmann::json::parse(r.out, nullptr, false);
    };
    fill("Once upon a time, there was a little girl named Lily.");
    fill("The cat sat on the mat and looked at the big red ball.");
    const auto stats = json_of("");  // stats is the default action
    EXPECT_EQ(stats["entries"], 2) << stats.dump();
    EXPECT_GT(stats["bytes"], 0);
    const auto list = json_of("list");
    ASSERT_EQ(list.size(), 2u) << list.dump();
    for (const auto& e : list) {
        EXPECT_GT(e["tokens"], 8);
        EXPECT_EQ(e["reason"], "finish");
        EXPECT_GE(e["last_used_ms"], e["created_ms"]);
    }
    EXPECT_NE(run("cache list" + at).out.find(list[0]["id"].get<std::string>().substr(0, 16)),
              std::string::npos);
    EXPECT_EQ(json_of("prune --unused-for 1h")["removed"], 0);
    EXPECT_EQ(json_of("prune --unused-for 0s")["removed"], 2);
    fill("Once upon a time, there was a little girl named Lily.");
    EXPECT_EQ(json_of("clear")["removed"], 1);
    EXPECT_EQ(json_of("stats")["entries"], 0);
    // Mistakes are one-line typed errors.
    const std::vector<std::string> mistakes = {"prune" + at, "prune --unused-for 5x" + at,
                                               "clear --unused-for 1h" + at,
                                               "stats --cache-disk /nonexistent"};
    for (const std::string& bad : mistakes) {
        CliRun r = run("cache " + bad);
        EXPECT_EQ(r.status, 1) << bad;
        EXPECT_EQ(r.out.rfind("error: ", 0), 0u) << bad << ": " << r.out;
    }
}

TEST(Cli, DefaultModelIsTheDemoWithABanner) {
    CliRun r = run("run -p 'Hello' -n 5");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("RANDOM weights"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("-m PATH"), std::string::npos);
}

TEST(Cli, ErrorsAreOneLineAndNonZero) {
    const std::pair<std::string, std::string> cases[] = {
        {"run -m /nonexistent.gguf -p hi", "[file_not_found]"},
        {"run -m /tmp -p hi", "[is_directory]"},
        {"run -m " + stories() + " -p hi -c -5", "[invalid_argument]"},
        {"run -m " + stories() + " -p hi -ctk q9_9", "[invalid_argument]"},
        {"run -m " + stories() + " -p hi -n 0", "[invalid_argument]"},
        {"run -m " + stories() + " -p hi --grammar 'root ::= ('", "[invalid_grammar]"},
        {"run -m " + stories() + " -p hi --json-schema '{bad'", "[invalid_json_schema]"},
        {"run -m " + stories() + " -p hi --top-p 7", "[invalid_argument]"},
        {"info -m /nonexistent.gguf", "[file_not_found]"},
    };
    for (const auto& [args, code] : cases) {
        CliRun r = run(args);
        EXPECT_NE(r.status, 0) << args;
        EXPECT_NE(r.out.find("error: "), std::string::npos) << args << "\n" << r.out;
        EXPECT_NE(r.out.find(code), std::string::npos) << args << "\n" << r.out;
    }
}

// Ctrl-C stops a one-shot run; its exit status is 130, as a shell reports an interrupted
// command, so a script can tell a cancel from a reply. The run would otherwise go on for a
// minute (a large context, no end of generation); SIGINT goes once output has appeared.
TEST(Cli, AnInterruptedRunExitsWith130) {
    const std::string script =
        "out=$(mktemp); " + llamapp::test::binary("llamapp").string() + " run -m " + stories() +
        " -p Once -c 65536 -n -1 --ignore-eos >$out 2>&1 & pid=$!; "
        "until grep -q Once $out || ! kill -0 $pid 2>/dev/null; do sleep 0.05; done; "
        "kill -INT $pid; wait $pid; echo \"exit=$?\"; rm -f $out";
    const CliRun r = llamapp::test::run_command("bash -c '" + script + "'");
    EXPECT_NE(r.out.find("exit=130"), std::string::npos) << r.out;
}

TEST(Cli, InfoTokenizeEmbedDevices) {
    CliRun info = run("info -m " + stories() + " --json --sha256", false);
    ASSERT_EQ(info.status, 0) << info.out;
    auto j = nlohmann::json::parse(info.out);
    EXPECT_EQ(j["n_layer"], 5);
    EXPECT_EQ(j["sha256"], "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");

    CliRun table = run("info -m " + stories(), false);
    EXPECT_NE(table.out.find("architecture       llama"), std::string::npos) << table.out;

    CliRun tok = run("tokenize -m " +
                         llamapp::test::shared_model("vocab/ggml-vocab-llama-spm.gguf").string() +
                         " -p 'Hello world' --ids --no-add-special",
                     false);
    ASSERT_EQ(tok.status, 0) << tok.out;
    EXPECT_EQ(nlohmann::json::parse(tok.out), nlohmann::json::parse("[15043, 3186]"));

    CliRun emb = run("embed -m " + stories() + " -p one -p two", false);
    ASSERT_EQ(emb.status, 0) << emb.out;
    auto e = nlohmann::json::parse(emb.out);
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0]["embedding"].size(), 64u);

    CliRun dev = run("devices", false);
    ASSERT_EQ(dev.status, 0);
    EXPECT_NE(dev.out.find("cpu"), std::string::npos) << dev.out;
}

// Each turn sends the history again; the engine session keeps it, so the second turn's prompt
// is longer and mostly reused.
TEST(Cli, ChatReplKeepsHistory) {
    CliRun r = run("run --chat -m " + llamapp::test::generated_model("qwen3-tiny.gguf").string() +
                   " -n 4 --temp 0 < <(printf 'hi\\nagain\\n')");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("chat:"), std::string::npos);
    const std::regex summary(R"(\[(\d+) prompt tokens, (cold|(\d+) cached \(same_slot\)),)");
    std::vector<std::smatch> turns;
    for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), summary);
         it != std::sregex_iterator(); ++it)
        turns.push_back(*it);
    ASSERT_EQ(turns.size(), 2u) << r.out;
    EXPECT_EQ(turns[0][2], "cold");
    const int first = std::stoi(turns[0][1]), second = std::stoi(turns[1][1]);
    EXPECT_GT(second, first);
    ASSERT_TRUE(turns[1][3].matched) << r.out;
    EXPECT_GE(std::stoi(turns[1][3]), first);  // the whole first turn, reply included
}

// One policy for models without a template (ChatTemplate's MissingTemplate::chatml), the same
// as the server's: the REPL chats with the demo model's own template, and with ChatML on a
// model that has none.
TEST(Cli, ChatWorksOnTheDemoModelAndOnAModelWithoutATemplate) {
    CliRun demo = run("run --chat -n 3 --temp 0 < <(printf 'hi\\n')");
    ASSERT_EQ(demo.status, 0) << demo.out;
    EXPECT_EQ(demo.out.find("no chat template"), std::string::npos) << demo.out;
    EXPECT_NE(demo.out.find("prompt tokens"), std::string::npos) << demo.out;

    CliRun bare = run("run --chat -m " + stories() + " -n 3 --temp 0 < <(printf 'hi\\n')");
    ASSERT_EQ(bare.status, 0) << bare.out;
    EXPECT_NE(bare.out.find("using ChatML"), std::string::npos) << bare.out;
    EXPECT_NE(bare.out.find("prompt tokens"), std::string::npos) << bare.out;
}

// On a model with a chat template `run` chats: a prompt gets one reply framed by the template,
// piped input is the prompt, --raw continues the text instead, --json carries the answer, and
// --reasoning off renders the template's closed thinking block.
TEST(Cli, RunChatsOnAChatModelAndCompletesWithRaw) {
    const std::string qwen = llamapp::test::generated_model("qwen3-tiny.gguf").string();
    CliRun once = run("run " + qwen + " hi -n 4 --temp 0 < /dev/null");
    ASSERT_EQ(once.status, 0) << once.out;
    EXPECT_EQ(once.out.find("chat:"), std::string::npos) << once.out;  // no REPL after it
    const std::vector<int> chat = prompt_token_counts(once.out);
    ASSERT_EQ(chat.size(), 1u) << once.out;
    CliRun piped = run("run " + qwen + " -n 4 --temp 0 < <(printf hi)");
    EXPECT_EQ(prompt_token_counts(piped.out), chat) << piped.out;
    CliRun raw = run("run --raw " + qwen + " hi -n 4 --temp 0");
    ASSERT_EQ(raw.status, 0) << raw.out;
    EXPECT_EQ(raw.out.rfind("hi", 0), 0u) << raw.out;  // the prompt, continued
    ASSERT_EQ(prompt_token_counts(raw.out).size(), 1u) << raw.out;
    EXPECT_LT(prompt_token_counts(raw.out)[0], chat[0]) << raw.out;

    CliRun json = run("run " + qwen + " hi -n 4 --temp 0 --json", false);
    ASSERT_EQ(json.status, 0) << json.out;
    const auto reply = nlohmann::json::parse(json.out);
    EXPECT_TRUE(reply["content"].is_string()) << reply;
    EXPECT_EQ(reply["usage"]["prompt_tokens"], chat[0]) << reply;
    CliRun off = run("run " + qwen + " hi -n 4 --temp 0 --json --reasoning off", false);
    ASSERT_EQ(off.status, 0) << off.out;
    EXPECT_GT(nlohmann::json::parse(off.out)["usage"]["prompt_tokens"].get<int>(), chat[0]);

    for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
             {"run " + qwen + " -n 4 < /dev/null", "no prompt: give one"},
             {"run --raw --chat " + qwen + " -p hi", "--raw and --chat exclude each other"},
             {"run --chat --json " + qwen + " -p hi < /dev/null", "--json prints one reply"},
             {"run " + qwen + " hi --reasoning maybe", "--reasoning"}}) {
        CliRun r = run(args);
        EXPECT_NE(r.status, 0) << args;
        EXPECT_NE(r.out.find(says), std::string::npos) << args << "\n" << r.out;
    }
}

// The REPL's commands on piped input: /help lists them, /set changes sampling, an unknown
// command is not sent to the model, /bye leaves before the lines after it, --chat -p sends the
// prompt first. /save keeps the conversation and its KV (only what is saved: the chats
// directory's KV tier takes no other entry), and /load continues it in another process with
// that KV restored instead of recomputed.
TEST(Cli, ReplCommandsAndASavedConversationContinuesInAnotherRun) {
    llamapp::test::TempDir data;
    const std::string qwen = llamapp::test::generated_model("qwen3-tiny.gguf").string();
    const std::string chat = "XDG_DATA_HOME=" + data.path().string() + " " +
                             llamapp::test::binary("llamapp").string() + " run --chat " + qwen +
                             " -n 6 --temp 0 --system 'Be brief.' ";
    CliRun first = llamapp::test::run_command(
        "bash -c \"" + chat +
        "-p hello < <(printf '/help\\n/set temperature 0\\n/nope\\nhow are you\\n/save "
        "talk\\n/bye\\nnever sent\\n') 2>&1\"");
    ASSERT_EQ(first.status, 0) << first.out;
    EXPECT_NE(first.out.find("/save NAME, /load NAME"), std::string::npos) << first.out;
    EXPECT_NE(first.out.find("Set 'temperature' to '0'."), std::string::npos) << first.out;
    EXPECT_NE(first.out.find("unknown command '/nope'; /help lists them"), std::string::npos);
    EXPECT_EQ(prompt_token_counts(first.out).size(), 2u) << first.out;  // hello, how are you
    const std::regex saved(R"(Saved 'talk' \(5 messages, its KV of (\d+) tokens\))");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(first.out, m, saved)) << first.out;
    const int kv_tokens = std::stoi(m[1]);
    const auto file = data.path() / "llamapp" / "chats" / "talk.json";
    const auto saved_json = nlohmann::json::parse(std::ifstream(file));
    ASSERT_EQ(saved_json["messages"].size(), 5u) << saved_json;
    EXPECT_EQ(saved_json["messages"][0]["content"], "Be brief.");
    EXPECT_EQ(saved_json["messages"][3]["content"], "how are you");
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto& e :
         std::filesystem::directory_iterator(data.path() / "llamapp" / "chats" / "kv"))
        ++entries;
    EXPECT_EQ(entries, 1u);

    CliRun second = llamapp::test::run_command(
        "bash -c \"" + chat + "< <(printf '/load nothing\\n/load talk\\nand now\\n') 2>&1\"");
    ASSERT_EQ(second.status, 0) << second.out;
    EXPECT_NE(second.out.find("no conversation is saved by that name"), std::string::npos)
        << second.out;
    EXPECT_NE(second.out.find("Loaded 'talk' (5 messages); its KV of " + std::to_string(kv_tokens) +
                              " tokens restored"),
              std::string::npos)
        << second.out;
    // """ opens and closes a message of several lines.
    CliRun lines =
        llamapp::test::run_command("bash -c \"" + chat +
                                   "< <(printf '\\\"\\\"\\\"\\nline one\\ntwo\\\"\\\"\\\"\\n/save "
                                   "lines\\n') 2>&1\"");
    ASSERT_EQ(lines.status, 0) << lines.out;
    const auto lines_json =
        nlohmann::json::parse(std::ifstream(data.path() / "llamapp" / "chats" / "lines.json"));
    EXPECT_EQ(lines_json["messages"][1]["content"], "line one\ntwo") << lines_json;
    const std::regex reused(R"(\[(\d+) prompt tokens, (\d+) cached)");
    ASSERT_TRUE(std::regex_search(second.out, m, reused)) << second.out;
    EXPECT_GT(std::stoi(m[2]), kv_tokens / 2) << second.out;
}

// The completion scripts come from the command definitions: bash completes commands, options,
// an option's choices, subcommands and files; fish's own completer reads its script; zsh loads
// its script through its bash layer.
TEST(Cli, ShellCompletionFollowsTheCommands) {
    llamapp::test::TempDir dir;
    std::ofstream(dir / "model.gguf") << "";
    std::ofstream(dir / "complete.sh") << "source <(\"$LLAMAPP\" completion bash)\n"
                                          "COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); _llamapp\n"
                                          "printf '%s\\n' \"${COMPREPLY[@]}\"\n";
    const std::string bin = llamapp::test::binary("llamapp").string();
    const auto bash = [&](const std::string& words) {
        return llamapp::test::run_command("cd " + dir.path().string() + " && LLAMAPP=" + bin +
                                          " bash complete.sh " + words)
            .out;
    };
    EXPECT_EQ(bash("llamapp ser"), "serve\n");
    EXPECT_EQ(bash("llamapp serve --por"), "--port\n");
    EXPECT_EQ(bash("llamapp run --reasoning o"), "on\noff\n");
    EXPECT_EQ(bash("llamapp run -m mo"), "model.gguf\n");
    EXPECT_EQ(bash("llamapp run --temp ''"), "\n");  // a number: nothing to offer
    EXPECT_NE(bash("llamapp cache ''").find("prune\n"), std::string::npos);
    EXPECT_NE(bash("llamapp show --").find("--template\n"), std::string::npos);

    CliRun fish = llamapp::test::run_command(
        "fish -c '" + bin + " completion fish | source; complete -C \"llamapp ser\"; " +
        "complete -C \"llamapp run --reasoning \"'");
    EXPECT_NE(fish.out.find("serve\t"), std::string::npos) << fish.out;
    EXPECT_NE(fish.out.find("\nauto\t"), std::string::npos) << fish.out;
    CliRun zsh = llamapp::test::run_command(
        "zsh -c 'autoload -U compinit && compinit -u && source <(" + bin +
        " completion zsh) && (( $+functions[_llamapp] )) && echo loaded'");
    EXPECT_EQ(zsh.out, "loaded\n");
    CliRun bad = run("completion tcsh");
    EXPECT_EQ(bad.status, 2) << bad.out;
}

// A binary copied away from the build still finds the demo model the build wrote.
TEST(Cli, ACopiedBinaryFindsTheDemoModel) {
    llamapp::test::TempDir dir;
    const auto copy = dir.path() / "bin" / "llamapp";
    std::filesystem::create_directories(copy.parent_path());
    std::filesystem::copy_file(llamapp::test::binary("llamapp"), copy);
    auto r = llamapp::test::run_command(copy.string() + " run -p hi -n 2 2>&1");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("using the demo model"), std::string::npos) << r.out;
}

TEST(Cli, FailedLoadIsExactlyOneLine) {
    CliRun r = run("run -m " + llamapp::test::shared_model("vocab/ggml-vocab-phi-3.gguf").string() +
                   " -p hi");
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    CliRun info = run("info --vocab-only -m " +
                      llamapp::test::shared_model("vocab/ggml-vocab-phi-3.gguf").string());
    EXPECT_EQ(info.status, 0) << info.out;
    EXPECT_NE(info.out.find("phi3"), std::string::npos) << info.out;
}

TEST(Cli, VersionNamesThePinnedLlamaCpp) {
    CliRun r = run("--version", false);
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("de3ff81"), std::string::npos) << r.out;
}
