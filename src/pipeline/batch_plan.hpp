// BatchPlan: where batch `step` of a split's stream comes from, as made by the mode's
// BatchSource::plan on the pipeline's serial sampler stage and handed to decode on a
// worker thread.
//
// The pipeline reads only the position and the error; what the mode needs to decode the
// batch (an epoch's order, an epoch's packing) travels in `mode_data`, opaque to the
// pipeline, so that the pipeline knows no dataset mode.
//
// Thread-safety: a value type; mode_data is immutable and shared.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>

namespace tokenfeed {

struct BatchPlan {
  std::uint64_t step = 0;            // index of the batch in the split's stream
  std::uint64_t epoch = 0;           // 0 in random mode
  std::uint64_t batch_in_epoch = 0;  // == step in random mode
  // The mode's own data for this batch; set by plan(), read by the same mode's decode().
  std::shared_ptr<const void> mode_data;
  std::exception_ptr error;  // set when planning failed; carried to the trainer

  // mode_data as the type the mode stored. REQUIRES: it was made as a T.
  template <typename T>
  const T& mode_data_as() const noexcept {
    return *static_cast<const T*>(mode_data.get());
  }
};

}  // namespace tokenfeed
