// The KV hand-over without the services around it: a prefill engine streams each layer's state
// (StateStreamer, StreamPrefill) into a decode worker's reservation (KvReceiver) over the
// in-process agent and real UCX (tcp, shared memory); the decode engine continues from it. The
// restored state must be the colocated one bit for bit (even with a different block size on
// each side), the tokens and DSpark counters the colocated ones, and bad deliveries refused.
// The "+mirror" variants run engines whose KV pools are reached through their backend's copies,
// as a GPU's are (ModelOptions::place_weights): the rows travel through the pools' host mirrors.
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/in_process_agent.h"
#include "common/transport/ucx_agent.h"
#include "decode_worker/kv_receiver.h"
#include "engine/cache/staging_layout.h"
#include "engine/serving/serving_engine.h"
#include "engine/serving/speculation/spec_settings.h"
#include "gtest/gtest.h"
#include "prefill_worker/prefill_service.h"
#include "prometheus/registry.h"
#include "tests/engine/serving/request_collector.h"

namespace pdspark {
namespace {

using serving::RequestSpec;

const std::string kModel = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";

// Prefill and decode engines as the workers build them; every engine chunks prompts the same
// way (128 tokens per step), so the colocated reference computes exactly the same rows.
std::unique_ptr<serving::ServingEngine> Engine(int64_t block_rows, const std::string& spec_tokens,
                                               bool prefix_caching = false, bool mirror = false) {
  engine::ModelOptions mo;
  mo.show_progress = false;
  mo.place_weights = mirror;
  mo.cache_block_rows = block_rows;
  auto model = engine::Model::Load(kModel, mo).value();
  serving::ServingOptions options;
  options.max_batch_tokens = 128;
  options.enable_prefix_caching = prefix_caching;
  EXPECT_TRUE(serving::ApplySpecSettings(spec_tokens == "0" ? "none" : "dspark", spec_tokens,
                                         kModel, *model, options)
                  .ok());
  return std::make_unique<serving::ServingEngine>(std::move(model), options);
}

transport::LinkInfo Link(const serving::ServingEngine& engine, int64_t tp) {
  return {engine.model().config().Fingerprint(),
          engine::CacheManifest(engine.model().cache_layout()), tp, engine.DrafterStateWireBytes()};
}

std::vector<int32_t> Prompt(int n, int seed = 7) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 131 + seed) % 4000);
  return ids;
}

RequestSpec Spec(std::string id, std::vector<int32_t> prompt, int max_tokens) {
  RequestSpec spec;
  spec.id = std::move(id);
  spec.prompt = std::move(prompt);
  spec.sampling.temperature = 0;
  spec.sampling.max_tokens = max_tokens;
  spec.sampling.ignore_eos = true;
  return spec;
}

serving::RequestEvent RunToEnd(serving::ServingEngine& engine, RequestSpec spec) {
  serving::RequestCollector collector;
  EXPECT_TRUE(engine.Submit(std::move(spec), collector.Sink()).ok());
  serving::RequestEvent last = collector.Wait();
  last.tokens = collector.tokens();
  return last;
}

// A test parameter: the transport, and "+mirror" for pools behind their backend's copies.
bool Mirrored(const std::string& param) { return param.ends_with("+mirror"); }

std::unique_ptr<transport::TransferAgent> Agent(std::string transport) {
  if (Mirrored(transport)) transport.resize(transport.size() - std::string("+mirror").size());
  if (transport == "inprocess") return std::make_unique<transport::InProcessAgent>();
  return transport::UcxAgent::Create({transport, ""}).value();
}

// One prefill worker side and one decode worker side, each with its own agent.
class KvHandoffTest : public ::testing::TestWithParam<std::string> {
 protected:
  struct Engines {
    serving::ServingEngine* prefill = nullptr;
    serving::ServingEngine* decode = nullptr;
    serving::ServingEngine* colocated = nullptr;
  };
  static void SetUpTestSuite() {
    for (bool mirror : {false, true}) {
      Engines& e = engines_[mirror];
      e.prefill = Engine(256, "1", false, mirror).release();  // drafter only for its ring
      e.decode = Engine(16, "3", false, mirror).release();
      e.colocated = Engine(16, "3", false, mirror).release();
    }
  }
  static void TearDownTestSuite() {
    for (Engines& e : engines_) {
      delete e.prefill;
      delete e.decode;
      delete e.colocated;
    }
  }

