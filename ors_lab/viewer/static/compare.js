// ors_lab front end: the comparison view (ORS.views.compare), drawing ors_lab.viewer.compare.CompareState: runs
// compared with a baseline, paired by task. A card of the figures of the chosen metric (each row carries its
// exact value in data-value), a bar chart of the per-task deltas sorted, each with its spread (± its own
// standard error from the rollouts), a grid of the tasks coloured by delta; a click on a bar or a cell asks for
// that task's two runs side by side (model.send({task, candidate})) and draws them in two columns, the first
// step where they differ marked in both. The same renderer draws the notebook's widget and the page of
// `ors-lab compare -o` (comparison.js), which answers the requests from its own data.

const CMP_SVG = "http://www.w3.org/2000/svg";
const CMP_W = 620, CMP_H = 140, CMP_BARS = 400;

const cmpSvg = (tag, attrs = {}) => {
  const node = document.createElementNS(CMP_SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
};

const cmpNumber = (v, sign = false) => (v === null || v === undefined ? "-"
  : `${sign && v > 0 ? "+" : ""}${v.toFixed(3)}`);

// The figures of one metric, one row each: what summary() names them, shown to 3 decimals, exact in data-value.
const CMP_ROWS = [
  ["mean_delta", "mean delta", (f) => `${cmpNumber(f.mean_delta, true)}${f.stderr === null ? "" : ` ± ${cmpNumber(f.stderr)}`}`],
  ["ci_low", "95% interval", (f) => (f.ci_low === null ? "-" : `[${cmpNumber(f.ci_low, true)}, ${cmpNumber(f.ci_high, true)}]`)],
  ["p_value", "p-value", (f) => (f.p_value === null ? "-" : `${ORS.fmt(f.p_value)}`)],
  ["wins", "wins / losses / ties", (f) => `${f.wins} / ${f.losses} / ${f.ties}`],
  ["tasks", "paired tasks", (f) => String(f.tasks)],
  ["baseline_mean", "baseline mean", (f) => cmpNumber(f.baseline_mean)],
  ["candidate_mean", "candidate mean", (f) => cmpNumber(f.candidate_mean)],
  ["unpaired", "unpaired tasks", (f) => String(f.unpaired)],
];

ORS.views.compare = ({ model, el }) => {
  const h = ORS.h;
  let candidate = 0, metric = "reward", selected = null, reply = null, rolloutPair = 0;

  const title = h("span");
  const pick = h("select", { class: "ol-cmp-candidate", style: "margin-left: 8px",
    onchange: (e) => { candidate = Number(e.target.value); selected = null; reply = null; draw(); } });
  const metrics = h("span", { class: "ol-cmp-metrics", style: "margin-left: 8px" });
  const figures = h("table", { class: "ol-kv ol-cmp-figures" });
  const method = h("div", { class: "ol-dim ol-cmp-method" });
  const warning = h("div", { class: "ol-dim ol-cmp-warning" });
  const bars = cmpSvg("svg", { width: CMP_W, height: CMP_H, viewBox: `0 0 ${CMP_W} ${CMP_H}`, class: "ol-cmp-bars" });
  const barsNote = h("div", { class: "ol-dim" });
  const grid = h("div", { class: "ol-cmp-grid", style: "display: flex; flex-wrap: wrap; gap: 2px; max-height: 200px; overflow: auto; max-width: 620px" });
  const unpaired = h("div", { class: "ol-cmp-unpaired ol-dim" });
  const notes = h("div", { class: "ol-cmp-notes ol-dim" });
  const detail = h("div", { class: "ol-card ol-cmp-detail", style: "display: none" });

  el.append(h("div", { class: "ol-card ol-cmp" },
    h("div", { class: "ol-title" }, title, pick, metrics),
    figures, method, warning,
    h("div", { class: "ol-dim", style: "margin-top: 6px" }, "per-task delta, sorted, ± its spread (click a bar or a cell)"),
    bars, barsNote,
    h("div", { class: "ol-dim", style: "margin-top: 6px" }, "tasks, coloured by delta"),
    grid, unpaired, notes), detail);

  const data = () => model.get("data") || {};
  const rowsOf = () => {
    const t = (data().tasks || [])[candidate] || { columns: [], rows: [] };
    const at = Object.fromEntries(t.columns.map((c, i) => [c, i]));
    const column = metric === "reward" ? "delta" : metric === "success" ? "success_delta" : `${metric}_delta`;
    return { t, at, column };
  };

  const ask = (key) => {
    selected = key;
    reply = null;
    rolloutPair = 0;
    detail.style.display = "";
    detail.replaceChildren(h("div", { class: "ol-dim" }, model.get("waiting") || "asking the kernel…"));
    for (const cell of grid.children) cell.classList.toggle("ol-selected", cell.dataset.key === key);
    model.send({ task: key, candidate });
  };

  const drawFigures = () => {
    const d = data();
    const f = ((d.figures || [])[candidate] || {})[metric];
    if (!f) return;
    figures.replaceChildren(...CMP_ROWS.map(([name, label, shown]) => h("tr", { "data-figure": name },
      h("th", {}, label), h("td", { "data-value": JSON.stringify(name === "ci_low" ? [f.ci_low, f.ci_high]
        : name === "wins" ? [f.wins, f.losses, f.ties] : f[name]) }, shown(f)))));
    method.textContent = f.p_method ? `p-value: two-sided sign-flip permutation test, ${f.p_method}` : "";
    warning.textContent = f.warning || "";
  };

  const drawBars = () => {
    const { t, at, column } = rowsOf();
    let rows = t.rows.filter((r) => r[at[column]] !== null && r[at[column]] !== undefined);
    rows = [...rows].sort((a, b) => a[at[column]] - b[at[column]]);
    const total = rows.length;
    if (rows.length > CMP_BARS) {  // the lowest and the highest, the middle left out
      const half = CMP_BARS / 2;
      rows = [...rows.slice(0, half), ...rows.slice(rows.length - half)];
    }
    barsNote.textContent = total > rows.length ? `the ${CMP_BARS / 2} lowest and the ${CMP_BARS / 2} highest of ${total} tasks`
      : t.more ? `the first ${total} tasks of ${total + t.more}` : "";
    const spread = metric === "reward" ? at.delta_stderr : null;
    let top = 1e-9;
    for (const r of rows) top = Math.max(top, Math.abs(r[at[column]]) + (spread !== null ? (r[spread] || 0) : 0));
    const mid = CMP_H / 2, scale = (CMP_H / 2 - 6) / top, width = CMP_W / Math.max(rows.length, 1);
    const shapes = [cmpSvg("line", { x1: 0, x2: CMP_W, y1: mid, y2: mid, stroke: "#8c959f" })];
    rows.forEach((r, i) => {
      const value = r[at[column]], x = i * width;
      const bar = cmpSvg("rect", { x: x + Math.min(1, width / 4), width: Math.max(width - 2 * Math.min(1, width / 4), 0.5),
        y: value >= 0 ? mid - value * scale : mid, height: Math.max(Math.abs(value) * scale, value === 0 ? 1 : 0),
        fill: ORS.deltaColour(value), class: "ol-cmp-bar", "data-key": r[0], style: "cursor: pointer" });
      bar.addEventListener("click", () => ask(r[0]));
      const tip = cmpSvg("title");
      tip.textContent = `${r[0]}: delta ${cmpNumber(value, true)}${spread !== null && r[spread] !== null ? ` ± ${cmpNumber(r[spread])}` : ""}`;
      bar.append(tip);
      shapes.push(bar);
      if (spread !== null && r[spread]) {
        const cx = x + width / 2;
        shapes.push(cmpSvg("line", { x1: cx, x2: cx, y1: mid - (value + r[spread]) * scale, y2: mid - (value - r[spread]) * scale,
          stroke: "#57606a", "stroke-width": 1, class: "ol-cmp-spread" }));
      }
    });
    bars.replaceChildren(...shapes);
  };

  const drawGrid = () => {
    const { t, at, column } = rowsOf();
    grid.replaceChildren(...t.rows.map((r) => h("div", { class: `ol-cell ol-cmp-cell${r[0] === selected ? " ol-selected" : ""}`,
      style: `background: ${ORS.deltaColour(r[at[column]])}`, "data-key": r[0],
      title: `${r[0]}: baseline ${cmpNumber(r[at.baseline_mean])}, candidate ${cmpNumber(r[at.candidate_mean])}, delta ${cmpNumber(r[at[column]], true)}`,
      onclick: () => ask(r[0]) })));
  };

  const drawDetail = () => {
    if (!reply) return;
    const names = reply.names;
    const diffs = reply.differences || [];
    const chosen = diffs[rolloutPair] || { step: null };
    const picker = diffs.length > 1 ? h("select", { class: "ol-cmp-rollout", onchange: (e) => { rolloutPair = Number(e.target.value); drawDetail(); } },
      diffs.map((d, i) => h("option", { value: i, selected: i === rolloutPair }, `rollout ${d.rollouts[0]} · rollout ${d.rollouts[1]}`))) : null;
    const banner = h("div", { class: `ol-cmp-banner ${chosen.step ? "ol-err" : "ol-ok"}`, "data-step": chosen.step ?? "" },
      !diffs.length ? "no rollout of this task in both runs"
        : chosen.step ? `first difference: step ${chosen.step} (${chosen.what}): ${chosen.baseline} · ${chosen.candidate}`
          : "the two runs took the same steps");
    const columns = reply.runs.map((run, side) => {
      const episode = (run.episodes || [])[side === 0 ? (chosen.rollouts ? run.episodes.findIndex((e) => e.rollout === chosen.rollouts[0]) : 0)
        : (chosen.rollouts ? run.episodes.findIndex((e) => e.rollout === chosen.rollouts[1]) : 0)];
      const head = h("div", { class: "ol-title" }, names[side], episode ? h("span", { class: "ol-sub" },
        `rollout ${ORS.fmt(episode.rollout)} · reward ${ORS.fmt(episode.reward)}`) : null);
      const body = h("div", { class: "ol-cmp-items", style: "max-height: 28em; overflow: auto" });
      if (!episode) body.append(h("div", { class: "ol-dim" }, run.missing || "no episode of this task in this run"));
      for (const item of (episode ? episode.items : [])) {
        const marked = item.kind === "step" && chosen.step !== null && item.step === chosen.step;
        const style = { turn: "ol-title", reasoning: "ol-reasoning", text: "", step: "ol-tool", error: "ol-err" }[item.kind] ?? "";
        const text = item.kind === "step" ? [`${item.step}. → ${item.text}`,
          item.output ? h("div", { class: "ol-dim" }, `← ${item.output}`) : null,
          item.reward !== null && item.reward !== undefined ? h("div", {}, `reward ${ORS.fmt(item.reward)}`) : null,
          item.error ? h("div", { class: "ol-err" }, item.error) : null] : item.text;
        body.append(h("div", { class: `ol-cmp-item ol-cmp-${item.kind} ${style}${marked ? " ol-cmp-diff" : ""}`,
          "data-step": item.step ?? "", style: `white-space: pre-wrap; word-break: break-word; margin: 2px 0;${marked ? " outline: 2px solid #cf222e; background: #ffebe9" : ""}` }, text));
      }
      return h("div", { class: "ol-cmp-side", style: "flex: 1 1 300px; min-width: 260px" }, head, body);
    });
    detail.replaceChildren(h("button", { style: "float: right", onclick: () => { selected = null; detail.style.display = "none"; drawGrid(); } }, "close"),
      h("div", { class: "ol-title" }, `task ${reply.key}`), picker, banner, h("div", { class: "ol-row" }, columns));
    const first = detail.querySelector(".ol-cmp-diff");
    if (first) first.scrollIntoView({ block: "nearest" });
  };

  const draw = () => {
    const d = data();
    if (!d.candidates) return;
    title.textContent = `${d.candidates[candidate]} vs ${d.baseline}`;
    if (pick.childElementCount !== d.candidates.length) {
      pick.replaceChildren(...d.candidates.map((name, i) => h("option", { value: i }, name)));
    }
    pick.style.display = d.candidates.length > 1 ? "" : "none";
    metrics.replaceChildren(...(d.metrics || []).map((m) => h("button", { class: `ol-cmp-metric${m === metric ? " ol-pill" : ""}`,
      "data-metric": m, onclick: () => { metric = m; draw(); } }, m)));
    drawFigures();
    drawBars();
    drawGrid();
    const u = (d.unpaired || [])[candidate] || { count: 0, first: [] };
    unpaired.textContent = u.count ? `unpaired: ${u.count} tasks (${u.baseline} only in the baseline, ${u.candidate} only in the candidate): ${u.first.map(([k]) => k).join(", ")}${u.count > u.first.length ? ", …" : ""}` : "every task is paired";
    notes.replaceChildren(...(d.notes || []).map((n) => h("div", {}, n)));
  };

  const onMessage = (msg) => {
    if (msg && msg.type === "pair" && msg.key === selected && msg.candidate === candidate) {
      reply = msg;
      drawDetail();
    }
  };
  draw();
  model.on("change:data", draw);
  model.on("msg:custom", onMessage);
  return () => {
    model.off("change:data", draw);
    model.off("msg:custom", onMessage);
  };
};
