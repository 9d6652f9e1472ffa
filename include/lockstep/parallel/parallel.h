// lockstep::parallel: model, pipeline and sharded parallelism on top of
// lockstep::torch (docs/parallelism.md).
#pragma once

#include "lockstep/parallel/activation_checkpoint.h"
#include "lockstep/parallel/checkpoint.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/parallel/mesh.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/parallel/parameter_server.h"
#include "lockstep/parallel/pipeline.h"
#include "lockstep/parallel/sharded_optimizer.h"
#include "lockstep/parallel/tensor_parallel.h"