  void SetUp() override {
    mirror_ = Mirrored(GetParam());
    prefill_ = engines_[mirror_].prefill;
    decode_ = engines_[mirror_].decode;
    colocated_ = engines_[mirror_].colocated;
    prefill_agent_ = Agent(GetParam());
    decode_agent_ = Agent(GetParam());
    metrics_ = std::make_unique<worker::KvTransferMetrics>(registry_, GetParam());
    receiver_ = MakeReceiver(std::chrono::milliseconds(0));
  }

  // A receiver for `engine`'s pool, as the decode worker builds it.
  std::unique_ptr<decode::KvReceiver> MakeReceiver(std::chrono::milliseconds late_write_grace,
                                                   serving::ServingEngine* engine = decode_) {
    decode::ReceiverOptions options;
    options.arena_bytes = 64 << 20;
    options.incarnation_id = "decode-1";
    options.link = Link(*decode_, 8);
    options.block_rows = 16;
    options.cache_layout = &decode_->model().cache_layout();
    options.lease_cache = [engine](const v1::ReserveRequest& r) {
      return engine->ReserveCache(r.prompt_tokens(), r.max_tokens());
    };
    // The rows land in the decode engine's pool (or its host mirror), registered as the decode
    // worker does.
    engine::KvPool& pool = engine->model().kv_pool();
    EXPECT_EQ(pool.on_host(), !mirror_);
    pool_region_ =
        decode_agent_
            ->RegisterMemory(pool.transfer_base(), static_cast<size_t>(pool.capacity_bytes()),
                             transport::MemoryKind::kHost)
            .value();
    options.pool_region = pool_region_.remote;
    options.page_bytes = pool.page_bytes();
    options.new_sequence = [engine] { return engine->NewSequence(); };
    options.cached_prefix = [engine](std::span<const int32_t> prompt) {
      return engine->CachedPrefix(prompt);
    };
    options.late_write_grace = late_write_grace;
    return decode::KvReceiver::Create(decode_agent_.get(), options, metrics_.get()).value();
  }

  // The engines outlive the test, the agents do not: wait until no request is left in the
  // prefill engine and no streamer holds pages for its puts. (The engine's counts alone are
  // not enough: a request moving from the queue to the batch is briefly in neither count, and
  // a cancelled one is counted until the loop reaps it.)
  void TearDown() override { ASSERT_TRUE(PrefillEngineIdle()); }

