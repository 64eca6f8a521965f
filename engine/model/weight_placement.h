// Copies a rank's weights into its backend's memory (a GPU's), so its kernels read them there:
// every matrix in its own format (a tensor-parallel slice copied as the smallest rectangle of
// whole scale blocks around it, so the block scales still index as in the checkpoint) and every
// small vector. One allocation per rank holds them all; the weights keep it alive.
//
//   WeightPlacer placer(backend);        // a std::shared_ptr<Backend>, kept by the weights
//   placer.Add(weights);                 // a ModelWeights, DrafterWeights' blocks, ...
//   RETURN_IF_ERROR(placer.Place());     // one allocation, one copy per weight
//
// The CPU backend reads the checkpoint's mapping in place and needs none of this; the model
// places weights on it only when asked (ModelOptions::place_weights, a check for tests that the
// placed copy computes the same bits).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/base/status.h"
#include "engine/backend/backend.h"
#include "engine/model/weights.h"

namespace pdspark::engine {

class WeightPlacer {
 public:
  // The weights placed keep `backend` alive (their memory goes back to it with the last).
  explicit WeightPlacer(std::shared_ptr<backend::Backend> backend) : backend_(std::move(backend)) {}

  void Add(Matrix& m) { matrices_.push_back(&m); }
  void Add(WeightArray<float>& v) { floats_.push_back(&v); }
  void Add(WeightArray<int32_t>& v) { ints_.push_back(&v); }
  void Add(HyperConnectionWeights& hc);
  void Add(CompressorWeights& c);
  void Add(AttentionWeights& a);
  void Add(ExpertWeights& e);
  void Add(MoeWeights& m);
  void Add(BlockWeights& b);
  // Every weight of the model; the checkpoint mapping is released once they are placed.
  void Add(ModelWeights& w);

  // Bytes the weights added so far take in the backend's memory.
  int64_t bytes() const;
  // Allocates the backend memory and copies every weight added into it; from then on they
  // point there. ResourceExhausted (nothing changed) when the device has no room.
  Status Place();

 private:
  std::shared_ptr<backend::Backend> backend_;
  std::vector<Matrix*> matrices_;
  std::vector<WeightArray<float>*> floats_;
  std::vector<WeightArray<int32_t>*> ints_;
  std::vector<ModelWeights*> models_;
};

}  // namespace pdspark::engine
