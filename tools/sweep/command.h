// A trial's command line: the user's template with `{name}` replaced by the
// trial's value of that hyper-parameter and by the sweep's own values
// ({metrics}, {dir}, {trial}, {epochs}). `{{` and `}}` stand for literal
// braces. An unknown or unclosed `{...}` is an InvalidArgument naming it,
// raised by check_template() before any trial starts.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace lockstep::sweep {

using Substitutions = std::map<std::string, std::string>;

std::string substitute(const std::string& arg, const Substitutions& values);
std::vector<std::string> substitute(const std::vector<std::string>& args,
                                    const Substitutions& values);

// Every `{name}` the template uses must be one of `known`.
void check_template(const std::vector<std::string>& args, const std::vector<std::string>& known);

}  // namespace lockstep::sweep
