// Streaming: print each piece of text as it is generated, and stop early from the callback.
//   stream MODEL.gguf [PROMPT]
#include <llamapp/llamapp.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf [PROMPT]\n", argv[0]);
        return 2;
    }
    auto model = llamapp::Model::load(argv[1]);
    if (!model) {
        std::fprintf(stderr, "error: %s\n", model.error().describe().c_str());
        return 1;
    }
    auto context = llamapp::Context::create(*model);
    if (!context) {
        std::fprintf(stderr, "error: %s\n", context.error().describe().c_str());
        return 1;
    }
    llamapp::GenerateOptions options;
    options.max_tokens = 64;
    // Pieces arrive as tokens are sampled; returning false stops the generation (a UI's stop
    // button): here after the first full stop.
    auto on_piece = [](const llamapp::StreamPiece& piece) {
        std::fputs(piece.text.c_str(), stdout);
        std::fflush(stdout);
        return piece.text.find('.') == std::string::npos;
    };
    auto reply = context->stream(argc > 2 ? argv[2] : "Once upon a time", options, on_piece);
    if (!reply) {
        std::fprintf(stderr, "\nerror: %s\n", reply.error().describe().c_str());
        return 1;
    }
    std::printf("\n");
    std::fprintf(stderr, "finished: %s after %d tokens\n",
                 std::string(llamapp::to_string(reply->finish_reason)).c_str(),
                 reply->usage.completion_tokens);
    return 0;
}