  bool PrefillEngineIdle() const {
    for (int i = 0; i < 1500; ++i) {
      const auto stats = prefill_->Stats();
      // Pages return once the streamers holding them for their puts are gone.
      if (stats.running == 0 && stats.waiting == 0 && stats.cache_bytes_in_use == 0) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  v1::ReserveResponse Reserve(int64_t tokens, uint32_t lease_ms = 30000) {
    v1::ReserveRequest request;
    request.set_prompt_tokens(static_cast<uint32_t>(tokens));
    request.set_lease_ms(lease_ms);
    return receiver_->Reserve(request).value();
  }
  // A reservation naming its prompt, as the router makes them: the decode side may hold a
  // prefix of it.
  v1::ReserveResponse Reserve(const std::vector<int32_t>& prompt) {
    v1::ReserveRequest request;
    request.set_prompt_tokens(static_cast<uint32_t>(prompt.size()));
    request.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
    return receiver_->Reserve(request).value();
  }
  static v1::TransferDescriptor Descriptor(const v1::ReserveResponse& reserved) {
    v1::TransferDescriptor descriptor;
    EXPECT_TRUE(descriptor.ParseFromString(reserved.transfer_descriptor()));
    return descriptor;
  }
  // A counter of the transfer metrics (with direction="receive" when it has that label).
  double Counter(const std::string& name) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != name) continue;
      for (const auto& m : family.metric) {
        bool received = m.label.empty();
        for (const auto& l : m.label) received |= l.name == "direction" && l.value == "receive";
        if (received) return m.counter.value;
      }
    }
    ADD_FAILURE() << "no counter " << name;
    return 0;
  }

  // Prefills on the prefill engine, streaming into the reservation; the first token.
  StatusOr<int32_t> Prefill(
      const v1::ReserveResponse& reserved, const std::vector<int32_t>& prompt,
      prefill::StreamMode mode = prefill::StreamMode::kLayerwise,
      serving::ServingEngine* engine = prefill_,
      std::function<bool()> cancelled = [] { return false; }) {
    v1::TransferDescriptor descriptor;
    EXPECT_TRUE(descriptor.ParseFromString(reserved.transfer_descriptor()));
    ASSIGN_OR_RETURN(auto streamer, prefill::LinkToReservation(
                                        *engine, *prefill_agent_, Link(*engine, 1), descriptor,
                                        static_cast<int64_t>(prompt.size()), mode));
    prefill::TransferOptions options;
    options.mode = mode;
    auto first = prefill::StreamPrefill(*engine, *prefill_agent_, streamer, Spec("p", prompt, 16),
                                        descriptor, options, cancelled);
    if (!first.ok()) {
      prefill::Abandon(*prefill_agent_, descriptor.incarnation_id(), streamer, options.stall);
      return first.status();
    }
    return first->tokens.front();
  }

  // Every lease the decode pool has left, held until the vector goes.
  static std::vector<serving::CacheLease> HoldEveryLease() {
    std::vector<serving::CacheLease> hold;
    while (true) {
      auto lease = decode_->ReserveCache(100, 1);
      if (!lease.ok()) return hold;
      hold.push_back(std::move(lease).value());
    }
  }

  StatusOr<std::shared_ptr<serving::PrefilledState>> Take(
      const v1::ReserveResponse& reserved, serving::ServingEngine* engine = decode_) {
    return receiver_->Take(reserved.reservation_id(), engine->NewDrafterState().value());
  }

  static Engines engines_[2];  // pools on the host, pools behind their backend's copies
  // The test's engines (of engines_[mirror_]).
  static serving::ServingEngine* prefill_;
  static serving::ServingEngine* decode_;
  static serving::ServingEngine* colocated_;
  bool mirror_ = false;
  prometheus::Registry registry_;
  std::unique_ptr<worker::KvTransferMetrics> metrics_;
  std::unique_ptr<transport::TransferAgent> prefill_agent_, decode_agent_;
  std::unique_ptr<decode::KvReceiver> receiver_;
  transport::LocalRegion pool_region_;
};

KvHandoffTest::Engines KvHandoffTest::engines_[2];
serving::ServingEngine* KvHandoffTest::prefill_ = nullptr;
serving::ServingEngine* KvHandoffTest::decode_ = nullptr;
serving::ServingEngine* KvHandoffTest::colocated_ = nullptr;

TEST_P(KvHandoffTest, RestoredStateAndTokensEqualColocated) {
  // Shorter than the window, one token past it, and far past it with many compression groups.
  for (int length : {5, 33, 700}) {
    const auto prompt = Prompt(length);
    RequestSpec reference = Spec("ref", prompt, 16);
    reference.prefill_only = true;
    const serving::RequestEvent colocated_prefill = RunToEnd(*colocated_, reference);
    const serving::RequestEvent colocated = RunToEnd(*colocated_, Spec("c", prompt, 16));

    const auto reserved = Reserve(length);
    auto first = Prefill(reserved, prompt);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(*first, colocated_prefill.tokens.at(0));
    auto prefilled = Take(reserved);
    ASSERT_TRUE(prefilled.ok()) << prefilled.status();
    EXPECT_TRUE((*prefilled)->sequence->Serialize() == colocated_prefill.state) << length;
    ASSERT_NE((*prefilled)->drafter, nullptr);
    EXPECT_TRUE((*prefilled)->drafter->Serialize() == colocated_prefill.drafter_state) << length;

    RequestSpec d = Spec("d", prompt, 16);
    d.prefilled = *prefilled;
    d.generated = {*first};
    serving::RequestEvent rest = RunToEnd(*decode_, d);
    std::vector<int32_t> tokens{*first};
    tokens.insert(tokens.end(), rest.tokens.begin(), rest.tokens.end());
    EXPECT_EQ(tokens, colocated.tokens) << length;
    EXPECT_GT(rest.spec.drafts, 0);
    EXPECT_EQ(rest.spec.drafts, colocated.spec.drafts) << length;
    EXPECT_EQ(rest.spec.accepted_tokens, colocated.spec.accepted_tokens) << length;
  }
  EXPECT_EQ(receiver_->Stats().active, 0);
  EXPECT_EQ(decode_->Stats().cache_bytes_in_use, 0);
}

