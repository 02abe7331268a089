// Tests of MetricsText: exact output for escaping, grouping and number formatting, and a
// realistic /metrics page validated by the real parser (promtool check metrics).
#include "daemon/http/prometheus.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

namespace longhaul::http {
namespace {

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// Runs `command` through the shell; returns its exit code and stdout+stderr.
CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

// Writes `text` to a file under $TEST_TMPDIR and runs `promtool check metrics` on it.
CommandResult PromtoolCheck(const std::string& text, const std::string& file_name) {
  const CommandResult which = RunCommand("command -v promtool");
  if (which.exit_code != 0) {
    FAIL("promtool not found on PATH; run tools/setup.sh (it installs Debian's prometheus)");
  }
  const char* tmpdir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmpdir != nullptr ? tmpdir : "/tmp") + "/" + file_name;
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
    REQUIRE(out.good());
  }
  return RunCommand("promtool check metrics < '" + path + "'");
}

TEST_CASE("family header is written once, before the first sample", "[prometheus]") {
  MetricsText m;
  m.Family("longhaul_up", "gauge", "Whether the daemon is up.");
  m.Sample("longhaul_up", {}, 1);
  m.Sample("longhaul_up", {{"site", "a"}}, 0);
  CHECK(m.str() ==
        "# HELP longhaul_up Whether the daemon is up.\n"
        "# TYPE longhaul_up gauge\n"
        "longhaul_up 1\n"
        "longhaul_up{site=\"a\"} 0\n");
}

TEST_CASE("samples are grouped under their family even when interleaved", "[prometheus]") {
  MetricsText m;
  m.Family("a_bytes", "gauge", "A.");
  m.Family("b_total", "counter", "B.");
  m.Family("c", "untyped", "C.");
  m.Sample("b_total", {{"x", "1"}}, 1);
  m.Sample("a_bytes", {{"x", "1"}}, 2);
  m.Sample("b_total", {{"x", "2"}}, 3);
  m.Sample("a_bytes", {{"x", "2"}}, 4);
  CHECK(m.str() ==
        "# HELP a_bytes A.\n# TYPE a_bytes gauge\n"
        "a_bytes{x=\"1\"} 2\na_bytes{x=\"2\"} 4\n"
        "# HELP b_total B.\n# TYPE b_total counter\n"
        "b_total{x=\"1\"} 1\nb_total{x=\"2\"} 3\n"
        "# HELP c C.\n# TYPE c untyped\n");
}

TEST_CASE("label values and help text are escaped", "[prometheus]") {
  MetricsText m;
  m.Family("m", "gauge", "Back\\slash and\nnewline, \"quotes\" kept.");
  m.Sample("m", {{"path", "C:\\dir"}, {"quote", "say \"hi\""}, {"nl", "a\nb"}}, 1);
  CHECK(m.str() ==
        "# HELP m Back\\\\slash and\\nnewline, \"quotes\" kept.\n"
        "# TYPE m gauge\n"
        "m{path=\"C:\\\\dir\",quote=\"say \\\"hi\\\"\",nl=\"a\\nb\"} 1\n");
}

TEST_CASE("labels keep the order given", "[prometheus]") {
  MetricsText m;
  m.Family("m", "gauge", "h");
  m.Sample("m", {{"z", "1"}, {"a", "2"}, {"m", "3"}}, 0);
  CHECK(m.str().find("m{z=\"1\",a=\"2\",m=\"3\"} 0\n") != std::string::npos);
}

TEST_CASE("values: integers, fractions, exponents, NaN and infinities", "[prometheus]") {
  MetricsText m;
  m.Family("v", "gauge", "h");
  m.Sample("v", {{"k", "int"}}, 42);
  m.Sample("v", {{"k", "neg"}}, -3.5);
  m.Sample("v", {{"k", "frac"}}, 0.1);
  m.Sample("v", {{"k", "big"}}, 1.25e20);
  m.Sample("v", {{"k", "nan"}}, std::numeric_limits<double>::quiet_NaN());
  m.Sample("v", {{"k", "inf"}}, std::numeric_limits<double>::infinity());
  m.Sample("v", {{"k", "ninf"}}, -std::numeric_limits<double>::infinity());
  const std::string text = m.str();
  CHECK(text.find("v{k=\"int\"} 42\n") != std::string::npos);
  CHECK(text.find("v{k=\"neg\"} -3.5\n") != std::string::npos);
  CHECK(text.find("v{k=\"frac\"} 0.1\n") != std::string::npos);
  CHECK(text.find("v{k=\"big\"} 1.25e+20\n") != std::string::npos);
  CHECK(text.find("v{k=\"nan\"} NaN\n") != std::string::npos);
  CHECK(text.find("v{k=\"inf\"} +Inf\n") != std::string::npos);
  CHECK(text.find("v{k=\"ninf\"} -Inf\n") != std::string::npos);
}

