// Several models in one process: estimates, loads and unloads beside serving, the budget,
// keep-alive.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <future>

#include <llama.h>

#include "support/engine_helpers.hpp"
#include "support/fake_hub.hpp"
#include "support/temp_dir.hpp"

namespace llamapp::test {
namespace {

using namespace std::chrono_literals;

EngineOptions small_engine() {
    EngineOptions o;
    o.context.n_ctx = 256;
    o.context.n_seq_max = 2;
    o.context.n_threads = 1;
    return o;
}

ModelSpec spec(std::string id, std::filesystem::path path) {
    ModelSpec s;
    s.id = std::move(id);
    s.path = std::move(path);
    s.engine = small_engine();
    return s;
}

std::string greedy_text(const ModelLease& lease, const std::string& prompt, int tokens = 12) {
    auto h = lease.engine().submit(prompt, request({}, tokens));
    if (!h) throw std::runtime_error(h.error().describe());
    return drain(*h).text;
}

ModelStatus status_of(const ModelManager& m, const std::string& id) {
    auto l = m.find(id);
    return l ? l->status : ModelStatus::failed;
}

TEST(Footprint, TheEstimateComesFromANoAllocationLoadAndSplitsWeightsContextAndCompute) {
    set_log_level(LogLevel::none);
    const auto path = generated_model("llama-tiny.gguf");
    ContextOptions small;
    small.n_ctx = 256;
    ContextOptions large = small;
    large.n_ctx = 2048;
    auto a = estimate_footprint(path, {}, small);
    auto b = estimate_footprint(path, {}, large);
    ASSERT_TRUE(a && b) << (a ? b.error() : a.error()).describe();
    ASSERT_FALSE(a->devices.empty());
    EXPECT_EQ(a->devices.back().device, host_device);
    const auto model = load_test_model(path);
    // Summed over the devices: the layers are on a GPU where the build has one.
    auto sum = [](const Footprint& f, std::uint64_t DeviceFootprint::*part) {
        std::uint64_t bytes = 0;
        for (const auto& d : f.devices) bytes += d.*part;
        return static_cast<double>(bytes);
    };
    // The weights are the file's tensors, whatever the context.
    const auto tensor_bytes = static_cast<double>(model.info().tensor_bytes);
    EXPECT_NEAR(sum(*a, &DeviceFootprint::weights), tensor_bytes, 0.05 * tensor_bytes);
    EXPECT_EQ(sum(*a, &DeviceFootprint::weights), sum(*b, &DeviceFootprint::weights));
    EXPECT_GT(sum(*a, &DeviceFootprint::context), 0.0);
    EXPECT_GT(sum(*a, &DeviceFootprint::compute), 0.0);
    // The KV cache grows with the context, eightfold here.
    EXPECT_NEAR(sum(*b, &DeviceFootprint::context), 8.0 * sum(*a, &DeviceFootprint::context),
                0.01 * sum(*b, &DeviceFootprint::context));

    TempDir dir;
    std::ofstream(dir / "not.gguf") << "plain text, not a model";
    auto bad = estimate_footprint(dir / "not.gguf", {}, small);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, ErrorCode::invalid_model_file);
    EXPECT_EQ(estimate_footprint(dir / "missing.gguf", {}, small).error().code,
              ErrorCode::file_not_found);
    ContextOptions wrong = small;
    wrong.n_ubatch = 4096;
    EXPECT_EQ(estimate_footprint(path, {}, wrong).error().code, ErrorCode::invalid_argument);
}

// common's probe load used to swap llama.cpp's process-wide log callback for a wrapper while it
// ran: a race with every thread logging meanwhile (two plain stores, the wrapper's data on the
// estimating thread's stack). Under ThreadSanitizer the load beside it makes that a report.
TEST(Footprint, EstimatesLeaveLlamaCppsLoggerAloneWhileAnotherThreadLoads) {
    ensure_backend();
    ggml_log_callback bridge = nullptr;
    void* bridge_data = nullptr;
    llama_log_get(&bridge, &bridge_data);
    std::atomic<int> lines{0}, swapped{0};
    set_log_level(LogLevel::debug);
    set_log_sink([&](LogLevel, std::string_view) {
        ggml_log_callback now = nullptr;
        void* now_data = nullptr;
        llama_log_get(&now, &now_data);
        ++lines;
        if (now != bridge || now_data != bridge_data) ++swapped;
    });
    const auto path = generated_model("llama-tiny.gguf");
    ContextOptions context;
    context.n_ctx = 256;
    auto loading = std::async(std::launch::async, [&] {
        for (int i = 0; i < 3; ++i) EXPECT_TRUE(Model::load(shared_model("stories260K.gguf")));
    });
    for (int i = 0; i < 3; ++i) {
        auto f = estimate_footprint(path, {}, context);
        EXPECT_TRUE(f) << f.error().describe();
    }
    loading.get();
    set_log_sink({});
    set_log_level(LogLevel::none);
    EXPECT_GT(lines.load(), 100);  // the probe and the loads did log, through the bridge
    EXPECT_EQ(swapped.load(), 0);
}

TEST(ModelManager, TwoModelsServeSideBySideAndEachAnswersAsItDoesAlone) {
    auto m = quiet_manager();
    ASSERT_TRUE(m->add(spec("stories", shared_model("stories260K.gguf"))));
    ModelSpec llama = spec("llama", generated_model("llama-tiny.gguf"));
    llama.aliases = {"tiny"};
    ASSERT_TRUE(m->add(llama));
    EXPECT_EQ(m->add(spec("tiny", shared_model("stories260K.gguf"))).error().code,
              ErrorCode::already_exists);
    EXPECT_EQ(m->add(spec("bad id!", shared_model("stories260K.gguf"))).error().code,
              ErrorCode::invalid_argument);

    std::string solo_stories, solo_llama;
    {
        auto a = m->acquire("stories");
        ASSERT_TRUE(a) << a.error().describe();
        solo_stories = greedy_text(*a, "Once upon a time");
        EXPECT_EQ(a->id(), "stories");
        EXPECT_EQ(m->load("stories").error().code, ErrorCode::already_exists);
    }
    {
        auto b = m->acquire("tiny");  // an alias
        ASSERT_TRUE(b) << b.error().describe();
        EXPECT_EQ(b->id(), "llama");
        solo_llama = greedy_text(*b, "Once upon a time");
    }
    auto a = m->acquire("");  // the default: the first added
    auto b = m->acquire("llama");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->id(), "stories");
    auto ta = std::async(std::launch::async, [&] { return greedy_text(*a, "Once upon a time"); });
    auto tb = std::async(std::launch::async, [&] { return greedy_text(*b, "Once upon a time"); });
    EXPECT_EQ(ta.get(), solo_stories);
    EXPECT_EQ(tb.get(), solo_llama);