TEST_P(KvHandoffTest, WholeStateModeShipsTheSameBytes) {
  const auto prompt = Prompt(300);
  // After the prompt the prefill side holds only the rows its own blocks kept: the whole-state
  // mode needs the decode worker's block size (layer-wise streaming does not).
  auto equal_blocks = Engine(16, "1", false, mirror_);
  std::string layerwise, whole;
  for (auto mode : {prefill::StreamMode::kLayerwise, prefill::StreamMode::kWhole}) {
    const auto reserved = Reserve(300);
    ASSERT_TRUE(Prefill(reserved, prompt, mode, equal_blocks.get()).ok());
    auto prefilled = Take(reserved);
    ASSERT_TRUE(prefilled.ok()) << prefilled.status();
    (mode == prefill::StreamMode::kWhole ? whole : layerwise) = (*prefilled)->sequence->Serialize();
  }
  EXPECT_FALSE(layerwise.empty());
  EXPECT_TRUE(layerwise == whole);
}

// A decode worker whose prefix cache holds a conversation's first turn reserves room for the
// rest of the second turn's prompt only: the rows past the cached prefix travel, and the state
// it continues from is still the colocated one bit for bit.
TEST_P(KvHandoffTest, DecodeWorkerHoldingAPrefixReceivesOnlyTheRest) {
  auto cached_decode = Engine(16, "3", /*prefix_caching=*/true, mirror_);
  receiver_ = MakeReceiver(std::chrono::milliseconds(0), cached_decode.get());
  // A turn travels whole and runs on the decode engine, whose cache then holds its prompt.
  auto run_whole_turn = [&](const std::vector<int32_t>& prompt) {
    const auto reserved = Reserve(prompt);
    EXPECT_EQ(Descriptor(reserved).cached_tokens(), 0u);
    EXPECT_EQ(Descriptor(reserved).ship_from_rows_size(), 0);
    const auto first = Prefill(reserved, prompt);
    ASSERT_TRUE(first.ok()) << first.status();
    const auto prefilled = Take(reserved, cached_decode.get());
    ASSERT_TRUE(prefilled.ok()) << prefilled.status();
    RequestSpec turn = Spec("turn", prompt, 16);
    turn.prefilled = *prefilled;
    turn.generated = {*first};
    RunToEnd(*cached_decode, turn);
  };
  // A cached prefix too short to fill a page of any group spares nothing: a plain reservation
  // (run_whole_turn checks it names no cached tokens).
  const auto short_turn = Prompt(10, 17);
  run_whole_turn(short_turn);
  auto longer = short_turn;
  const auto tail = Prompt(300, 19);
  longer.insert(longer.end(), tail.begin(), tail.end());
  run_whole_turn(longer);

  const auto first_turn = Prompt(300, 11);
  run_whole_turn(first_turn);
  v1::ReserveResponse reserved;
  StatusOr<int32_t> first = 0;
  StatusOr<std::shared_ptr<serving::PrefilledState>> prefilled;

  // Turn 2, far past the sliding window (the window's rows all travel) and a few tokens on
  // (the window's first rows come from the cache too).
  for (int extra : {200, 5}) {
    auto prompt = first_turn;
    const auto more = Prompt(extra, 13 + extra);
    prompt.insert(prompt.end(), more.begin(), more.end());
    RequestSpec reference = Spec("ref", prompt, 16);
    reference.prefill_only = true;
    const serving::RequestEvent colocated_prefill = RunToEnd(*colocated_, reference);
    const serving::RequestEvent colocated = RunToEnd(*colocated_, Spec("c", prompt, 16));

    // What the whole prompt's state weighs in transfer (a reservation not naming its prompt).
    double received = Counter("pdspark_kv_transfer_bytes_total");
    reserved = Reserve(static_cast<int64_t>(prompt.size()));
    ASSERT_TRUE(Prefill(reserved, prompt).ok());
    ASSERT_TRUE(Take(reserved, cached_decode.get()).ok());
    const double whole_bytes = Counter("pdspark_kv_transfer_bytes_total") - received;

    received = Counter("pdspark_kv_transfer_bytes_total");
    reserved = Reserve(prompt);
    const v1::TransferDescriptor descriptor = Descriptor(reserved);
    EXPECT_EQ(descriptor.cached_tokens(), first_turn.size()) << extra;
    const auto layout = engine::StagingLayout::Compute(cached_decode->model().cache_layout(),
                                                       static_cast<int64_t>(prompt.size()), 16,
                                                       descriptor.drafter_state_bytes());
    ASSERT_EQ(descriptor.ship_from_rows_size(), static_cast<int>(layout.groups.size()));
    int64_t groups_cut = 0;
    for (size_t i = 0; i < layout.groups.size(); ++i) {
      groups_cut += static_cast<int64_t>(descriptor.ship_from_rows(static_cast<int>(i))) >
                    layout.groups[i].first_row;
    }
    EXPECT_GT(groups_cut, 0) << extra;
    first = Prefill(reserved, prompt);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(*first, colocated_prefill.tokens.at(0));
    prefilled = Take(reserved, cached_decode.get());
    ASSERT_TRUE(prefilled.ok()) << prefilled.status();
    EXPECT_LT(Counter("pdspark_kv_transfer_bytes_total") - received, 0.8 * whole_bytes) << extra;
    EXPECT_TRUE((*prefilled)->sequence->Serialize() == colocated_prefill.state) << extra;
    EXPECT_TRUE((*prefilled)->drafter->Serialize() == colocated_prefill.drafter_state) << extra;

    RequestSpec d = Spec("d", prompt, 16);
    d.prefilled = *prefilled;
    d.generated = {*first};
    prefilled->reset();
    const serving::RequestEvent rest = RunToEnd(*cached_decode, d);
    std::vector<int32_t> tokens{*first};
    tokens.insert(tokens.end(), rest.tokens.begin(), rest.tokens.end());
    EXPECT_EQ(tokens, colocated.tokens) << extra;
    EXPECT_EQ(rest.spec.drafts, colocated.spec.drafts) << extra;
    EXPECT_EQ(rest.spec.accepted_tokens, colocated.spec.accepted_tokens) << extra;
  }
  EXPECT_EQ(Counter("pdspark_kv_transfer_cached_prompt_tokens_total"), 2 * 300);
  EXPECT_EQ(cached_decode->Stats().cache_bytes_in_use, 0);
  // Before the engine whose pool they fill goes.
  receiver_.reset();
  EXPECT_TRUE(decode_agent_->DeregisterMemory(pool_region_.id).ok());
}

