// The protocol-buffer wire format the summary layer writes to TensorBoard
// (Event, Summary, TensorProto, the HParams plugin's records): the codec in
// base (lockstep/base/protowire.h), shared with the data layer's reader of
// tf.train.Example records, so that no layer links protobuf for it.
#pragma once

#include "lockstep/base/protowire.h"

namespace lockstep::summary {
namespace wire = ::lockstep::protowire;
}  // namespace lockstep::summary
