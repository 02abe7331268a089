// "cpu-ref": the plain-loop reference backend. Every other backend is tested against it, so
// it is written for obvious correctness (llm.c's train_gpt2.c, op by op), not for speed.
#pragma once

#include <memory>

#include "kernels/ops.h"

namespace longhaul::kernels {

std::unique_ptr<Ops> NewReferenceOps();

}  // namespace longhaul::kernels