std::string TransportName(const ::testing::TestParamInfo<std::string>& info) {
  const std::vector<std::string> names = {"inprocess", "tcp", "shm", "inprocess_mirror",
                                          "tcp_mirror"};
  return names[info.index];
}

INSTANTIATE_TEST_SUITE_P(Transports, KvHandoffTest,
                         ::testing::Values("inprocess", "tcp", "posix,sysv,cma,self",
                                           "inprocess+mirror", "tcp+mirror"),
                         TransportName);

class KvHandoffRefusalTest : public KvHandoffTest {};

TEST_P(KvHandoffRefusalTest, TornIncompleteAndRepeatedDeliveriesAreRefused) {
  const auto prompt = Prompt(100);
  // Nothing delivered: no completion record.
  auto reserved = Reserve(100);
  auto st = Take(reserved).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("no completion record"), std::string::npos) << st;
  // Taken once: a second Take finds nothing.
  EXPECT_EQ(Take(reserved).status().code(), absl::StatusCode::kNotFound);

  // A byte of one segment changed after delivery (a torn or stray write).
  reserved = Reserve(100);
  ASSERT_TRUE(Prefill(reserved, prompt).ok());
  v1::TransferDescriptor descriptor;
  ASSERT_TRUE(descriptor.ParseFromString(reserved.transfer_descriptor()));
  const auto layout = engine::StagingLayout::Compute(decode_->model().cache_layout(), 100, 16,
                                                     descriptor.drafter_state_bytes());
  // Into the first shipped row of group 3, where it lies in the decode worker's pool.
  const auto pool = transport::RemoteRegion::Deserialize(descriptor.pool_region()).value();
  const engine::StagedGroup& g = layout.groups[3];
  const uint64_t row_at =
      static_cast<uint64_t>(descriptor.page_tables(3).pages(0)) * descriptor.page_bytes() +
      (g.first_row % g.rows_per_page) * g.row_bytes;
  const char garbage[4] = {1, 2, 3, 4};
  ASSERT_TRUE(prefill_agent_
                  ->Write(descriptor.incarnation_id(), pool, {{garbage, 4, row_at + 8}},
                          transport::Clock::now() + std::chrono::seconds(5))
                  .ok());
  st = Take(reserved).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st;
  EXPECT_EQ(receiver_->Stats().active, 0);  // and the quarantine (no grace here) is over
  EXPECT_EQ(decode_->model().kv_pool().pages_in_use(), 0);
}