    const auto listed = m->list();
    ASSERT_EQ(listed.size(), 2u);
    for (const auto& l : listed) {
        SCOPED_TRACE(l.id);
        EXPECT_EQ(l.status, ModelStatus::ready);
        EXPECT_EQ(l.active_requests, 1);
        EXPECT_TRUE(l.capabilities.generate);
        ASSERT_TRUE(l.footprint);
        EXPECT_GT(l.footprint->on(host_device), 0u);
        EXPECT_EQ(l.n_ctx, 256);
    }
    EXPECT_EQ(m->acquire("nope").error().code, ErrorCode::not_found);
}

TEST(ModelManager, UnloadFreesTheModelAndTheNextRequestLoadsItAgain) {
    auto m = quiet_manager();
    ASSERT_TRUE(m->add(spec("stories", shared_model("stories260K.gguf"))));
    EXPECT_EQ(m->unload("stories").error().code, ErrorCode::busy);  // not loaded
    std::string first;
    {
        auto lease = m->acquire("stories");
        ASSERT_TRUE(lease);
        first = greedy_text(*lease, "The cat");
    }
    ASSERT_TRUE(m->unload("stories"));
    EXPECT_EQ(status_of(*m, "stories"), ModelStatus::unloaded);
    auto again = m->acquire("stories");
    ASSERT_TRUE(again) << again.error().describe();
    EXPECT_EQ(greedy_text(*again, "The cat"), first);
}

