// lockstep-plan: `lockstep plan` and its sub-commands (docs/plan.md).
#include <cstring>

#include "tools/plan/commands.h"

int main(int argc, char** argv) {
  using namespace lockstep::plan_tool;
  if (argc >= 2 && !std::strcmp(argv[1], "validate")) return validate_main(argc - 1, argv + 1);
  if (argc >= 2 && !std::strcmp(argv[1], "presets")) return presets_main(argc - 1, argv + 1);
  if (argc >= 2 && !std::strcmp(argv[1], "zoo")) return zoo_main(argc - 1, argv + 1);
  if (argc >= 2 && !std::strcmp(argv[1], "layouts")) return layouts_main(argc - 1, argv + 1);
  return predict_main(argc, argv);
}