TEST_P(KvHandoffRefusalTest, LinkIsRefusedBeforeAnythingIsComputed) {
  auto reserved = Reserve(50);
  v1::TransferDescriptor descriptor;
  ASSERT_TRUE(descriptor.ParseFromString(reserved.transfer_descriptor()));
  // A prefill worker without the drafter cannot feed a speculating decode worker.
  transport::LinkInfo no_drafter = Link(*prefill_, 1);
  no_drafter.drafter_state_bytes = 0;
  auto refused = prefill::LinkToReservation(*prefill_, *prefill_agent_, no_drafter, descriptor, 50,
                                            prefill::StreamMode::kLayerwise);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("drafter"), std::string::npos) << refused.status();
  // The reservation was laid out for another prompt length.
  refused = prefill::LinkToReservation(*prefill_, *prefill_agent_, Link(*prefill_, 1), descriptor,
                                       51, prefill::StreamMode::kLayerwise);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  // Rows to ship from (a cached prefix on the decode side) that this layout cannot honour: one
  // start for many groups, and a start inside a page of the decode worker's pool.
  v1::TransferDescriptor bad_start = descriptor;
  bad_start.add_ship_from_rows(16);
  refused = prefill::LinkToReservation(*prefill_, *prefill_agent_, Link(*prefill_, 1), bad_start,
                                       50, prefill::StreamMode::kLayerwise);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("cache groups"), std::string::npos) << refused.status();
  const auto layout = engine::StagingLayout::Compute(decode_->model().cache_layout(), 50, 16,
                                                     descriptor.drafter_state_bytes());
  bad_start.clear_ship_from_rows();
  for (const engine::StagedGroup& g : layout.groups) bad_start.add_ship_from_rows(g.first_row);
  bad_start.set_ship_from_rows(0, layout.groups[0].first_row + 1);
  refused = prefill::LinkToReservation(*prefill_, *prefill_agent_, Link(*prefill_, 1), bad_start,
                                       50, prefill::StreamMode::kLayerwise);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("layer 0 group 0: shipping from row"),
            std::string::npos)
      << refused.status();
  EXPECT_TRUE(receiver_->Release(reserved.reservation_id(), false));

  // A reservation whose prompt does not have the length it claims.
  v1::ReserveRequest request;
  request.set_prompt_tokens(50);
  request.add_prompt_token_ids(1);
  const auto mismatched = receiver_->Reserve(request);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument) << mismatched.status();
  EXPECT_EQ(receiver_->Stats().active, 0);
}

TEST_P(KvHandoffRefusalTest, LeaseShorterThanThePrefillFailsBothSidesCleanly) {
  const auto prompt = Prompt(700);
  auto reserved = Reserve(700, /*lease_ms=*/1);
  auto first = Prefill(reserved, prompt);
  EXPECT_EQ(transport::ReasonOf(first.status()), transport::FailureReason::kDeadline)
      << first.status();
  EXPECT_NE(first.status().message().find("lease"), std::string::npos) << first.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(Take(reserved).status().code(), absl::StatusCode::kNotFound);  // expired
  EXPECT_EQ(receiver_->Stats().active, 0);
  EXPECT_GE(receiver_->Stats().expired_total, 1);
  // The cancelled prefill lets go of its state and send buffer.
  ASSERT_TRUE(PrefillEngineIdle());
  EXPECT_EQ(prefill_->Stats().cache_bytes_in_use, 0);
}

