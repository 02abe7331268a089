#!/usr/bin/python3
"""The browser half of status_page_test.sh: opens a daemon's page in headless Chromium.

Drives Debian's chromedriver over the W3C WebDriver protocol (plain HTTP and JSON, so the
standard library is enough), and checks the page against the daemon's own JSON:
  1. / and its assets are served from the binary with the page's security headers;
  2. a job run to completion: the page's graph shows its three sites and six directed links,
     each with exactly the codec and compression ratio /status has for it, and its loss chart
     plots every step's training loss and every validation loss of /status/jobs;
  3. a job still running: the page follows it live (its loss curve grows, each plotted loss is
     the one /status/jobs has for that step), the graph shows its six links with codecs and
     ratios, and a screenshot is saved; the page of a site that runs one of its stages (beta)
     names the stage, its layers and the coordinator; then the job is cancelled and the page
     shows it.
The loss charts plot on a logarithmic axis with labelled ticks inside the data's range.
Every wait is bounded; a failure says what the page showed and what the JSON had.
"""
import argparse
import base64
import json
import math
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

CODECS = {"fp32", "bf16", "q8", "q4"}


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, dict(r.headers), r.read()


def get_json(url):
    return json.loads(http_get(url)[2].decode())


def wait_for(what, fn, timeout, interval=0.5):
    """Calls fn until it returns something true; fails naming `what` (and fn's last answer)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except (urllib.error.URLError, OSError, KeyError, ValueError, TypeError, IndexError) as e:
            last = "error: %s" % e
        else:
            if last and not (isinstance(last, tuple) and not last[0]):
                return last
        time.sleep(interval)
    fail("timed out after %d s waiting for %s; last: %s" % (timeout, what, str(last)[:2000]))


class WebDriver:
    """The few WebDriver commands the check needs, against a chromedriver it starts."""

    def __init__(self, port, work):
        self.base = "http://127.0.0.1:%d" % port
        self.log = open(os.path.join(work, "chromedriver.log"), "w")
        self.proc = subprocess.Popen(["/usr/bin/chromedriver", "--port=%d" % port],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("chromedriver to start", lambda: self.call("GET", "/status")["ready"], 30)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--hide-scrollbars",
                         "--force-device-scale-factor=1", "--window-size=1400,1350",
                         "--user-data-dir=" + os.path.join(work, "chromium")],
            }}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read().decode())["value"]
        except urllib.error.HTTPError as e:
            fail("chromedriver %s %s: HTTP %d: %s" % (method, path, e.code, e.read()[:500]))

    def open(self, url):
        self.call("POST", "/session/%s/url" % self.session, {"url": url})

    def run(self, script):
        return self.call("POST", "/session/%s/execute/sync" % self.session,
                         {"script": script, "args": []})

    def screenshot(self, path):
        png = base64.b64decode(self.call("GET", "/session/%s/screenshot" % self.session))
        with open(path, "wb") as f:
            f.write(png)
        return len(png)

    def quit(self):
        try:
            self.call("DELETE", "/session/%s" % self.session)
        finally:
            self.proc.kill()
            self.proc.wait()


# What the page shows, read from its DOM: the graph's nodes and edges (with their data
# attributes and label text), the peers table and each job card.
READ_PAGE = """
const q = (s) => [...document.querySelectorAll(s)];
return {
  updates: +(document.body.dataset.updates || 0),
  conn: document.getElementById('conn').className,
  site: document.getElementById('site').textContent,
  graphJob: document.getElementById('graph-card').dataset.job || '',
  nodes: q('#graph .node').map((n) => n.dataset.site),
  edges: q('#graph .edge').map((e) => ({from: e.dataset.from, to: e.dataset.to,
      codec: e.dataset.codec, ratio: parseFloat(e.dataset.ratio), mbps: e.dataset.mbps})),
  labels: q('#graph .edge-label').map((l) => ({from: l.dataset.from, to: l.dataset.to,
      text: l.textContent})),
  peers: q('#peers tbody tr').map((r) => [...r.cells].map((c) => c.textContent)),
  jobs: q('.job').map((c) => ({job: c.dataset.job, state: c.dataset.state,
      points: +(c.dataset.lossPoints || 0), lastStep: +(c.dataset.lastStep || 0),
      lastLoss: parseFloat(c.dataset.lastLoss), valPoints: +(c.dataset.valPoints || 0),
      canvases: c.querySelectorAll('canvas').length, facts: c.querySelector('.facts').textContent,
      stages: c.querySelectorAll('.stages tbody tr').length})),
};
"""

def job_of(status, job_id):
    for j in status["jobs"]:
        if j["job"] == job_id:
            return j
    return None


def links_of(job):
    """(from, to) -> (codec, ratio, reason) from a /status job; the last usage of a pair wins,
    as on the page."""
    out = {}
    for u in job["links"]:
        out[(u["from"], u["to"])] = (u["codec"], u["compression_ratio"], u.get("reason", ""))
    return out


def submit(args, path):
    r = subprocess.run([args.cli, "--config", args.config, "submit", path],
                       capture_output=True, text=True, timeout=60)
    for line in r.stdout.splitlines():
        if line.startswith("submitted job "):
            return line.split()[2]
    fail("submit %s failed: %s %s" % (path, r.stdout, r.stderr))


def check_served(status_url):
    code, headers, body = http_get(status_url + "/")
    if code != 200 or not headers.get("Content-Type", "").startswith("text/html"):
        fail("/ answered %d %s" % (code, headers.get("Content-Type")))
    for needle in (b'src="/assets/app.js"', b'src="/assets/uPlot.iife.min.js"', b'id="graph"'):
        if needle not in body:
            fail("/ does not hold %r" % needle)
    csp = headers.get("Content-Security-Policy", "")
    if "script-src 'self'" not in csp or headers.get("X-Content-Type-Options") != "nosniff":
        fail("/ lacks its security headers: %s" % headers)
    code, headers, body = http_get(status_url + "/assets/uPlot.iife.min.js")
    if code != 200 or b"uPlot" not in body or "javascript" not in headers.get("Content-Type", ""):
        fail("the bundled uPlot is not served (%d, %d bytes)" % (code, len(body)))
    try:
        http_get(status_url + "/assets/nothing.js")
        fail("/assets/nothing.js was served")
    except urllib.error.HTTPError as e:
        if e.code != 404:
            fail("/assets/nothing.js answered %d, want 404" % e.code)
    print("served: / (%d bytes of page) with CSP and nosniff; the bundled uPlot; 404 otherwise"
          % len(http_get(status_url + "/")[2]))


def check_completed(args, driver, job_id):
    status = get_json(args.status + "/status")
    hist = job_of(get_json(args.status + "/status/jobs"), job_id)
    job = job_of(status, job_id)
    want = links_of(job)
    if len(want) != 6:
        fail("the completed job used %d directed links, want 6: %s" % (len(want), want))
    # The codecs the links' rates call for, not any codec: beta <-> gamma (5 Mbit/s) carry
    # activations and gradients of 4 x 32 x 64 floats (32 KiB: about 52 ms in fp32 and 26 ms
    # in bf16 at that rate, against a microbatch's compute of a few ms), so the controller must
    # have left fp32 and bf16 for q8 or q4 (a controller stuck at fp32 fails here); alpha <->
    # gamma carry only the tied embedding's exchange, exact by the job's compression.tied.
    for key in (("beta", "gamma"), ("gamma", "beta")):
        if want.get(key, ("",))[0] not in ("q8", "q4"):
            fail("the 5 Mbit/s link %s -> %s carried %r, want q8 or q4" % (key + (want.get(key),)))
    for key in (("alpha", "gamma"), ("gamma", "alpha")):
        if want.get(key, ("",))[0] != "fp32":
            fail("the tied-embedding link %s -> %s carried %r, want fp32" % (key + (want.get(key),)))
    losses = hist["losses"]

    def page_ready():
        p = driver.run(READ_PAGE)
        card = [c for c in p["jobs"] if c["job"] == job_id]
        ok = (p["updates"] >= 1 and card and card[0]["points"] == len(losses) and
              p["graphJob"] == job_id and sum(1 for e in p["edges"] if e["codec"]) == 6)
        return (ok, p)
    page = wait_for("the page to show the completed job", page_ready, 60)[1]
    if sorted(page["nodes"]) != ["alpha", "beta", "gamma"] or page["site"] != "alpha":
        fail("graph nodes %s on site %r, want alpha, beta, gamma" % (page["nodes"], page["site"]))
    labels = {(l["from"], l["to"]): l["text"] for l in page["labels"]}
    for e in page["edges"]:
        key = (e["from"], e["to"])
        if key not in want:
            fail("the page shows a link %s -> %s the job did not use" % key)
        codec, ratio, reason = want[key]
        if e["codec"] != codec or not math.isclose(e["ratio"], ratio, rel_tol=1e-9):
            fail("link %s -> %s: page shows %s %.6f, /status has %s %.6f"
                 % (key + (e["codec"], e["ratio"], codec, ratio)))
        if codec not in CODECS:
            fail("link %s -> %s has an unexpected codec %r" % (key + (codec,)))
        text = labels.get(key, "")
        if codec not in text or ("%.2fx" % ratio) not in text or "Mbit/s" not in text:
            fail("link %s -> %s is labelled %r, want %s and %.2fx and a bandwidth"
                 % (key + (text, codec, ratio)))
        if not e["mbps"] or float(e["mbps"]) <= 0:
            fail("link %s -> %s shows no measured bandwidth" % key)
        # A link exact by rule (the tied embedding's exchange) says so, not just "fp32".
        if reason.startswith("exact:") and "tied embedding" not in text:
            fail("link %s -> %s is exact by rule (%r) but its label %r does not say why"
                 % (key + (reason, text)))
    if not any(w[2].startswith("exact:") for w in want.values()):
        fail("no link of the 3-stage job carries the tied embedding's exact exchange: %r" % want)
    card = [c for c in page["jobs"] if c["job"] == job_id][0]
    if card["state"] != "completed" or not math.isclose(card["lastLoss"], losses[-1], rel_tol=1e-12):
        fail("completed job card: state %s, last loss %r; /status/jobs: %r"
             % (card["state"], card["lastLoss"], losses[-1]))
    plotted = driver.run("return window.longhaulCharts.get(%s).loss.data;" % json.dumps(job_id))
    steps = hist["steps"]
    if steps != list(range(1, len(losses) + 1)):
        fail("/status/jobs has steps %s for a 30-step job" % steps)
    if plotted[0] != steps or plotted[1] != losses:
        fail("the loss chart plots steps %s losses %s; /status/jobs has %s" % (
            plotted[0][:5], plotted[1][:5], losses[:5]))
    val = {v["step"]: v["loss"] for v in hist.get("val_losses", [])}
    if not val:
        fail("the completed job has no validation losses in /status/jobs")
    want_val = [val.get(s) for s in steps]
    if plotted[2] != want_val:
        fail("the loss chart plots validation %s; /status/jobs has %s" % (plotted[2], want_val))
    check_log_axis(driver, job_id, losses)
    if card["canvases"] < 2 or card["stages"] != 3:
        fail("completed job card has %d chart canvases and %d stage rows"
             % (card["canvases"], card["stages"]))
    up = [r for r in page["peers"] if len(r) > 2 and r[2] == "up"]
    if len(up) != 2:
        fail("peers table: %s, want beta and gamma up" % page["peers"])
    print("completed job %s: 3 sites, 6 links with the codecs and ratios of /status (%s), "
          "%d losses plotted, the last %.4f" % (job_id, ", ".join(
              "%s>%s %s %.2fx" % (f, t, c, r) for (f, t), (c, r, _) in sorted(want.items())),
              len(losses), losses[-1]))


def check_log_axis(driver, job_id, losses):
    """The loss chart's y axis is logarithmic, its ticks round numbers in the scale's range
    (increasing, at least two) each with a label, and the scale holds every plotted loss."""
    axis = driver.run("const u = window.longhaulCharts.get(%s).loss; return {distr: "
                      "u.scales.y.distr, min: u.scales.y.min, max: u.scales.y.max, "
                      "splits: u.axes[1]._splits, values: u.axes[1]._values};" % json.dumps(job_id))
    if axis["distr"] != 3:
        fail("the loss chart's axis has distribution %r, want 3 (logarithmic)" % axis["distr"])
    splits, values = axis["splits"] or [], axis["values"] or []
    if len(splits) < 2 or splits != sorted(splits) or len(values) != len(splits):
        fail("the loss axis has ticks %s labelled %s" % (splits, values))
    if any(not v for v in values) or any(float(v) != s for v, s in zip(values, splits)):
        fail("the loss axis labels %s do not read as its ticks %s" % (values, splits))
    if not (axis["min"] <= splits[0] and splits[-1] <= axis["max"]):
        fail("the loss axis ticks %s leave its range [%s, %s]" % (splits, axis["min"], axis["max"]))
    if not (axis["min"] <= min(losses) and max(losses) <= axis["max"]):
        fail("the loss axis [%s, %s] does not hold the losses [%s, %s]"
             % (axis["min"], axis["max"], min(losses), max(losses)))
    print("loss axis: logarithmic over [%.3f, %.3f], ticks %s"
          % (axis["min"], axis["max"], ", ".join(values)))


def check_stage_site(args, driver, job_id):
    """beta runs stage 1 of the job alpha coordinates: its /status lists that stage with its
    coordinator, and its page says so instead of "no job"."""
    hosted = [h for h in get_json(args.stage_status + "/status")["hosted_stages"]
              if h["job"] == job_id]
    if len(hosted) != 1 or hosted[0]["coordinator"] != "alpha":
        fail("beta's /status lists %s for job %s, want its stage coordinated by alpha"
             % (hosted, job_id))
    h = hosted[0]
    want = "stage %d of job %s, layers [%d,%d), coordinated by site 'alpha'" % (
        h["stage"], job_id, h["layers"][0], h["layers"][1])
    driver.open(args.stage_status + "/")

    def shows_stage():
        p = driver.run("return {noJobs: document.getElementById('no-jobs').hidden, cards: "
                       "[...document.querySelectorAll('.hosted-stage')].map((c) => ({job: "
                       "c.dataset.job, coordinator: c.dataset.coordinator, line: "
                       "c.querySelector('.hosted-line').textContent}))};")
        cards = [c for c in p["cards"] if c["job"] == job_id]
        return (p["noJobs"] and cards and cards[0]["line"] == want and
                cards[0]["coordinator"] == "alpha", p)
    wait_for("beta's page to show its stage of %s" % job_id, shows_stage, 30)
    if h["stage"] != 1 or h["layers"] != [1, 2]:
        fail("beta runs stage %d, layers %s of the even 3-site job, want 1, [1, 2]"
             % (h["stage"], h["layers"]))
    print("stage site: beta's page says \"%s\"" % want)
    driver.open(args.status + "/")


def check_running(args, driver, job_id):
    def running():
        s = job_of(get_json(args.status + "/status"), job_id)
        ok = s and s["state"] == "running" and s["step"] >= 8 and len(links_of(s)) == 6
        return (ok, s and {k: s[k] for k in ("state", "step", "detail")})
    wait_for("the running job to pass step 8 on all six links", running, 240)

    def page_follows():
        before = job_of(get_json(args.status + "/status"), job_id)["step"]
        p = driver.run(READ_PAGE)
        hist = job_of(get_json(args.status + "/status/jobs"), job_id)
        card = [c for c in p["jobs"] if c["job"] == job_id]
        edges = [e for e in p["edges"] if e["codec"]]
        ok = (card and card[0]["state"] == "running" and card[0]["points"] >= 8 and
              p["graphJob"] == job_id and len(edges) == 6)
        return (ok, p, hist, before)
    _, page, hist, before = wait_for("the page to follow the running job", page_follows, 60)
    card = [c for c in page["jobs"] if c["job"] == job_id][0]
    # The page read the job after `before` was taken: its curve ends at or after that step,
    # and every loss it plots is the one the daemon recorded for that step.
    if card["lastStep"] < min(before, 8) or card["lastStep"] not in hist["steps"]:
        fail("the page's curve ends at step %d; the job was at step %d, then %d"
             % (card["lastStep"], before, hist["steps"][-1]))
    want = hist["losses"][hist["steps"].index(card["lastStep"])]
    if not math.isclose(card["lastLoss"], want, rel_tol=1e-12):
        fail("the page plots loss %r at step %d; /status/jobs has %r"
             % (card["lastLoss"], card["lastStep"], want))
    for e in page["edges"]:
        if e["codec"] not in CODECS or not e["ratio"] > 0:
            fail("running job: link %s -> %s shows codec %r ratio %r"
                 % (e["from"], e["to"], e["codec"], e["ratio"]))
    size = driver.screenshot(args.screenshot)
    if size < 20000:
        fail("the screenshot is only %d bytes" % size)
    # Once the curve has grown, the page is live: it re-reads the daemon on its own.
    first = card["points"]
    wait_for("the page's curve to grow", lambda: [
        c for c in driver.run(READ_PAGE)["jobs"] if c["job"] == job_id and c["points"] > first], 60)
    print("running job %s: the page followed it live (curve at step %d, loss %.4f as "
          "/status/jobs has it), 6 links with codecs %s; screenshot %s (%d bytes)"
          % (job_id, card["lastStep"], card["lastLoss"],
             sorted({e["codec"] for e in page["edges"]}), args.screenshot, size))

    check_stage_site(args, driver, job_id)

    r = subprocess.run([args.cli, "--config", args.config, "cancel", job_id],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("cancel failed: %s %s" % (r.stdout, r.stderr))
    wait_for("the page to show the job cancelled", lambda: [
        c for c in driver.run(READ_PAGE)["jobs"] if c["job"] == job_id and c["state"] == "cancelled"], 30)
    print("cancelled: the page shows it")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--config", required=True, help="the coordinating site's config")
    ap.add_argument("--status", required=True, help="its status listener, http://HOST:PORT")
    ap.add_argument("--stage-status", required=True,
                    help="the status listener of beta, which runs stage 1 of the jobs")
    ap.add_argument("--done-job", required=True)
    ap.add_argument("--running-job", required=True)
    ap.add_argument("--driver-port", type=int, required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--screenshot", required=True)
    args = ap.parse_args()

    check_served(args.status)
    done = submit(args, args.done_job)
    wait_for("job %s to complete" % done, lambda: (
        job_of(get_json(args.status + "/status"), done)["state"] == "completed"), 300)
    driver = WebDriver(args.driver_port, args.work)
    try:
        driver.open(args.status + "/")
        check_completed(args, driver, done)
        check_running(args, driver, submit(args, args.running_job))
        if "ok" not in driver.run(READ_PAGE)["conn"]:
            fail("the page says it cannot reach the daemon")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
