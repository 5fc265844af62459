// `llamapp info`: model metadata as a readable table (or JSON).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "options.hpp"

namespace llamapp::cli {

namespace {

nlohmann::json info_json(const ModelInfo& i, const std::string& sha, bool all_metadata) {
    const SpecialTokens& s = i.special;
    nlohmann::json out = {
        {"path", i.path.string()},
        {"architecture", i.architecture},
        {"name", i.name},
        {"description", i.description},
        {"n_params", i.n_params},
        {"file_size", i.file_size},
        {"n_ctx_train", i.n_ctx_train},
        {"n_embd", i.n_embd},
        {"n_embd_out", i.n_embd_out},
        {"n_layer", i.n_layer},
        {"n_head", i.n_head},
        {"n_head_kv", i.n_head_kv},
        {"n_vocab", i.n_vocab},
        {"sliding_window", i.sliding_window},
        {"recurrent", i.is_recurrent},
        {"hybrid", i.is_hybrid},
        {"has_encoder", i.has_encoder},
        {"has_chat_template", i.chat_template.has_value()},
        {"special_tokens", {{"bos", s.bos}, {"eos", s.eos}, {"eot", s.eot}, {"pad", s.pad}}},
    };
    if (!sha.empty()) out["sha256"] = sha;
    if (all_metadata) out["metadata"] = i.metadata;
    return out;
}

void print_info(const ModelInfo& i, const std::string& sha, bool all_metadata) {
    const SpecialTokens& s = i.special;
    auto row = [](const char* key, const std::string& value) {
        std::printf("%-18s %s\n", key, value.c_str());
    };
    row("path", i.path.string());
    row("architecture", i.architecture);
    if (!i.name.empty()) row("name", i.name);
    row("description", i.description);
    row("parameters", std::to_string(i.n_params));
    row("file size", human_bytes(i.file_size));
    row("context (train)", std::to_string(i.n_ctx_train));
    row("embedding", std::to_string(i.n_embd) + " (output " + std::to_string(i.n_embd_out) + ")");
    row("layers", std::to_string(i.n_layer));
    row("heads", std::to_string(i.n_head) + " (kv " + std::to_string(i.n_head_kv) + ")");
    row("vocabulary", std::to_string(i.n_vocab));
    row("sliding window", i.sliding_window ? std::to_string(i.sliding_window) : "none");
    row("family", i.is_hybrid ? "hybrid" : i.is_recurrent ? "recurrent" : "attention");
    row("encoder", i.has_encoder ? "yes" : "no");
    row("chat template", i.chat_template ? "yes" : "no");
    row("special tokens", "bos " + std::to_string(s.bos) + ", eos " + std::to_string(s.eos) +
                              ", eot " + std::to_string(s.eot) + ", pad " + std::to_string(s.pad));
    if (!sha.empty()) row("sha256", sha);
    if (all_metadata) {
        std::printf("\nmetadata:\n");
        for (const auto& [k, v] : i.metadata) std::printf("  %-40s %s\n", k.c_str(), v.c_str());
    }
}

}  // namespace

Runner add_info(CLI::App& app) {
    struct Flags {
        CommonFlags common;
        bool json = false;
        bool all_metadata = false;
        bool fingerprint = false;
        bool vocab_only = false;
    };
    auto flags = std::make_shared<Flags>();
    CLI::App* cmd = app.add_subcommand("info", "show a model's metadata");
    add_common(*cmd, flags->common);
    cmd->add_flag("--json", flags->json, "print JSON");
    cmd->add_flag("--metadata", flags->all_metadata, "also list every GGUF key/value");
    cmd->add_flag("--sha256", flags->fingerprint, "compute the file's SHA-256 fingerprint");
    cmd->add_flag("--vocab-only", flags->vocab_only,
                  "read only metadata and vocabulary (no weights)");
    return [flags]() -> int {
        auto model = load_model(flags->common, flags->vocab_only);
        if (!model) return report(model.error());
        const ModelInfo& i = model->info();
        std::string sha;
        if (flags->fingerprint) {
            auto fp = model->fingerprint();
            if (!fp) return report(fp.error());
            sha = *fp;
        }
        if (flags->json)
            std::cout << info_json(i, sha, flags->all_metadata).dump(2) << "\n";
        else
            print_info(i, sha, flags->all_metadata);
        return 0;
    };
}

}  // namespace llamapp::cli