TEST_P(KvHandoffRefusalTest, CancelledPrefillStopsStreamingAndFreesBothSides) {
  const auto prompt = Prompt(900);
  auto reserved = Reserve(900);
  // The client goes away once the first layers were shipped.
  auto first = Prefill(reserved, prompt, prefill::StreamMode::kLayerwise, prefill_,
                       [] { return prefill_->Stats().cache_bytes_in_use > 0; });
  EXPECT_EQ(transport::ReasonOf(first.status()), transport::FailureReason::kCancelled)
      << first.status();
  EXPECT_TRUE(receiver_->Release(reserved.reservation_id(), false));  // what the router does next
  ASSERT_TRUE(PrefillEngineIdle());
  EXPECT_EQ(prefill_->Stats().cache_bytes_in_use, 0);
  EXPECT_EQ(receiver_->Stats().active, 0);
}

// A reservation leases the request's worst case of the decode worker's KV pool: the restore
// then always finds its pages, and the lease returns however the reservation ends (taken and
// finished, released, expired) or is refused when the pool is fully leased.
TEST_P(KvHandoffRefusalTest, ReservationLeasesTheDecodePoolUntilItEnds) {
  const int64_t leased = decode_->Stats().cache_bytes_reserved;
  const int64_t one = decode_->ReserveCache(100, 1).value().bytes();  // returned at once
  EXPECT_EQ(decode_->Stats().cache_bytes_reserved, leased);
  auto released = Reserve(100);
  EXPECT_EQ(decode_->Stats().cache_bytes_reserved, leased + one);
  EXPECT_TRUE(receiver_->Release(released.reservation_id(), false));
  EXPECT_EQ(decode_->Stats().cache_bytes_reserved, leased);
  Reserve(100, /*lease_ms=*/1);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(receiver_->Stats().active, 0);  // expired
  EXPECT_EQ(decode_->Stats().cache_bytes_reserved, leased);

  // Delivered and taken: the request runs on the reservation's lease, not on a second one.
  const auto prompt = Prompt(100);
  auto reserved = Reserve(100);
  auto first = Prefill(reserved, prompt);
  ASSERT_TRUE(first.ok()) << first.status();
  auto prefilled = Take(reserved);
  ASSERT_TRUE(prefilled.ok()) << prefilled.status();
  EXPECT_EQ((*prefilled)->lease.bytes(), one);
  RequestSpec spec = Spec("leased", prompt, 1);
  spec.prefilled = std::move(prefilled).value();
  spec.generated = {*first};
  RunToEnd(*decode_, spec);
  EXPECT_EQ(decode_->Stats().cache_bytes_reserved, leased);

  // A pool fully leased refuses the reservation (the router then prefills on the decode worker,
  // where the request waits in the queue).
  std::vector<serving::CacheLease> hold = HoldEveryLease();
  v1::ReserveRequest request;
  request.set_prompt_tokens(100);
  const auto refused = receiver_->Reserve(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("--kv-cache-memory-bytes"), std::string::npos);
  EXPECT_EQ(receiver_->Stats().active, 0);
  hold.clear();
  EXPECT_EQ(decode_->Stats().cache_bytes_reserved, leased);
}

// Pages of a reservation that was not taken may still receive a late write from a prefill
// worker that has not yet given up: they and the lease return to the pool only after the grace.
TEST_P(KvHandoffRefusalTest, PagesOfAnUntakenReservationAreQuarantined) {
  receiver_ = MakeReceiver(std::chrono::milliseconds(300));
  const engine::KvPool& pool = decode_->model().kv_pool();
  const int64_t leased = decode_->Stats().cache_bytes_reserved;
  const auto reserved = Reserve(100);
  const int64_t pages = pool.pages_in_use();
  EXPECT_GT(pages, 0);  // the rows' pages, prepared at Reserve
  EXPECT_TRUE(receiver_->Release(reserved.reservation_id(), false));
  EXPECT_EQ(receiver_->Stats().quarantined, 1);
  EXPECT_EQ(pool.pages_in_use(), pages);
  EXPECT_GT(decode_->Stats().cache_bytes_reserved, leased);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  EXPECT_EQ(receiver_->Stats().quarantined, 0);
  EXPECT_EQ(pool.pages_in_use(), 0);
  EXPECT_EQ(decode_->Stats().cache_bytes_reserved, leased);
  // Released after the prefill worker reported the transfer complete: nothing can land late.
  const auto delivered = Reserve(100);
  EXPECT_TRUE(receiver_->Release(delivered.reservation_id(), /*transfer_completed=*/true));
  EXPECT_EQ(receiver_->Stats().quarantined, 0);
  EXPECT_EQ(pool.pages_in_use(), 0);
  EXPECT_EQ(decode_->Stats().cache_bytes_reserved, leased);
}

