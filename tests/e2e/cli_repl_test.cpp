// The chat REPL of the real binary in a pseudo-terminal (tmux): line editing and history, Tab
// completion of commands, Ctrl-C at the prompt and during a reply, thinking shown dimmed, and
// the exit status.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>

#include "support/command.hpp"
#include "support/eventually.hpp"
#include "support/paths.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace std::chrono_literals;
using llamapp::test::run_command;

std::string quoted(const std::string& text) {
    std::string out = "'";
    for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != text.npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// One command in a tmux window of its own server (a socket in a temporary directory), kept
// on screen after it exits so that its status can be read.
class Terminal {
  public:
    explicit Terminal(const std::string& command) {
        const std::string conf = (dir_ / "tmux.conf").string();
        std::ofstream(conf) << "set -g remain-on-exit on\nset -g history-limit 5000\n";
        tmux_ = "env -u TMUX tmux -S " + (dir_ / "socket").string() + " -f " + conf + " ";
        // The status goes to a file: tmux can mark a pane dead (its terminal closed) before it
        // has reaped the process, and then never shows the status.
        status_file_ = (dir_ / "status").string();
        run_command(tmux_ + "new-session -d -x 160 -y 50 " +
                    quoted(command + "; echo $? > " + status_file_ + ".part && mv " + status_file_ +
                           ".part " + status_file_));
    }
    ~Terminal() { run_command(tmux_ + "kill-server 2>/dev/null"); }

    void keys(const std::string& keys) { run_command(tmux_ + "send-keys " + keys); }
    void type(const std::string& text) { run_command(tmux_ + "send-keys -l " + quoted(text)); }
    // The whole scrollback, with the escapes of its colours and attributes when asked.
    std::string screen(bool escapes = false) const {
        return run_command(tmux_ + "capture-pane -p -J -S - " + (escapes ? "-e" : "")).out;
    }
    bool shows(const std::string& text, std::size_t times = 1,
               std::chrono::milliseconds timeout = 60s) const {
        return llamapp::test::eventually([&] { return count(screen(), text) >= times; }, timeout,
                                         20ms);
    }
    // The exit status once the command has ended; -1 if it does not within the timeout.
    int exit_status(std::chrono::milliseconds timeout = 60s) const {
        std::string status;
        const bool ended = llamapp::test::eventually(
            [&] {
                std::ifstream file(status_file_);
                return static_cast<bool>(file >> status);
            },
            timeout, 20ms);
        return ended ? std::stoi(status) : -1;
    }

  private:
    llamapp::test::TempDir dir_;
    std::string tmux_;
    std::string status_file_;
};

std::string qwen() {
    return llamapp::test::generated_model("qwen3-tiny.gguf").string();
}

std::string llamapp_command(const llamapp::test::TempDir& data, const std::string& args) {
    return "XDG_DATA_HOME=" + data.path().string() + " " +
           llamapp::test::binary("llamapp").string() + " " + args;
}

}  // namespace

// Tab completes a command; Up recalls the last message and the engine reuses the first turn;
// Ctrl-C at the prompt does not end the program but says how to; Ctrl-C during a reply stops
// it and the prompt comes back; /bye leaves with status 0.
TEST(CliRepl, EditsRecallsInterruptsAndLeaves) {
    llamapp::test::TempDir data;
    Terminal t(llamapp_command(data, "run " + qwen() + " -c 32768 -n 8 --temp 0 --ignore-eos"));
    ASSERT_TRUE(t.shows("Send a message")) << t.screen();
    t.type("/he");
    t.keys("Tab Enter");
    ASSERT_TRUE(t.shows("/save NAME, /load NAME")) << t.screen();
    t.type("hello");
    t.keys("Enter");
    ASSERT_TRUE(t.shows("prompt tokens")) << t.screen();
    t.keys("Up");
    ASSERT_TRUE(t.shows(">>> hello", 2)) << t.screen();
    t.keys("Enter");
    ASSERT_TRUE(t.shows("prompt tokens", 2)) << t.screen();
    EXPECT_NE(t.screen().find(" cached (same_slot"), std::string::npos) << t.screen();

    t.keys("C-c");
    ASSERT_TRUE(t.shows("Use Ctrl-D or /bye to leave.")) << t.screen();
    t.type("/set num_predict -1");
    t.keys("Enter");
    ASSERT_TRUE(t.shows("Set 'num_predict' to '-1'.")) << t.screen();
    t.type("go on");
    t.keys("Enter");
    // Long enough (until a 32768-token context is full) to be stopped once it has begun.
    ASSERT_TRUE(llamapp::test::eventually(
        [&] {
            const std::string s = t.screen();
            const std::size_t at = s.rfind(">>> go on");
            return at != s.npos && s.size() > at + 200;
        },
        60s, 20ms))
        << t.screen();
    t.keys("C-c");
    ASSERT_TRUE(t.shows("cancelled]")) << t.screen();
    // The prompt after the stopped reply: the seventh.
    ASSERT_TRUE(t.shows(">>> ", 7)) << t.screen();
    t.type("/bye");
    t.keys("Enter");
    EXPECT_EQ(t.exit_status(), 0) << t.screen();
}

// A reply's thinking is dimmed and apart from its answer on a terminal (QwQ's template opens the
// thinking and the budget closes it); Ctrl-D at an empty prompt leaves with status 0.
TEST(CliRepl, ThinkingIsDimmedAndCtrlDLeaves) {
    llamapp::test::TempDir data;
    const std::string qwq =
        llamapp::test::llama_source("models/templates/Qwen-QwQ-32B.jinja").string();
    Terminal t(llamapp_command(data, "run " + qwen() + " -n 32 --temp 0 --reasoning-budget 4 " +
                                         "--reasoning-budget-message ' Time to answer.' " +
                                         "--chat-template-file " + qwq));
    ASSERT_TRUE(t.shows("Send a message")) << t.screen();
    t.type("hi");
    t.keys("Enter");
    ASSERT_TRUE(t.shows("prompt tokens")) << t.screen();
    const std::string shown = t.screen(true);
    const std::size_t dim = shown.find("\x1b[2m");
    ASSERT_NE(dim, std::string::npos) << shown;
    EXPECT_NE(shown.find("Time to answer.", dim), std::string::npos) << shown;
    t.keys("C-d");
    EXPECT_EQ(t.exit_status(), 0) << t.screen();
}
