// allot dashboard: reads the worker's state API and draws it (no framework, no build).
"use strict";
const q = new URLSearchParams(location.search);
const cluster = q.get("cluster") || "";
const api = (path, extra) => {
  const p = new URLSearchParams(extra || {});
  if (cluster) p.set("cluster", cluster);
  return fetch(path + (p.toString() ? "?" + p : "")).then(r => r.json());
};
const when = t => t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "-";
const span = s => s < 120 ? s + "s" : s < 7200 ? Math.floor(s / 60) + "m" : s < 172800 ? (s / 3600).toFixed(1) + "h" : (s / 86400).toFixed(1) + "d";
const esc = s => String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const teamOf = b => b.split("/").slice(0, 2).join("/");
const hues = {};
const hue = team => (hues[team] ??= (Object.keys(hues).length * 137) % 360);
const metric = levels => levels.map(l => {
  const r = l.ratio === null ? "-" : l.ratio.toFixed(2);
  const cls = l.ratio !== null && l.ratio < 1 ? "good" : "bad";
  return `${esc(l.node.split("/").pop())} ${(100 * l.usage_fraction).toFixed(0)}%/${(100 * l.share_fraction).toFixed(0)}%=<b class="${cls}">${r}</b>`;
}).join(" &nbsp;");

async function queue() {
  const d = await api("/api/queue", {limit: 300});  // the rows it shows; d.pending counts all
  document.getElementById("cluster").textContent = d.cluster;
  document.getElementById("now").textContent = when(d.now);
  document.getElementById("queue-info").textContent = `${d.pending} pending`;
  const rows = d.rows.slice(0, 300).map(r => `<tr class="w" data-id="${esc(r.workload)}"><td>${r.rank}</td><td>${esc(r.workload)}</td><td>${esc(r.budget)}</td><td>${r.gpus}</td><td>${span(r.waited_s)}</td><td>${r.allocated ? metric(r.sort_metric) : "unallocated"}</td><td>${esc(r.waits_for)}</td></tr>`);
  const body = document.querySelector("#queue tbody");
  body.innerHTML = rows.join("");
  body.dataset.loaded = String(d.rows.length);
  // When the table is first on screen (ms since navigation start): laid out now, painted in
  // the next frame; a task queued from that frame runs after its paint. benchmarks/ reads it.
  void body.offsetHeight;
  if (!body.dataset.renderedMs)
    requestAnimationFrame(() => setTimeout(() => { body.dataset.renderedMs = String(Math.round(performance.now())); }, 0));
}

// A forecast (/api/explain's "forecast") in words with dates, as `allot explain` prints it.
function forecastText(f) {
  if (!f) return "none available";
  const a = f.assumptions || {};
  if (f.status === "running") return `running since ${when(f.start)}`;
  const assumes = `assumes running work ends at its expected duration (else after ${span(a.assumed_runtime_s ?? 14400)}) and nothing new arrives, cancels or fails`;
  if (f.status === "unfinished")
    return `starts after ${when(f.simulated_until)} at the earliest (the live forecast stops after ${f.cycles} simulated cycles; ${f.ahead || 0} workload(s) start before then); ${assumes}`;
  if (f.status === "beyond_horizon" || f.start == null)
    return `does not start within ${span(a.horizon_s ?? 0)}; ${assumes}`;
  const wait = f.wait_s || 0;
  let t = `estimated start ${when(f.start)} (${wait <= 0 ? "now" : "in " + span(wait)})`;
  if (f.placement && f.placement.length) t += " on " + f.placement.join(", ");
  if (f.waits_for && f.waits_for.length) t += ` when ${f.waits_for.join(", ")} end${f.waits_for.length === 1 ? "s" : ""}`;
  t += f.ahead ? `; ${f.ahead} workload(s) start before it` : "; nothing starts before it";
  return `${t}; ${assumes}`;
}

async function explain(id) {
  const el = document.getElementById("explain");
  const d = await api("/api/explain/" + encodeURIComponent(id));
  if (d.error) { el.textContent = d.error; return; }
  const lines = [`${d.workload}: ${d.status} in ${d.budget} (${d.gpus} GPUs as ${d.shape}) at ${when(d.now)}`];
  if (d.blocked_by) lines.push(`blocked by: ${d.blocked_by}` + (d.until ? ` until ${when(d.until)}` : ""));
  for (const s of d.summary || []) lines.push("- " + s);
  lines.push("forecast: " + forecastText(d.forecast));
  el.textContent = lines.join("\n");
  el.dataset.workload = d.workload;
}
document.querySelector("#queue tbody").addEventListener("click", e => {
  const tr = e.target.closest("tr.w"); if (tr) explain(tr.dataset.id);
});