// Quarantined pages wait for a fence, and a fence for a moment with no transfer under way,
// unless a reservation would be refused for a full pool: then the fence comes at once.
TEST_P(KvHandoffRefusalTest, QuarantinedLeasesAreFencedFreeWhenThePoolIsFull) {
  const int64_t leased = decode_->Stats().cache_bytes_reserved;
  const int64_t fences = receiver_->Stats().fences_total;
  const auto untaken = Reserve(100);
  const auto in_flight = Reserve(100);
  EXPECT_TRUE(receiver_->Release(untaken.reservation_id(), false));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // the reaper ticks meanwhile
  EXPECT_EQ(receiver_->Stats().quarantined, 1);  // in_flight's transfer may be under way
  EXPECT_EQ(receiver_->Stats().fences_total, fences);
  std::vector<serving::CacheLease> hold = HoldEveryLease();
  const auto reclaimed = Reserve(100);  // the untaken reservation's lease, fenced free
  EXPECT_EQ(receiver_->Stats().fences_total, fences + 1);
  EXPECT_EQ(receiver_->Stats().quarantined, 0);
  hold.clear();
  EXPECT_TRUE(receiver_->Release(in_flight.reservation_id(), true));
  EXPECT_TRUE(receiver_->Release(reclaimed.reservation_id(), true));
  EXPECT_EQ(decode_->Stats().cache_bytes_reserved, leased);
}

INSTANTIATE_TEST_SUITE_P(InProcess, KvHandoffRefusalTest, ::testing::Values("inprocess"),
                         [](const auto&) { return std::string("inprocess"); });

// Over a network transport a write the prefill worker posted before a link cut can reach the
// decode worker long after the prefill side gave up (its kernel retransmits when the link
// returns). Such a write, arriving on a connection from before the reservation was released,
// must not land in the pages the pool hands out next.
class KvLateWriteTest : public KvHandoffTest {};

TEST_P(KvLateWriteTest, WritesOnAConnectionFromBeforeTheReleaseNeverLandInReusedPages) {
  const engine::KvPool& pool = decode_->model().kv_pool();
  const auto released = Reserve(100);
  v1::TransferDescriptor descriptor;
  ASSERT_TRUE(descriptor.ParseFromString(released.transfer_descriptor()));
  const std::string peer = descriptor.incarnation_id();
  ASSERT_TRUE(prefill_agent_->Connect(peer, descriptor.agent_address()).ok());
  const auto region = transport::RemoteRegion::Deserialize(descriptor.pool_region()).value();
  const uint64_t page_at =
      static_cast<uint64_t>(descriptor.page_tables(0).pages(0)) * descriptor.page_bytes();
  EXPECT_TRUE(receiver_->Release(released.reservation_id(), false));
  // No transfer is under way, so the fence comes at once, and with it the pages (no grace).
  EXPECT_EQ(receiver_->Stats().fences_total, 1);
  EXPECT_EQ(pool.pages_in_use(), 0);
  const auto next = Reserve(100);  // on the same pages: the pool reuses the last freed first
  std::vector<char> before(pool.base() + page_at, pool.base() + page_at + 64);
  const std::vector<char> late(64, 0x5a);
  const Status st = prefill_agent_->Write(peer, region, {{late.data(), late.size(), page_at}},
                                          transport::Clock::now() + std::chrono::seconds(3));
  EXPECT_FALSE(st.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(std::vector<char>(pool.base() + page_at, pool.base() + page_at + 64), before);
  // The prefill worker reaches the decode worker again through the new address.
  const auto prompt = Prompt(100);
  ASSERT_TRUE(Prefill(next, prompt).ok());
  ASSERT_TRUE(Take(next).ok());
}

INSTANTIATE_TEST_SUITE_P(Tcp, KvLateWriteTest, ::testing::Values("tcp"),
                         [](const auto&) { return std::string("tcp"); });

}  // namespace
}  // namespace pdspark
