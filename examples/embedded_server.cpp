// The OpenAI-compatible server inside an application: the application owns the model manager
// and the server, and decides when to stop (here: when its standard input closes).
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
    auto models = llamapp::ModelManager::create();
    if (!models) {
        std::fprintf(stderr, "error: %s\n", models.error().describe().c_str());
        return 1;
    }
    llamapp::ModelSpec spec;
    spec.id = "embedded";
    spec.path = argv[1];
    spec.engine.context.n_ctx = 2048;
    if (auto added = (*models)->add(spec); !added) {
        std::fprintf(stderr, "error: %s\n", added.error().describe().c_str());
        return 1;
    }
    // Loaded now rather than by the first request (which would load it too).
    if (auto ready = (*models)->acquire("embedded"); !ready) {
        std::fprintf(stderr, "error: %s\n", ready.error().describe().c_str());
        return 1;
    }
    llamapp::ServerOptions server_options;
    server_options.port = argc > 2 ? std::atoi(argv[2]) : 0;
    auto server = llamapp::Server::create(**models, server_options);
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
