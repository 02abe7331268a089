// The status page's logic: polls /status and /status/jobs every two seconds and renders the
// node, its peers, the graph of links (graph.js) and each job coordinated here: progress,
// the loss curve (on a log axis), step time against the planner's prediction, compute and
// wait per stage, sync groups, and the re-plans, rollbacks and replica changes as marks on the
// curves; and the stages this site runs of jobs other sites coordinate, naming the
// coordinator.
// Everything a daemon or peer reports is set as text (textContent), never as markup.
'use strict';

(function () {
  const POLL_MS = 2000;
  const MAX_JOB_CARDS = 6;
  const charts = new Map();  // job id -> {loss, time} uPlot instances
  window.longhaulCharts = charts;  // what each chart plots, for the browser test
  let updates = 0;

  const $ = (id) => document.getElementById(id);

  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else e.setAttribute(k, String(v));
    }
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }

  function num(v, digits) {
    return typeof v === 'number' && isFinite(v) ? v.toFixed(digits) : '-';
  }

  function duration(s) {
    if (!(s > 0) || !isFinite(s)) return '-';
    if (s < 60) return s.toFixed(0) + ' s';
    if (s < 3600) return (s / 60).toFixed(1) + ' min';
    if (s < 86400) return (s / 3600).toFixed(1) + ' h';
    return (s / 86400).toFixed(1) + ' d';
  }

  const ACTIVE = ['running', 'recovering', 'pending'];
  function jobOrder(a, b) {
    const aa = ACTIVE.includes(a.state) ? 0 : 1, bb = ACTIVE.includes(b.state) ? 0 : 1;
    if (aa !== bb) return aa - bb;
    return (b.submitted_unix || 0) - (a.submitted_unix || 0);
  }

  function renderNode(status) {
    $('site').textContent = status.site;
    document.title = 'longhaul \u00b7 ' + status.site;
    $('node').textContent = `version ${status.version} \u00b7 protocol ${status.protocol_version}` +
        ` \u00b7 up ${duration(status.uptime_seconds)} \u00b7 peers ${status.peers_up}/` +
        `${status.peers_total} up \u00b7 devices ${(status.devices || []).join(', ') || '-'}` +
        ` \u00b7 peer TLS ${status.tls ? 'on' : 'off'}`;
    const w = $('warning');
    w.hidden = !status.warning;
    w.textContent = status.warning || '';
  }

  function renderPeers(status) {
    const body = document.querySelector('#peers tbody');
    body.replaceChildren();
    for (const l of status.links || []) {
      const mbps = (e) => e && e.bandwidth_bytes_per_second > 0 ? num(e.bandwidth_mbit_per_second, 1) : '-';
      body.append(h('tr', {'data-peer': l.peer},
        h('td', {}, l.peer), h('td', {}, l.address),
        h('td', {class: 'state ' + (l.state === 'up' ? 'ok' : 'bad')}, l.state),
        h('td', {}, duration(l.up_seconds)), h('td', {}, l.reconnects),
        h('td', {}, mbps(l.outbound)), h('td', {}, mbps(l.inbound)),
        h('td', {}, l.outbound && l.outbound.rtt_seconds > 0 ? num(l.outbound.rtt_seconds * 1e3, 1) : '-'),
        h('td', {class: 'detail'}, l.detail || '')));
    }
    if (!(status.links || []).length) {
      body.append(h('tr', {}, h('td', {colspan: 9, class: 'muted'}, 'no peers configured')));
    }
  }

  const EVENT_COLORS = {rollback: '#c0392b', replan: '#8e44ad', replica_drop: '#d35400',
                        replica_rejoin: '#16a085', site_added: '#2563eb', site_removed: '#6b7280'};

  // A uPlot plugin that draws the job's events as vertical marks with their kind.
  function eventMarks(getEvents) {
    return {hooks: {draw: [(u) => {
      const ctx = u.ctx;
      ctx.save();
      ctx.font = `${11 * devicePixelRatio}px sans-serif`;
      for (const ev of getEvents()) {
        const x = Math.round(u.valToPos(ev.step, 'x', true));
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
        ctx.strokeStyle = ctx.fillStyle = EVENT_COLORS[ev.kind] || '#555';
        ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
        ctx.lineWidth = devicePixelRatio;
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.fillText(ev.kind.replace('_', ' '), x + 3 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio);
      }
      ctx.restore();
    }]}};
  }

  function chartWidth(el) {
    return Math.max(280, Math.floor(el.getBoundingClientRect().width) - 4);
  }

  function makeCharts(card, jobId) {
    const state = {events: []};
    const lossEl = card.querySelector('.chart-loss'), timeEl = card.querySelector('.chart-time');
    const axes = (label) => [{label: 'step'}, {label, size: 60}];
    // The loss on a logarithmic axis: the first steps' fall does not flatten the rest. Round
    // ticks spread in log space (graph.js), every one labelled (uPlot's own log filter would
    // keep only some).
    const G = LonghaulGraph;
    const lossAxes = [{label: 'step'}, {
      label: 'loss (log scale)', size: 60,
      splits: (u, i, min, max) => G.logTicks(min, max, u.bbox.height / devicePixelRatio, 24),
      filter: (u, splits) => splits,
      values: (u, splits) => splits.map((v) => (v === null ? '' : G.fmtTick(v))),
    }];
    const loss = new uPlot({
      width: chartWidth(lossEl), height: 220, title: 'loss',
      scales: {x: {time: false},
               y: {distr: 3, log: 10, range: (u, min, max) => G.logRange(min, max)}},
      series: [{label: 'step'},
               {label: 'train', stroke: '#2563eb', width: 1.5},
               {label: 'validation', stroke: '#ea580c', width: 2, spanGaps: true,
                points: {show: true, size: 6}}],
      axes: lossAxes, plugins: [eventMarks(() => state.events)],
    }, [[], [], []], lossEl);
    const time = new uPlot({
      width: chartWidth(timeEl), height: 220, title: 'step time (s)',
      scales: {x: {time: false}},
      series: [{label: 'step'},
               {label: 'measured', stroke: '#059669', width: 1.5},
               {label: 'planner', stroke: '#6b7280', width: 1.5, dash: [6, 4]}],
      axes: axes('seconds'), plugins: [eventMarks(() => state.events)],
    }, [[], [], []], timeEl);
    const c = {loss, time, state};
    charts.set(jobId, c);
    return c;
  }

  function historyData(hist) {
    const steps = [], train = [], val = [], times = [], predicted = [];
    const valBy = new Map((hist.val_losses || []).map((v) => [v.step, v.loss]));
    // A log axis has no place for a loss that is not positive: left out (a gap).
    const positive = (v) => (typeof v === 'number' && v > 0 && isFinite(v) ? v : null);
    const n = (hist.losses || []).length;
    for (let i = 0; i < n; i++) {
      const step = hist.steps[i];
      steps.push(step);
      train.push(positive(hist.losses[i]));
      val.push(valBy.has(step) ? positive(valBy.get(step)) : null);
      const t = (hist.step_times || [])[i];
      times.push(typeof t === 'number' ? t : null);
      predicted.push(hist.predicted_step_seconds > 0 ? hist.predicted_step_seconds : null);
    }
    return {steps, train, val, times, predicted};
  }

  function fact(label, value) {
    return h('span', {class: 'fact'}, h('span', {class: 'label'}, label), ' ', h('b', {}, value));
  }

  function stageRows(job) {
    const rows = [];
    const longest = Math.max(1e-9, ...(job.stages || []).map((s) => s.step_seconds || 0));
    for (const s of job.stages || []) {
      const bar = h('div', {class: 'bar'});
      const compute = h('span', {class: 'compute'}), wait = h('span', {class: 'wait'});
      compute.style.width = (100 * (s.compute_seconds || 0) / longest).toFixed(1) + '%';
      wait.style.width = (100 * (s.network_wait_seconds || 0) / longest).toFixed(1) + '%';
      bar.append(compute, wait);
      // A replica out of the job (dropped, or removed for good) says so after its site.
      const site = s.membership && s.membership !== 'in' ? `${s.site} (${s.membership})` : s.site;
      rows.push(h('tr', {'data-stage': s.stage, 'data-membership': s.membership || 'in'},
        h('td', {}, s.stage), h('td', {}, site), h('td', {}, `[${s.layers[0]},${s.layers[1]})`),
        h('td', {}, num(s.compute_seconds, 3)), h('td', {}, num(s.network_wait_seconds, 3)),
        h('td', {}, num(s.step_seconds, 3)), h('td', {}, s.syncs || 0),
        h('td', {class: 'bar-cell'}, bar)));
    }
    return rows;
  }

  function renderJob(card, job, hist) {
    card.dataset.state = job.state;
    const title = card.querySelector('.job-title');
    title.replaceChildren(h('span', {}, job.name || job.job), ' ',
                          h('span', {class: 'muted'}, job.job), ' ',
                          h('span', {class: 'badge ' + job.state}, job.state));
    const predicted = hist && hist.predicted_step_seconds > 0 ? hist.predicted_step_seconds : 0;
    const facts = card.querySelector('.facts');
    facts.replaceChildren(
      fact('step', `${job.step} / ${job.steps}`), fact('committed', job.committed_step),
      fact('loss', num(job.loss, 4)), fact('tokens/s', num(job.tokens_per_second, 0)),
      fact('step time', num(job.step_seconds, 3) + ' s'),
      fact('planner', predicted ? num(predicted, 3) + ' s' : '-'),
      fact('attempt', job.attempt), fact('re-plans', hist ? hist.replans : '-'));
    if (job.replicas_added || job.replicas_removed) {
      facts.append(fact('replicas joined / left', `${job.replicas_added || 0} / ${job.replicas_removed || 0}`));
    }
    const val = hist && hist.val_losses && hist.val_losses.length ?
        hist.val_losses[hist.val_losses.length - 1] : null;
    if (val) facts.append(fact('validation', `${num(val.loss, 4)} (step ${val.step})`));
    // A mixture's sources: the share of tokens each has given so far against its weight.
    const sources = job.data_sources || [];
    if (sources.length > 1) {
      const weights = sources.reduce((a, d) => a + (d.weight || 0), 0);
      for (const d of sources) {
        const name = String(d.name || '').replace(/\/(manifest\.json)?$/, '').split('/').pop();
        facts.append(fact('data ' + name,
            `${num(100 * (d.share || 0), 1)}% (asked ${num(weights ? 100 * d.weight / weights : 0, 1)}%)`));
      }
    }
    card.querySelector('.detail').textContent = job.detail || '';

    const c = charts.get(job.job) || makeCharts(card, job.job);
    if (hist) {
      const d = historyData(hist);
      c.state.events = hist.events || [];
      c.loss.setData([d.steps, d.train, d.val]);
      c.time.setData([d.steps, d.times, d.predicted]);
      card.dataset.lossPoints = d.steps.length;
      card.dataset.lastStep = d.steps.length ? d.steps[d.steps.length - 1] : 0;
      card.dataset.lastLoss = d.train.length ? d.train[d.train.length - 1] : '';
      card.dataset.valPoints = d.val.filter((v) => v !== null).length;
      const list = card.querySelector('.events');
      list.replaceChildren(...(hist.events || []).slice(-8).reverse().map((ev) =>
        h('li', {}, h('b', {}, `step ${ev.step} \u00b7 ${ev.kind.replace('_', ' ')}`),
          ' ', new Date(ev.unix_seconds * 1000).toLocaleTimeString(), ' \u2014 ', ev.detail)));
      card.querySelector('.events-block').hidden = !(hist.events || []).length;
    }
    card.querySelector('.stages tbody').replaceChildren(...stageRows(job));

    const groups = job.sync_groups || [];
    card.querySelector('.sync-block').hidden = groups.length === 0;
    card.querySelector('.sync tbody').replaceChildren(...groups.map((g) => h('tr', {},
      h('td', {}, g.group), h('td', {}, (g.sites || []).join(', ')), h('td', {}, g.codec),
      h('td', {}, LonghaulGraph.fmtRatio(g.compression_ratio)), h('td', {}, g.syncs),
      h('td', {}, (g.wire_bytes / 1e6).toFixed(2)), h('td', {}, num(g.exposed_seconds, 2)),
      h('td', {}, num(g.hidden_seconds, 2)),
      h('td', {}, g.consensus_step > 0
        ? `${num(g.consensus_distance, 4)} @ ${g.consensus_step}` : '\u2014'),
      h('td', {}, (g.key_frames || 0) + (g.frames_skipped || 0) > 0
        ? `${g.key_frames || 0} / ${g.frames_skipped || 0}` : '\u2014'),
      // A replica's last stage found its tied embedding unlike its first stage's and took the
      // first's: none expected (a bug to report; the stage's log says more).
      g.tied_mends > 0
        ? h('td', {class: 'state bad', title: 'see the replica\'s last stage\'s log'},
          String(g.tied_mends))
        : h('td', {}, '\u2014'))));
  }

  function newJobCard(id) {
    const table = (cls, heads) => h('table', {class: cls},
      h('thead', {}, h('tr', {}, ...heads.map((x) => h('th', {}, x)))), h('tbody'));
    const card = h('section', {class: 'card job', 'data-job': id},
      h('h2', {class: 'job-title'}), h('div', {class: 'facts'}), h('div', {class: 'detail muted'}),
      h('div', {class: 'charts'}, h('div', {class: 'chart chart-loss'}), h('div', {class: 'chart chart-time'})),
      h('h3', {}, 'Stages: compute and network wait of the last step'),
      table('stages', ['stage', 'site', 'layers', 'compute s', 'wait s', 'step s', 'syncs', '']),
      h('div', {class: 'sync-block'}, h('h3', {}, 'Sync groups'),
        table('sync', ['group', 'sites', 'codec', 'ratio', 'syncs', 'MB sent', 'exposed s', 'hidden s',
          'consensus', 'keys / skipped', 'tied mends'])),
      h('div', {class: 'events-block'}, h('h3', {}, 'Timeline'), h('ul', {class: 'events'})));
    return card;
  }

  // A stage this site runs of a job another site coordinates: which stage and layers, how it
  // is doing, and the coordinator whose page shows the job.
  function hostedStageCard(s) {
    const card = h('section', {class: 'card hosted-stage', 'data-job': s.job,
                               'data-coordinator': s.coordinator, 'data-state': s.state});
    const layers = `[${s.layers[0]},${s.layers[1]})`;
    card.append(
      h('h2', {class: 'job-title'}, h('span', {}, s.name || s.job), ' ',
        h('span', {class: 'muted'}, s.job), ' ', h('span', {class: 'badge ' + s.state}, s.state)),
      h('p', {class: 'hosted-line'},
        `stage ${s.stage} of job ${s.job}, layers ${layers}, coordinated by site '${s.coordinator}'`),
      h('div', {class: 'facts'}, fact('step', `${s.step} / ${s.steps}`),
        fact('attempt', s.attempt)),
      h('p', {class: 'muted'}, 'The job\'s progress and curves are on the page of its ' +
        `coordinator, site '${s.coordinator}'; longhaul status ${s.job} asks that site's daemon.`));
    if (s.error) card.append(h('div', {class: 'detail'}, s.error));
    return card;
  }

  function renderJobs(status, history) {
    const jobs = (status.jobs || []).slice().sort(jobOrder).slice(0, MAX_JOB_CARDS);
    const hosted = (status.hosted_stages || []).slice(0, MAX_JOB_CARDS);
    const byId = new Map((history.jobs || []).map((j) => [j.job, j]));
    const container = $('jobs');
    $('no-jobs').hidden = jobs.length > 0 || hosted.length > 0;
    for (const card of [...container.querySelectorAll('.hosted-stage')]) card.remove();
    const keep = new Set(jobs.map((j) => j.job));
    for (const card of [...container.querySelectorAll('.job')]) {
      if (!keep.has(card.dataset.job)) {
        const c = charts.get(card.dataset.job);
        if (c) { c.loss.destroy(); c.time.destroy(); charts.delete(card.dataset.job); }
        card.remove();
      }
    }
    for (const job of jobs) {
      let card = container.querySelector(`.job[data-job="${CSS.escape(job.job)}"]`);
      if (!card) {
        card = newJobCard(job.job);
        container.append(card);
      }
      container.append(card);  // keeps the cards in order
      renderJob(card, job, byId.get(job.job));
    }
    for (const s of hosted) container.append(hostedStageCard(s));
    return jobs[0] || null;
  }

  // With no job coordinated here, the graph shows the first hosted stage's job as this site
  // sees it: what its stage sends on each outbound link (/status links[].jobs).
  function hostedGraphJob(status) {
    const s = (status.hosted_stages || [])[0];
    if (!s) return null;
    const links = [];
    for (const l of status.links || []) {
      for (const u of l.jobs || []) if (u.job === s.job) links.push(u);
    }
    return {job: s.job, stages: [], links};
  }

  async function getJson(path) {
    const r = await fetch(path, {cache: 'no-store'});
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
    return r.json();
  }

  async function poll() {
    try {
      const [status, history] = await Promise.all([getJson('/status'), getJson('/status/jobs')]);
      renderNode(status);
      renderPeers(status);
      const shown = renderJobs(status, history) || hostedGraphJob(status);
      const graph = LonghaulGraph.collect(status, shown);
      LonghaulGraph.draw($('graph'), graph);
      $('graph-card').dataset.job = shown ? shown.job : '';
      updates++;
      document.body.dataset.updates = updates;
      $('conn').className = 'conn ok';
      $('conn').textContent = 'live \u00b7 updated ' + new Date().toLocaleTimeString();
    } catch (e) {
      $('conn').className = 'conn bad';
      $('conn').textContent = 'cannot reach the daemon: ' + e.message;
    }
    setTimeout(poll, POLL_MS);
  }

  window.addEventListener('resize', () => {
    for (const c of charts.values()) {
      for (const u of [c.loss, c.time]) u.setSize({width: chartWidth(u.root.parentNode), height: 220});
    }
  });
  poll();
})();
