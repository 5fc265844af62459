// The OpenAI-compatible server inside an application: the application owns the model, the
// engine and the server, and decides when to stop (here: when its standard input closes).
//   embedded_server MODEL.gguf [PORT]      (PORT 0 or absent: any free port, printed)
#include <llamapp/llamapp.hpp>
#include <llamapp/server.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf [PORT]\n", argv[0]);
        return 2;
    }
    auto model = llamapp::Model::load(argv[1]);
    if (!model) {
        std::fprintf(stderr, "error: %s\n", model.error().describe().c_str());
        return 1;
    }
    llamapp::EngineOptions engine_options;
    engine_options.context.n_ctx = 2048;
    auto engine = llamapp::Engine::create(*model, engine_options);
    if (!engine) {
        std::fprintf(stderr, "error: %s\n", engine.error().describe().c_str());
        return 1;
    }
    llamapp::ServerOptions server_options;
    server_options.port = argc > 2 ? std::atoi(argv[2]) : 0;
    server_options.model_id = "embedded";
    auto server = llamapp::Server::create(*model, *engine, nullptr, server_options);
    if (!server) {
        std::fprintf(stderr, "error: %s\n", server.error().describe().c_str());
        return 1;
    }
    if (auto bound = (*server)->bind(); !bound) {
        std::fprintf(stderr, "error: %s\n", bound.error().describe().c_str());
        return 1;
    }
    std::printf("listening on http://127.0.0.1:%d/v1\n", (*server)->port());
    std::fflush(stdout);
    // The application's own shutdown signal: end of input. drain() lets requests in flight
    // finish, then listen() returns.
    std::thread watcher([&] {
        std::string line;
        while (std::getline(std::cin, line)) {
        }
        (*server)->drain();
    });
    auto served = (*server)->listen();
    watcher.join();
    if (!served) {
        std::fprintf(stderr, "error: %s\n", served.error().describe().c_str());
        return 1;
    }
    std::printf("stopped\n");
    return 0;
}
