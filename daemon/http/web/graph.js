// The status page's graph of sites and links: which directed links exist and what each one
// carries (collect), drawn as sites on a circle with one arrow per direction (draw); and the
// loss chart's logarithmic axis (logRange, logTicks, fmtTick). Every string comes from a
// daemon or a peer, so it is set as text, never parsed as markup.
'use strict';

window.LonghaulGraph = (function () {
  const SVG = 'http://www.w3.org/2000/svg';

  function fmtMbps(v) {
    if (v === null || !isFinite(v)) return '? Mbit/s';
    if (v >= 1000) return (v / 1000).toFixed(2) + ' Gbit/s';
    if (v >= 100) return v.toFixed(0) + ' Mbit/s';
    return v.toFixed(1) + ' Mbit/s';
  }

  function fmtRatio(r) {
    return r && isFinite(r) ? r.toFixed(2) + 'x' : '-';
  }

  // The nodes (this site first) and directed edges of the graph, from /status and the job
  // shown (one of /status's jobs, or null). An edge's bandwidth and RTT are the link
  // monitor's (this site's links, and what the job's stages report for theirs); its codec and
  // ratio are what the job sent over it.
  function collect(status, job) {
    const nodes = [];
    const addNode = (n) => {
      if (typeof n === 'string' && n !== '' && !nodes.includes(n)) nodes.push(n);
    };
    addNode(status.site);
    const edges = new Map();
    const edge = (from, to) => {
      const key = from + '\u2192' + to;
      if (!edges.has(key)) {
        edges.set(key, {from, to, mbps: null, rttMs: null, codec: null, ratio: null, reason: '', up: true});
      }
      return edges.get(key);
    };
    const estimate = (e, est) => {
      if (!est) return;
      if (est.bandwidth_bytes_per_second > 0) e.mbps = est.bandwidth_bytes_per_second * 8 / 1e6;
      if (est.rtt_seconds > 0) e.rttMs = est.rtt_seconds * 1e3;
    };
    for (const l of status.links || []) {
      addNode(l.peer);
      const out = edge(status.site, l.peer);
      const back = edge(l.peer, status.site);
      out.up = back.up = l.state === 'up';
      estimate(out, l.outbound);
      estimate(back, l.inbound);
    }
    if (job) {
      for (const s of job.stages || []) addNode(s.site);
      for (const u of job.links || []) {
        addNode(u.from);
        addNode(u.to);
        const e = edge(u.from, u.to);
        e.codec = u.codec;
        e.ratio = u.compression_ratio;
        e.reason = u.reason || '';
        if (e.mbps === null && u.bandwidth_bytes_per_second > 0) {
          e.mbps = u.bandwidth_bytes_per_second * 8 / 1e6;
        }
        if (e.rttMs === null && u.rtt_seconds > 0) e.rttMs = u.rtt_seconds * 1e3;
      }
    }
    return {nodes, edges: [...edges.values()].filter((e) => nodes.includes(e.to))};
  }

  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function codecClass(codec) {
    if (!codec) return 'idle';
    if (codec === 'fp32' || codec === 'exact' || codec === 'off') return 'exact';
    if (codec === 'bf16' || codec === 'q8' || codec === 'q4') return codec;
    return 'other';
  }

  // Draws `graph` (collect's result) into the <svg> `svg`, replacing what it held.
  function draw(svg, graph) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 760, H = 460, R = 34;
    const cx = W / 2, cy = H / 2 + 5, ring = Math.min(W, H) / 2 - 70;
    const defs = el('defs');
    for (const cls of ['idle', 'exact', 'bf16', 'q8', 'q4', 'other', 'down']) {
      const m = el('marker', {id: 'arrow-' + cls, viewBox: '0 0 10 10', refX: 9, refY: 5,
                              markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'});
      m.appendChild(el('path', {d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead ' + cls}));
      defs.appendChild(m);
    }
    svg.appendChild(defs);
    const pos = new Map();
    graph.nodes.forEach((n, i) => {
      const a = -Math.PI / 2 + 2 * Math.PI * i / Math.max(graph.nodes.length, 1);
      pos.set(n, graph.nodes.length === 1 ? [cx, cy] : [cx + ring * Math.cos(a), cy + ring * Math.sin(a)]);
    });
    const edgeLayer = el('g', {class: 'edges'});
    const labelLayer = el('g', {class: 'labels'});
    const bulge = 34;
    // Each direction's arrow bulges to its right; both labels of a pair of sites sit on the
    // side of their chord away from the ring's centre, where there is room.
    const labelsOf = new Map();  // unordered pair -> count placed
    for (const e of graph.edges) {
      const [x1, y1] = pos.get(e.from), [x2, y2] = pos.get(e.to);
      const dx = x2 - x1, dy = y2 - y1, len = Math.hypot(dx, dy) || 1;
      const nx = dy / len, ny = -dx / len;  // the right-hand side of the direction of travel
      const qx = (x1 + x2) / 2 + nx * bulge, qy = (y1 + y2) / 2 + ny * bulge;
      // Start and end on the nodes' rims, toward the control point.
      const rim = (x, y) => {
        const ex = qx - x, ey = qy - y, l = Math.hypot(ex, ey) || 1;
        return [x + ex / l * (R + 2), y + ey / l * (R + 2)];
      };
      const [sx, sy] = rim(x1, y1), [tx, ty] = rim(x2, y2);
      const cls = e.up ? codecClass(e.codec) : 'down';
      const g = el('g', {class: 'edge ' + cls, 'data-from': e.from, 'data-to': e.to,
                         'data-codec': e.codec || '', 'data-ratio': e.ratio || 0,
                         'data-mbps': e.mbps === null ? '' : e.mbps.toFixed(3)});
      g.appendChild(el('path', {d: `M${sx},${sy} Q${qx},${qy} ${tx},${ty}`,
                                class: 'link ' + cls, 'marker-end': `url(#arrow-${cls})`}));
      edgeLayer.appendChild(g);

      const mx = (x1 + x2) / 2, my = (y1 + y2) / 2;
      let ox = nx, oy = ny;  // the outer normal of the chord
      if ((mx - cx) * ox + (my - cy) * oy < 0) { ox = -ox; oy = -oy; }
      const pair = [e.from, e.to].sort().join('\u2194');
      const k = labelsOf.get(pair) || 0;
      labelsOf.set(pair, k + 1);
      const bx = mx + ox * (bulge * 0.6 + 12), by = my + oy * (bulge * 0.6 + 12);
      const anchor = ox > 0.35 ? 'start' : ox < -0.35 ? 'end' : 'middle';
      let ly;
      if (anchor === 'middle') {
        ly = oy > 0 ? by + 10 + k * 34 : by - 20 - k * 34;
      } else {
        ly = by - 12 + (k === 0 ? -14 : 20);
      }
      const label = el('text', {x: bx, y: ly, 'text-anchor': anchor, class: 'edge-label',
                                'data-from': e.from, 'data-to': e.to});
      label.appendChild(el('tspan', {class: 'dir'}, e.from + ' \u2192 ' + e.to + '  '));
      label.appendChild(el('tspan', {class: 'codec ' + cls},
                           e.codec ? e.codec + ' \u00b7 ' + fmtRatio(e.ratio) : 'no job traffic'));
      const rtt = e.rttMs === null ? '' : ' \u00b7 ' + e.rttMs.toFixed(1) + ' ms';
      label.appendChild(el('tspan', {x: bx, dy: 14, class: 'bw'}, fmtMbps(e.mbps) + rtt));
      // Why a link is exact when the rule, not its bandwidth, decides (the tied embedding's
      // exchange): a slow link left at fp32 otherwise reads as the controller's mistake. The
      // full reason is the label's tooltip.
      if (e.reason.startsWith('exact:')) {
        label.appendChild(el('tspan', {x: bx, dy: 14, class: 'why'}, e.reason.split(' (')[0]));
      }
      if (e.reason) label.appendChild(el('title', {}, e.reason));
      labelLayer.appendChild(label);
    }
    svg.appendChild(edgeLayer);
    for (const n of graph.nodes) {
      const [x, y] = pos.get(n);
      const g = el('g', {class: 'node' + (n === graph.nodes[0] ? ' self' : ''), 'data-site': n});
      g.appendChild(el('circle', {cx: x, cy: y, r: R}));
      g.appendChild(el('text', {x, y: y + 5, 'text-anchor': 'middle'},
                       n.length > 12 ? n.slice(0, 11) + '\u2026' : n));
      svg.appendChild(g);
    }
    svg.appendChild(labelLayer);
  }

  // ---- The loss chart's logarithmic axis ----------------------------------------------
  // A loss falls fast in the first steps and slowly after; on a log axis the slow part keeps
  // its shape. The axis spans the data with a little room (logRange), its ticks are round
  // numbers spread evenly in log space (logTicks) and labelled plainly (fmtTick).

  // Mantissas of the ticks in each decade, sparsest first.
  const MANTISSAS = [[1], [1, 3], [1, 2, 5], [1, 2, 3, 5, 7], [1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9],
                     [1, 1.2, 1.4, 1.6, 1.8, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 7, 8, 9]];

  const round = (v) => +v.toPrecision(12);

  // [lo, hi] around the positive data [min, max], 6% of its span in log space on each side
  // (a flat curve gets a band of 2.3% around it); [1, 10] without data.
  function logRange(min, max) {
    if (!(min > 0) || !(max > 0) || !isFinite(min) || !isFinite(max)) return [1, 10];
    let lo = Math.log10(Math.min(min, max)), hi = Math.log10(Math.max(min, max));
    if (hi - lo < 0.01) {
      const mid = (lo + hi) / 2;
      lo = mid - 0.005;
      hi = mid + 0.005;
    }
    const pad = (hi - lo) * 0.06;
    return [Math.pow(10, lo - pad), Math.pow(10, hi + pad)];
  }

  // Ticks for a log axis over [min, max] that is `height` pixels tall: the most round numbers
  // that stay `minGap` pixels apart, of two kinds: a mantissa set in every decade (2, 3, 5, 7,
  // 10, ...), or the multiples of a step of 1, 2 or 5 x 10^k (what a range within a decade or
  // a few percent needs: there a log axis is nearly linear). A mantissa set wins a tie.
  function logTicks(min, max, height, minGap) {
    if (!(min > 0) || !(max > min) || !(height > 0) || !isFinite(max)) return [];
    minGap = minGap || 24;
    const lo = Math.log10(min), hi = Math.log10(max);
    const px = (v) => (Math.log10(v) - lo) / (hi - lo) * height;
    const inside = (v) => v >= min * (1 - 1e-12) && v <= max * (1 + 1e-12);
    const candidates = [];
    for (const set of MANTISSAS) {
      const ticks = [];
      for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
        for (const m of set) {
          const v = round(m * Math.pow(10, e));
          if (inside(v)) ticks.push(v);
        }
      }
      candidates.push(ticks);
    }
    const mag = Math.pow(10, Math.floor(Math.log10(max - min)));
    for (const k of [1, 0, -1, -2]) {
      for (const m of [5, 2, 1]) {
        const step = m * mag * Math.pow(10, k);
        const ticks = [];
        for (let i = Math.ceil(min / step - 1e-9); i * step <= max * (1 + 1e-12); i++) {
          const v = round(i * step);
          if (v > 0 && inside(v)) ticks.push(v);
        }
        candidates.push(ticks);
      }
    }
    const gapOf = (ticks) => {
      let gap = Infinity;
      for (let i = 1; i < ticks.length; i++) gap = Math.min(gap, px(ticks[i]) - px(ticks[i - 1]));
      return gap;
    };
    let best = [], bestGap = -1;
    for (const ticks of candidates) {
      if (gapOf(ticks) >= minGap && ticks.length > best.length) best = ticks;
    }
    if (best.length >= 2) return best;
    // Nothing fits two ticks `minGap` apart: the two (or more) furthest apart if they are half
    // that apart, else the one.
    for (const ticks of candidates) {
      const gap = gapOf(ticks);
      if (ticks.length >= 2 && gap >= minGap / 2 && gap > bestGap) {
        best = ticks;
        bestGap = gap;
      }
    }
    return best;
  }

  // A tick's label: the number as short as it reads (2, 0.5, 2.35, 1e-7).
  function fmtTick(v) {
    return String(+(+v).toPrecision(6));
  }

  return {collect, draw, fmtMbps, fmtRatio, logRange, logTicks, fmtTick};
})();
