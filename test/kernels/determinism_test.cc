// The op suite (op_suite.h) over a whole block: a chain of every op (block_chain.h) repeats
// bit for bit on each backend under test, on the same backend object and on a fresh one, and
// in fp32 agrees with "cpu-ref" (bf16 is held to the reference op by op, in the other tests).
#include "test/kernels/block_chain.h"
#include "test/kernels/op_suite.h"

namespace longhaul::kernels::testing {
namespace {

TEST_CASE("every backend repeats a block bit for bit and agrees with the reference",
          "[ops][determinism]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  INFO(backend.Label());
  auto ops = backend.Make();
  const auto first = RunBlock(*ops);
  for (int rep = 0; rep < 3; rep++) CHECK(RunBlock(*ops) == first);
  CHECK(RunBlock(*backend.Make()) == first);  // a fresh backend too
  if (IsBf16(*ops)) return;
  const Tolerance tol = backend.device ? Tolerance{2e-4f, 4e-3f} : Tolerance{1e-4f, 2e-3f};
  const auto want = RunBlock(*Backend("cpu-ref"));
  REQUIRE(want.size() == first.size());
  for (size_t k = 0; k < want.size(); k++) {
    ExpectClose(first[k], want[k], tol, "output " + std::to_string(k));
  }
}

}  // namespace
}  // namespace longhaul::kernels::testing