async function usage() {
  const d = await api("/api/usage");
  const svg = document.getElementById("usage");
  const sel = document.getElementById("subtree");
  const nodes = Object.keys(d.samples.at(-1)?.nodes || {}).sort();
  if (sel.options.length !== nodes.length) {
    const roots = nodes.filter(n => n.split("/").length <= 2);
    sel.innerHTML = [...new Set([...roots, ...nodes])].filter(n => nodes.some(m => m.startsWith(n + "/")))
      .map(n => `<option>${esc(n)}</option>`).join("");
  }
  const parent = sel.value || nodes[0] || "";
  const kids = nodes.filter(n => n.startsWith(parent + "/") && !n.slice(parent.length + 1).includes("/"));
  const S = d.samples, W = 560, H = 220, t0 = S[0]?.at || 0, t1 = Math.max(S.at(-1)?.at || 1, t0 + 1);
  const x = t => 40 + (W - 50) * (t - t0) / (t1 - t0), y = v => H - 20 - (H - 30) * v;
  let out = `<line x1="40" y1="${y(0)}" x2="${W}" y2="${y(0)}" stroke="#999"/><text x="2" y="${y(1) + 4}">100%</text><text x="10" y="${y(0)}">0</text>`;
  kids.forEach((k, i) => {
    const c = `hsl(${hue(teamOf(k) + k)},65%,45%)`;
    const pts = S.filter(s => s.nodes[k]).map(s => `${x(s.at)},${y(s.nodes[k][0])}`).join(" ");
    const ent = S.filter(s => s.nodes[k]).map(s => `${x(s.at)},${y(s.nodes[k][1])}`).join(" ");
    out += `<polyline fill="none" stroke="${c}" stroke-width="2" points="${pts}"/><polyline fill="none" stroke="${c}" stroke-dasharray="4 3" points="${ent}"/>`;
    out += `<text x="${W - 150}" y="${14 + 13 * i}" fill="${c}">${esc(k.split("/").pop())}</text>`;
  });
  svg.innerHTML = out;
}
document.getElementById("subtree").addEventListener("change", usage);

async function hosts() {
  const d = await api("/api/hosts");
  document.getElementById("hosts-info").textContent =
    `capacity ${d.capacity} GPUs on healthy hosts, ${d.used} used, ${d.free} free; ` +
    (d.faulty.length ? "faulty: " + d.faulty.join(", ") : "no faulty hosts");
  const bad = d.hosts.filter(h => h.health !== "ok");
  const show = [...bad, ...d.hosts.filter(h => h.health === "ok").slice(0, 40)];
  document.querySelector("#hosts tbody").innerHTML = show.map(h =>
    `<tr><td>${esc(h.host)}</td><td class="${h.health === "ok" ? "good" : "bad"}">${esc(h.health)}${h.draining ? " (draining)" : ""}</td><td>${h.used}/${h.gpus}</td><td>${esc(h.reason || "")}</td></tr>`).join("");
}

async function gantt() {
  const d = await api("/api/gantt");
  const rowOf = {}; let n = 0;
  for (const [h, g] of d.hosts) { rowOf[h] = n; n += g; }
  const cv = document.getElementById("gantt");
  const rh = n > 400 ? 1 : n > 100 ? 3 : 8;
  cv.height = Math.max(40, n * rh + 20);
  const ctx = cv.getContext("2d"), W = cv.width;
  ctx.clearRect(0, 0, W, cv.height);
  const x = t => (W - 10) * (t - d.from) / Math.max(1, d.now - d.from);
  const busy = {};  // host -> end time per GPU slot (first fit at the run's start)
  const hatch = document.createElement("canvas"); hatch.width = hatch.height = 6;
  const hc = hatch.getContext("2d"); hc.strokeStyle = "rgba(255,255,255,.7)";
  hc.beginPath(); hc.moveTo(0, 6); hc.lineTo(6, 0); hc.stroke();
  const pattern = ctx.createPattern(hatch, "repeat");
  const runs = d.runs.slice().sort((a, b) => a.start - b.start);
  for (const r of runs) {
    const end = r.end ?? d.now;
    for (const [h, g] of r.placement) {
      const slots = busy[h] ??= [];
      let placed = 0;
      for (let i = 0; placed < g && i < 64; i++) {
        if ((slots[i] ?? -Infinity) <= r.start) {
          slots[i] = end; placed++;
          const y = 10 + ((rowOf[h] ?? 0) + i) * rh, x0 = x(Math.max(r.start, d.from)), x1 = x(end);
          ctx.fillStyle = `hsl(${hue(teamOf(r.budget))},60%,55%)`;
          ctx.fillRect(x0, y, Math.max(1, x1 - x0), rh);
          const interruptible = !r.allocated || (r.protected_until !== null && r.protected_until < end);
          if (interruptible) {
            const xs = r.allocated ? x(Math.max(r.protected_until, d.from)) : x0;
            ctx.fillStyle = pattern; ctx.fillRect(xs, y, Math.max(1, x1 - xs), rh);
          }
          if (r.ended === "preempted") { ctx.fillStyle = "#d00"; ctx.fillRect(x1 - 2, y, 2, rh); }
        }
      }
    }
  }
  ctx.fillStyle = "#555"; ctx.fillText(when(d.from), 2, 8); ctx.fillText(when(d.now), W - 150, 8);
  cv.dataset.runs = String(d.runs.length);
}

async function refresh() {
  const t0 = performance.now();
  await Promise.all([queue(), usage(), hosts(), gantt()]);
  document.body.dataset.ready = "1";
  document.body.dataset.readyMs = String(Math.round(performance.now() - t0));
  if (!document.body.dataset.readyAtMs)  // every panel on screen (as the queue's renderedMs)
    requestAnimationFrame(() => setTimeout(() => { document.body.dataset.readyAtMs = String(Math.round(performance.now())); }, 0));
}
refresh();
setInterval(refresh, 5000);
