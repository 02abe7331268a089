// A site's profile for placing a job (daemon/job/site/site_profile.h): a site of several CPU
// devices reports them (count, a device's share of the site's memory, nominal collectives), so
// that the planner counts the stage sharded across them; one device or GPUs report none; a
// peer's odd device figures count as one device.
#include "daemon/job/site/site_profile.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "daemon/job/spec/job_spec.h"
#include "daemon/link_monitor.h"

namespace longhaul::daemon {
namespace {

JobSpec Spec() {
  auto spec = ParseJobSpec(
      "name: t\nmodel: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
      "data: {train: builtin}\nsteps: 2\nbatch_size: 8\nmicrobatch_size: 4\nseq_len: 16\n"
      "sites: [a, b]\n",
      "job.yaml", ".");
  REQUIRE(spec.ok());
  return *spec;
}

TEST_CASE("a site of four CPU devices reports them; a site of one reports none") {
  LinkMonitor monitor("a");
  SiteProfiler four("a", {"cpu:0", "cpu:1", "cpu:2", "cpu:3"}, 400 << 20);
  auto r = four.Profile(Spec(), 0, monitor, {}, false);
  REQUIRE(r.ok());
  CHECK(r->devices() == 4);
  CHECK(r->device_memory_bytes() == 100 << 20);
  CHECK(r->device_link_bytes_per_second() > 0);
  SiteProfiler one("b", {"cpu"}, 400 << 20);
  auto s = one.Profile(Spec(), 0, monitor, {}, false);
  REQUIRE(s.ok());
  CHECK(s->devices() == 0);
  std::vector<std::string> notes;
  auto profiles = ProfilesFromReplies({*r, *s}, &notes);
  REQUIRE(profiles.ok());
  CHECK(profiles->Site("a")->devices == 4);
  CHECK(profiles->Site("a")->device_memory_bytes == 100 << 20);
  CHECK(profiles->Site("b")->devices == 1);
}

TEST_CASE("a peer's odd device figures count as one device; too many are clamped") {
  v1::SiteProfileReply r;
  r.set_site("x");
  r.set_flops(1e9);
  r.set_devices(8);  // and no device link bandwidth
  std::vector<std::string> notes;
  auto p = ProfilesFromReplies({r}, &notes);
  REQUIRE(p.ok());
  CHECK(p->Site("x")->devices == 1);
  r.set_device_link_bytes_per_second(std::nan(""));
  p = ProfilesFromReplies({r}, &notes);
  REQUIRE(p.ok());
  CHECK(p->Site("x")->devices == 1);
  r.set_device_link_bytes_per_second(1e10);
  r.set_device_link_latency_seconds(-1);
  p = ProfilesFromReplies({r}, &notes);
  REQUIRE(p.ok());
  CHECK(p->Site("x")->devices == 1);
  r.set_device_link_latency_seconds(0);
  r.set_devices(1u << 30);  // clamped to the most a profile may name
  p = ProfilesFromReplies({r}, &notes);
  REQUIRE(p.ok());
  CHECK(p->Site("x")->devices == scheduler::kMaxSiteDevices);
  r.set_flops(-1);  // the rest is checked as before
  CHECK_FALSE(ProfilesFromReplies({r}, &notes).ok());
}

}  // namespace
}  // namespace longhaul::daemon
