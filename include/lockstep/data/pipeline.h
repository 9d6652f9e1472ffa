// Forwarding header, kept for a while after the rename of 2026-11-27
// (CHANGELOG.md): the input pipeline is the loader, lockstep/data/loader.h
// (data::Pipeline -> data::Loader, PipelineOptions -> LoaderOptions,
// PipelineBuilder -> LoaderBuilder), named apart from pipeline parallelism
// (lockstep::parallel::Pipeline). The old names are deprecated aliases, so
// a program that included this header compiles, with a warning naming the
// new ones. To be removed after 2027-03-01.
#pragma once

#warning \
    "lockstep/data/pipeline.h is deprecated: include lockstep/data/loader.h (data::Loader, LoaderOptions, LoaderBuilder)"

#include "lockstep/data/loader.h"

namespace lockstep::data {

using Pipeline [[deprecated("renamed lockstep::data::Loader (lockstep/data/loader.h)")]] = Loader;
using PipelineOptions [[deprecated("renamed lockstep::data::LoaderOptions")]] = LoaderOptions;
using PipelineBuilder [[deprecated("renamed lockstep::data::LoaderBuilder")]] = LoaderBuilder;

}  // namespace lockstep::data
