// lockstep::torch: data-parallel training for LibTorch (Horovod's torch API).
#pragma once

// The errors every collective throws (MismatchError, PeerFailure, Error,
// ...): catching them needs no other include (docs/torch.md).
#include "lockstep/base/error.h"
#include "lockstep/torch/adasum.h"
#include "lockstep/torch/checkpoint.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/data_loader.h"
#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/elastic.h"
#include "lockstep/torch/fingerprint.h"
#include "lockstep/torch/group.h"
#include "lockstep/torch/metrics.h"
#include "lockstep/torch/mixed_precision.h"
#include "lockstep/torch/objects.h"
#include "lockstep/torch/placement.h"
#include "lockstep/torch/profile.h"
#include "lockstep/torch/sampler.h"
#include "lockstep/torch/sync_batch_norm.h"