TEST(ModelManager, UnloadCancelsWhatStillRunsAfterTheGracePeriod) {
    auto m = quiet_manager();
    ASSERT_TRUE(m->add(spec("stories", shared_model("stories260K.gguf"))));
    auto lease = m->acquire("stories");
    ASSERT_TRUE(lease);
    auto handle = lease->engine().submit("Once upon a time", request({}, 200));
    ASSERT_TRUE(handle);
    auto unloading = std::async(std::launch::async, [&] { return m->unload("stories", 0ms); });
    ASSERT_TRUE(eventually([&] { return status_of(*m, "stories") == ModelStatus::unloading; }));
    const Drained d = drain(*handle);  // ended by the unload, long before 200 tokens
    EXPECT_LT(d.completion.generation.usage.completion_tokens, 200);
    // The lease still keeps the memory: the unload waits for it.
    EXPECT_EQ(unloading.wait_for(50ms), std::future_status::timeout);
    { ModelLease gone = std::move(*lease); }
    EXPECT_TRUE(unloading.get());
    EXPECT_EQ(status_of(*m, "stories"), ModelStatus::unloaded);
}

// A request that took its lease just before an unload began (the server between choosing the
// model and submitting) is served within the grace period, not refused as shutting down.
TEST(ModelManager, ALeaseTakenBeforeAnUnloadCanStillSubmitDuringTheGrace) {
    auto m = quiet_manager();
    ASSERT_TRUE(m->add(spec("stories", shared_model("stories260K.gguf"))));
    std::future<Result<void>> unloading;
    std::optional<ModelLease> lease;  // declared last: gone first, so a failure cannot hang
    lease = *m->acquire("stories");
    const std::string expected = greedy_text(*lease, "The cat");
    unloading = std::async(std::launch::async, [&] { return m->unload("stories", 60s); });
    ASSERT_TRUE(eventually([&] { return status_of(*m, "stories") == ModelStatus::unloading; }));
    auto h = lease->engine().submit("The cat", request({}, 12));
    ASSERT_TRUE(h) << h.error().describe();
    EXPECT_EQ(drain(*h).text, expected);
    lease.reset();
    EXPECT_TRUE(unloading.get());  // at once, not after the grace: nothing holds the model
    EXPECT_EQ(status_of(*m, "stories"), ModelStatus::unloaded);
}

TEST(ModelManager, UnloadFreesTheModelsShareOfTheKvStoresRamTier) {
    KvStoreOptions so;
    so.policy.min_tokens = 8;
    auto store = KvStore::open(so);
    ASSERT_TRUE(store);
    ModelManagerOptions o;
    o.kv_store = *store;
    auto m = quiet_manager(o);
    ASSERT_TRUE(m->add(spec("stories", shared_model("stories260K.gguf"))));
    ASSERT_TRUE(m->add(spec("llama", generated_model("llama-tiny.gguf"))));
    for (const char* id : {"stories", "llama"}) {
        auto lease = m->acquire(id);
        ASSERT_TRUE(lease);
        greedy_text(*lease, "Once upon a time there was a little girl", 16);
    }
    auto ram_entries = [&] { return (*store)->stats().tiers.front().entries; };
    ASSERT_TRUE(eventually([&] { return ram_entries() >= 2; })) << ram_entries();
    const std::size_t both = ram_entries();
    ASSERT_TRUE(m->unload("stories"));
    const std::size_t left = ram_entries();
    EXPECT_LT(left, both);
    EXPECT_GT(left, 0u);  // the other model's entries stay
    ASSERT_TRUE(m->unload("llama"));
    EXPECT_EQ(ram_entries(), 0u);
}

TEST(ModelManager, AFileThatIsNotAModelIsListedAsFailedAndTheOthersServe) {
    TempDir dir;
    std::ofstream(dir / "broken.gguf") << "GGUF but not really";
    auto m = quiet_manager();
    ASSERT_TRUE(m->add(spec("broken", dir / "broken.gguf")));
    ASSERT_TRUE(m->add(spec("stories", shared_model("stories260K.gguf"))));
    auto listed = m->find("broken");
    ASSERT_TRUE(listed);
    EXPECT_EQ(listed->status, ModelStatus::failed);
    ASSERT_TRUE(listed->error);
    EXPECT_EQ(listed->error->code, ErrorCode::invalid_model_file);
    auto refused = m->acquire("broken");
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::model_unavailable);
    EXPECT_NE(refused.error().message.find("failed to load"), std::string::npos);
    auto ok = m->acquire("stories");
    ASSERT_TRUE(ok);
    EXPECT_FALSE(greedy_text(*ok, "Hello").empty());
}

