// Instantiates lockstep/torch/objects.h's concept-constrained overloads.
#include <lockstep/torch/torch.h>

int answer() { return lockstep::torch::broadcast_object(42, 0, "consumer.answer"); }
