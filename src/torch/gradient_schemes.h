// The built-in GradientSchemes (gradient_scheme.h), one file each, and the
// one place a DistributedOptimizer's scheme is chosen: scheme_name() reads
// the options, make_gradient_scheme() looks the name up. A built-in scheme
// is its file, its factory declared here and one line in the table of
// gradient_schemes.cc.
#pragma once

#include <memory>
#include <string>

#include "lockstep/policy/compression.h"
#include "lockstep/torch/distributed_optimizer.h"
#include "lockstep/torch/gradient_scheme.h"

namespace lockstep::torch::detail {

std::unique_ptr<GradientScheme> make_allreduce_scheme(const GradientSchemeContext& context);
std::unique_ptr<GradientScheme> make_adasum_scheme(const GradientSchemeContext& context);
std::unique_ptr<GradientScheme> make_powersgd_scheme(const GradientSchemeContext& context);
std::unique_ptr<GradientScheme> make_onebit_scheme(const GradientSchemeContext& context);
std::unique_ptr<GradientScheme> make_onebit_adam_scheme(const GradientSchemeContext& context);
std::unique_ptr<GradientScheme> make_onebit_lamb_scheme(const GradientSchemeContext& context);

// options.scheme when set (InvalidArgument when adasum or compression is
// set too), else the built-in that adasum and compression name.
std::string scheme_name(const DistributedOptimizerOptions& options);
// The scheme scheme_name(context.options) names, made by its factory.
// InvalidArgument naming the registered names when there is none.
std::unique_ptr<GradientScheme> make_gradient_scheme(const GradientSchemeContext& context);

// A Compression as the policy layer names it (the inverse of
// set_compression's mapping).
policy::CompressionKind compression_kind(Compression compression);

// The factories' shared refusal: `scheme` (a person's name for it, "1-bit
// Adam") takes no gradient_predivide_factor.
void refuse_predivide(const DistributedOptimizerOptions& options, const char* scheme);

}  // namespace lockstep::torch::detail