TEST(ModelManager, ALoadThatDoesNotFitFailsAtOnceOrUnloadsIdleModelsWhenAllowed) {
    const auto stories = shared_model("stories260K.gguf");
    const auto llama = generated_model("llama-tiny.gguf");
    // The budget of the device that holds most of the model: RAM on the CPU, the GPU where
    // the build has one (the Vulkan job), so that both budgets are tested.
    std::string device;
    std::uint64_t need = 0;
    {
        auto probe = quiet_manager();
        ASSERT_TRUE(probe->add(spec("llama", llama)));
        ASSERT_TRUE(probe->load("llama"));
        auto listed = probe->find("llama");
        ASSERT_TRUE(listed && listed->footprint);
        for (const auto& d : listed->footprint->devices) {
            if (d.total() <= need) continue;
            need = d.total();
            device = d.device;
        }
    }
    ModelManagerOptions tight;
    tight.memory_budget[device] = need / 2;
    auto m = quiet_manager(tight);
    ASSERT_TRUE(m->add(spec("llama", llama)));
    auto refused = m->load("llama");
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::insufficient_memory);
    EXPECT_NE(refused.error().message.find("on " + device), std::string::npos);
    EXPECT_NE(refused.error().context.find(std::to_string(need) + " bytes"), std::string::npos)
        << refused.error().context;
    EXPECT_EQ(status_of(*m, "llama"), ModelStatus::unloaded);
    EXPECT_EQ(m->acquire("llama").error().code, ErrorCode::insufficient_memory);

    // Room for one of the two at a time.
    ModelManagerOptions one;
    one.memory_budget[device] = need + need / 2;
    one.unload_idle_to_fit = true;
    m = quiet_manager(one);
    ASSERT_TRUE(m->add(spec("llama", llama)));
    ASSERT_TRUE(m->add(spec("llama2", llama)));
    {
        auto busy = m->acquire("llama");
        ASSERT_TRUE(busy);
        auto no_room = m->acquire("llama2");  // the other is in use: nothing may go
        ASSERT_FALSE(no_room);
        EXPECT_EQ(no_room.error().code, ErrorCode::insufficient_memory);
    }
    auto second = m->acquire("llama2");  // now idle: unloaded to make room
    ASSERT_TRUE(second) << second.error().describe();
    EXPECT_EQ(status_of(*m, "llama"), ModelStatus::unloaded);
    bool budgeted = false;
    for (const auto& b : m->budgets()) {
        if (b.device != device) continue;
        EXPECT_EQ(b.reserved, need);
        budgeted = true;
    }
    EXPECT_TRUE(budgeted) << device;
}

// llama-server's --no-models-autoload: a request is refused until the operator loads the model.
TEST(ModelManager, WithoutLoadOnRequestOnlyALoadLoads) {
    ModelManagerOptions o;
    o.load_on_request = false;
    auto m = quiet_manager(o);
    ASSERT_TRUE(m->add(spec("stories", shared_model("stories260K.gguf"))));
    auto refused = m->acquire("stories");
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::unsupported_operation);
    EXPECT_EQ(status_of(*m, "stories"), ModelStatus::unloaded);
    ASSERT_TRUE(m->load("stories"));
    auto lease = m->acquire("stories");  // waits for the load it started
    ASSERT_TRUE(lease) << lease.error().describe();
    EXPECT_FALSE(greedy_text(*lease, "The cat", 2).empty());
}

TEST(ModelManager, MaxModelsCapsWhatIsResident) {
    ModelManagerOptions o;
    o.max_models = 1;
    auto m = quiet_manager(o);
    ASSERT_TRUE(m->add(spec("a", shared_model("stories260K.gguf"))));
    ASSERT_TRUE(m->add(spec("b", shared_model("stories260K.gguf"))));
    auto a = m->acquire("a");
    ASSERT_TRUE(a);
    EXPECT_EQ(m->load("b").error().code, ErrorCode::queue_full);
}