TEST_CASE("names breaking the REQUIRES are repaired, not written as they are", "[prometheus]") {
  MetricsText m;
  m.Family("9bad-name", "gauge", "h");
  m.Family("requests", "counter", "h");
  m.Family("odd", "histogram", "h");
  m.Sample("9bad-name", {{"bad label", "v"}, {"a:b", "w"}}, 1);
  m.Sample("requests", {}, 2);
  m.Family("requests", "gauge", "declared twice: ignored");
  const std::string text = m.str();
  CHECK(text.find("_bad_name{bad_label=\"v\",a_b=\"w\"} 1\n") != std::string::npos);
  CHECK(text.find("# TYPE requests_total counter\nrequests_total 2\n") != std::string::npos);
  CHECK(text.find("# TYPE odd untyped\n") != std::string::npos);
  CHECK(text.find("declared twice") == std::string::npos);
}

TEST_CASE("a sample of an undeclared family declares it untyped", "[prometheus]") {
  MetricsText m;
  m.Sample("stray", {}, 7);
  CHECK(m.str() == "# HELP stray Undeclared metric family.\n# TYPE stray untyped\nstray 7\n");
}

TEST_CASE("an empty builder renders nothing", "[prometheus]") {
  CHECK(MetricsText().str().empty());
}

TEST_CASE("a realistic /metrics page passes promtool check metrics", "[prometheus][promtool]") {
  MetricsText m;
  m.Family("longhaul_build_info", "gauge", "Build of this daemon; the value is always 1.");
  m.Family("longhaul_link_bandwidth_bytes_per_second", "gauge",
           "Measured bandwidth of each outbound link (EWMA).");
  m.Family("longhaul_link_rtt_seconds", "gauge", "Measured round-trip time of each link.");
  m.Family("longhaul_compression_ratio", "gauge", "Bytes before / after compression, by codec.");
  m.Family("longhaul_frames_sent_total", "counter", "Tensor frames sent, by peer.");
  m.Family("longhaul_train_loss", "gauge", "Training loss of the last step.");
  m.Sample("longhaul_build_info", {{"version", "0.1.0 \"dev\""}, {"site", "dc-east"}}, 1);
  for (const char* peer : {"dc-west", "dc-north"}) {
    m.Sample("longhaul_link_bandwidth_bytes_per_second", {{"peer", peer}}, 1.25e8);
    m.Sample("longhaul_frames_sent_total", {{"peer", peer}}, 12345);
    m.Sample("longhaul_link_rtt_seconds", {{"peer", peer}}, 0.0421);
  }
  m.Sample("longhaul_compression_ratio", {{"peer", "dc-west"}, {"codec", "topk1_int4"}}, 38.5);
  m.Sample("longhaul_compression_ratio", {{"peer", "dc-north"}, {"codec", "fp32"}}, 1);
  m.Sample("longhaul_train_loss", {{"job", "gpt2\\small\n"}},
           std::numeric_limits<double>::quiet_NaN());
  const std::string text = m.str();
  INFO(text);
  const CommandResult result = PromtoolCheck(text, "good_metrics.txt");
  INFO("promtool said: " << result.output);
  REQUIRE(result.exit_code == 0);
}

TEST_CASE("promtool rejects broken text, so the check above can fail", "[prometheus][promtool]") {
  // An unescaped quote in a label value.
  const std::string broken =
      "# HELP a_total A.\n# TYPE a_total counter\n"
      "a_total{x=\"say \"hi\"\"} 1\n";
  const CommandResult result = PromtoolCheck(broken, "broken_metrics.txt");
  INFO("promtool said: " << result.output);
  CHECK(result.exit_code != 0);

  const std::string counter_without_total = "# HELP a A.\n# TYPE a counter\na 1\n";
  CHECK(PromtoolCheck(counter_without_total, "lint_metrics.txt").exit_code != 0);
}

}  // namespace
}  // namespace longhaul::http