TEST(ModelManager, AnIdleModelIsUnloadedAfterItsKeepAliveAndARequestCanSetIt) {
    auto m = quiet_manager();
    ModelSpec s = spec("stories", shared_model("stories260K.gguf"));
    ASSERT_TRUE(m->add(s));
    {
        auto lease = m->acquire("stories", std::chrono::steady_clock::time_point::max(), 0ms);
        ASSERT_TRUE(lease);
        EXPECT_EQ(status_of(*m, "stories"), ModelStatus::ready);  // in use: kept
    }
    EXPECT_TRUE(eventually([&] { return status_of(*m, "stories") == ModelStatus::unloaded; }));
    {
        auto lease = m->acquire("stories", std::chrono::steady_clock::time_point::max(), 1h);
        ASSERT_TRUE(lease);
    }
    auto listed = m->find("stories");
    ASSERT_TRUE(listed);
    EXPECT_EQ(listed->status, ModelStatus::ready);
    EXPECT_EQ(listed->keep_alive, 1h);
    ASSERT_TRUE(listed->expires_at);
    EXPECT_GT(*listed->expires_at, std::chrono::system_clock::now() + 59min);
    // A use that does not say keeps the model's own idle time again, as Ollama's requests do.
    { ASSERT_TRUE(m->acquire("stories")); }
    EXPECT_NE(m->find("stories")->keep_alive, 1h);
}

// Reads (health checks, /props) take leases only of a ready model and never restart its
// keep-alive: polling does not keep an idle model awake, nor wake it.
TEST(ModelManager, ReadsOfAReadyModelDoNotKeepItAwake) {
    auto m = quiet_manager();
    ModelSpec s = spec("stories", shared_model("stories260K.gguf"));
    ASSERT_TRUE(m->add(s));
    ASSERT_TRUE(m->acquire("stories", std::chrono::steady_clock::time_point::max(), 300ms));
    EXPECT_TRUE(eventually([&] {
        auto peek = m->acquire_if_ready("stories");  // as often as the poll runs
        return !peek && status_of(*m, "stories") == ModelStatus::unloaded;
    }));
    EXPECT_FALSE(m->acquire_if_ready("stories"));  // nor does a read load it again
    EXPECT_EQ(status_of(*m, "stories"), ModelStatus::unloaded);
}

TEST(ModelManager, RequestsForAModelThatIsLoadingWaitForItWithADeadline) {
    hub_cache_dir();
    FakeHub hub;
    ::setenv("MODEL_ENDPOINT", hub.endpoint().c_str(), 1);
    hub.add_file("test/waits", "stories260K-Q8_0.gguf", shared_model("stories260K.gguf"));
    auto m = quiet_manager();
    ModelSpec s = spec("stories", {});
    s.hub = HubRef{"test/waits", "", "Q8_0"};
    s.source = "hub";
    ASSERT_TRUE(m->add(s));
    // The load pulls the model first, and the pull's download stops half way until released:
    // the load is certainly still in flight while the deadline passes.
    hub.hold_next_transfer();
    ASSERT_TRUE(m->load("stories"));
    ASSERT_TRUE(eventually([&] { return hub.transfer_held(); }, 60s));
    auto late = m->acquire("stories", std::chrono::steady_clock::now() + 50ms);
    ASSERT_FALSE(late) << "a lease on a model whose load is held";
    EXPECT_EQ(late.error().code, ErrorCode::timeout);
    EXPECT_EQ(status_of(*m, "stories"), ModelStatus::loading);

    // Without a deadline a request waits for the load and then has the model.
    auto waiter = std::async(std::launch::async, [&] { return m->acquire("stories"); });
    hub.release_transfer();
    auto lease = waiter.get();
    ASSERT_TRUE(lease) << lease.error().describe();
    EXPECT_FALSE(greedy_text(*lease, "Hi", 4).empty());
    EXPECT_EQ(status_of(*m, "stories"), ModelStatus::ready);
}

}  // namespace
}  // namespace llamapp::test
