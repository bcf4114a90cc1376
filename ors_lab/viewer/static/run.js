// ors_lab front end: the run view (ORS.views.run), the evaluation dashboard of ors_lab.notebook.run.RunState.
// DOM calls only. The charts are inline SVG made here: no charting library, so nothing is fetched
// or bundled, and the view draws offline. The page is built once; each update (at most about 10 a
// second) changes nodes in place (texts, the grid cells whose code changed, the charts' shapes,
// the panes' parts), so the selected transcript, the open error list and scroll positions stay.
// Finished transcripts come through the "inbox" trait and are kept here (RUN_CACHE of them), so
// a click on a grid cell opens one while the kernel is busy running the evaluation.

const RUN_CACHE = 500;
const RUN_SVG = "http://www.w3.org/2000/svg";
const RUN_W = 240, RUN_H = 84;

const runSvg = (tag, attrs = {}) => {
  const node = document.createElementNS(RUN_SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
};

// A grid code: " " not planned, "." waiting, "~" running, "x" failed, "A".."U" a reward in twentieths; against a
// baseline, a finished cell's delta code too: "a".."u", its reward minus its task's baseline mean in tenths above −1.
const runCodeColour = (code, delta = " ") => {
  if (code === "x") return ORS.colour(null, true);
  if (delta >= "a" && delta <= "u") return ORS.deltaColour((delta.charCodeAt(0) - 97) / 10 - 1);
  if (code >= "A" && code <= "U") return ORS.colour((code.charCodeAt(0) - 65) / 20);
  return "";
};

const runSet = (node, text) => { if (node.textContent !== text) node.textContent = text; };

// What the views of one run keep (its transcripts, the selected cell), by the run's id: a later view
// of the same run finds them (the output is drawn again when the run ends, to update its static
// summary, and a second display of the view shows the same). anywidget gives each view a model
// object of its own, so the id is in the data. The last RUN_STORES runs are kept.
const RUN_STORES = 20;
const runStores = new Map();
const runStore = (id) => {
  let store = runStores.get(id);
  if (!store) {
    store = { cache: new Map(), selected: null };
    if (id) runStores.set(id, store);
    if (runStores.size > RUN_STORES) runStores.delete(runStores.keys().next().value);
  }
  return store;
};

const RUN_PART_STYLE = {
  block: "ol-dim", reasoning: "ol-reasoning", text: "", tool: "ol-tool", output: "ol-dim",
  "tool-error": "ol-err", reward: "", error: "ol-err", finish: "ol-dim", elided: "ol-dim",
};

// One transcript part [seq, kind, label, text] as a node; runPartText gives what it reads.
const runPartText = ([, kind, label, text]) => {
  switch (kind) {
    case "block": return `▸ ${label}`;
    case "tool": return `→ ${label}(${text})`;
    case "output": return `← ${label ? label + ": " : ""}${text}`;
    case "tool-error": return `✗ ${label ? label + ": " : ""}${text}`;
    case "reward": return `reward ${text}${label ? " (" + label + ")" : ""}`;
    case "error": return `error ${label}: ${text}`;
    case "finish": return `finish: ${text}`;
    case "elided": return `… ${text} …`;
    default: return text;
  }
};

const runPart = (part) => ORS.h("div", {
  class: `ol-run-part ${RUN_PART_STYLE[part[1]] ?? ""}`,
  style: "white-space: pre-wrap; word-break: break-word; margin: 1px 0",
}, runPartText(part));

const runPct = (done, total) => (total ? Math.min(100, (100 * done) / total) : 100);

ORS.views.run = ({ model, el }) => {
  const h = ORS.h;
  const store = runStore((model.get("data") || {}).id);
  const cache = store.cache;
  let selected = null;
  let selectedCode = null;
  let cellNodes = [];
  let codes = "";
  let shape = "";

  // -- the page, built once ---------------------------------------------------------------------
  const title = h("span");
  const subtitle = h("span", { class: "ol-sub" });
  const status = h("span", { class: "ol-pill", style: "margin-left: 8px" });
  const bar = h("div", { style: "width: 0%" });
  const progress = h("span", { class: "ol-run-progress" });
  const stat = (name) => {
    const value = h("b", { class: `ol-run-${name.replace(/[^a-z0-9]+/gi, "-")}` }, "-");
    return [h("span", { class: "ol-run-stat", style: "margin-right: 14px; white-space: nowrap" },
      h("span", { class: "ol-dim" }, `${name} `), value), value];
  };
  const [meanBox, meanValue] = stat("mean reward");
  const passBox = h("span");
  const [successBox, successValue] = stat("success");
  const [tokensBox, tokensValue] = stat("tokens");
  const [errorsBox, errorsValue] = stat("errors");
  tokensBox.style.display = "none";
  // Why success and pass@k read 0 though rewards are positive (RunState.note), naming success_threshold=.
  const note = h("div", { class: "ol-run-note ol-dim", style: "display: none; margin: 2px 0 4px" });
  // Against a baseline (RunState.baseline): the running paired delta, its interval (narrowing as tasks end), p.
  const versus = h("div", { class: "ol-run-vs", style: "display: none; margin: 2px 0 4px" });
  let colourBy = "delta";
  const colourPick = h("select", { class: "ol-run-colour", style: "display: none; margin-left: 6px",
    onchange: (e) => { colourBy = e.target.value; codes = ""; drawGrid(model.get("data").grid); } },
    h("option", { value: "delta" }, "colour: delta to the baseline"), h("option", { value: "reward" }, "colour: reward"));
  const errorsList = h("div");
  const errorsSummary = h("summary", {}, "last errors");
  const errors = h("details", { class: "ol-run-errors", style: "display: none" }, errorsSummary, errorsList);

  const grid = h("div", { class: "ol-run-grid", style: "display: flex; flex-wrap: wrap; gap: 2px; max-height: 260px; overflow: auto" });
  const gridNote = h("div", { class: "ol-dim" });

  const hist = runSvg("svg", { width: RUN_W, height: RUN_H, viewBox: `0 0 ${RUN_W} ${RUN_H}`, class: "ol-run-hist" });
  const histBars = [];
  const histLo = runSvg("text", { x: 2, y: RUN_H - 2, "font-size": 10, fill: "currentColor" });
  const histHi = runSvg("text", { x: RUN_W - 2, y: RUN_H - 2, "font-size": 10, "text-anchor": "end", fill: "currentColor" });
  hist.append(histLo, histHi, runSvg("line", { x1: 0, x2: RUN_W, y1: RUN_H - 14, y2: RUN_H - 14, stroke: "#8c959f" }));
  const line = runSvg("svg", { width: RUN_W, height: RUN_H, viewBox: `0 0 ${RUN_W} ${RUN_H}`, class: "ol-run-line" });
  const linePath = runSvg("polyline", { fill: "none", stroke: "#0969da", "stroke-width": 1.5, points: "" });
  const lineEnd = runSvg("text", { x: RUN_W - 2, y: RUN_H - 2, "font-size": 10, "text-anchor": "end", fill: "currentColor" });
  const lineTop = runSvg("text", { x: 2, y: 10, "font-size": 10, fill: "currentColor" });
  const lineStart = runSvg("text", { x: 2, y: RUN_H - 2, "font-size": 10, fill: "currentColor" });
  lineStart.textContent = "0 s";
  line.append(linePath, lineEnd, lineTop, lineStart,
    runSvg("line", { x1: 0, x2: RUN_W, y1: RUN_H - 14, y2: RUN_H - 14, stroke: "#8c959f" }));

  const deltaTitle = h("div", { class: "ol-dim", style: "display: none" }, "delta to the baseline as tasks end (95% interval)");
  const deltaChart = runSvg("svg", { width: RUN_W, height: RUN_H, viewBox: `0 0 ${RUN_W} ${RUN_H}`, class: "ol-run-delta",
    style: "display: none" });
  const deltaBand = runSvg("polygon", { fill: "#0969da", "fill-opacity": 0.15, points: "" });
  const deltaLine = runSvg("polyline", { fill: "none", stroke: "#0969da", "stroke-width": 1.5, points: "" });
  const deltaZero = runSvg("line", { x1: 0, x2: RUN_W, stroke: "#8c959f", "stroke-dasharray": "3 2" });
  const deltaEnd = runSvg("text", { x: RUN_W - 2, y: RUN_H - 2, "font-size": 10, "text-anchor": "end", fill: "currentColor" });
  deltaChart.append(deltaBand, deltaZero, deltaLine, deltaEnd);

  const transcriptHead = h("div", { class: "ol-title" });
  const transcriptBody = h("div", { class: "ol-run-transcript-body", style: "max-height: 22em; overflow: auto" });
  const closeTranscript = h("button", { style: "float: right", onclick: () => select(null) }, "close");
  const transcript = h("div", { class: "ol-card ol-run-transcript", style: "display: none" },
    closeTranscript, transcriptHead, transcriptBody);

  const panesTitle = h("div", { class: "ol-title", style: "margin-top: 6px" }, "now running");
  const panes = h("div", { class: "ol-row ol-run-panes" });
  const panesByKey = new Map();

  el.append(h("div", { class: "ol-card ol-run" },
    h("div", { class: "ol-title" }, title, subtitle, status),
    h("div", { style: "display: flex; align-items: center; gap: 10px" },
      h("div", { class: "ol-bar", style: "flex: 1 1 auto; min-width: 120px" }, bar), progress),
    h("div", { style: "margin: 4px 0" }, meanBox, passBox, successBox, tokensBox, errorsBox),
    note,
    versus,
    errors,
    h("div", { class: "ol-row", style: "margin-top: 4px" },
      h("div", { style: "flex: 0 1 auto; min-width: 200px; max-width: 620px" },
        h("div", { class: "ol-dim" }, "tasks × rollouts (click a cell)", colourPick), grid, gridNote),
      h("div", {},
        h("div", { class: "ol-dim" }, "rewards"), hist,
        h("div", { class: "ol-dim" }, "mean reward over time"), line, deltaTitle, deltaChart)),
    transcript, panesTitle, panes));

  // -- transcripts -------------------------------------------------------------------------------
  const keep = (item) => {
    if (!item || !item.key) return;
    cache.delete(item.key);
    cache.set(item.key, item);
    if (cache.size > RUN_CACHE) cache.delete(cache.keys().next().value);
  };

  const showTranscript = (key) => {
    const item = cache.get(key);
    const [task, rollout] = key.split("/");
    const where = `task ${task} · rollout ${rollout}`;
    transcriptBody.replaceChildren();
    if (!item) {
      const code = (codes[cellIndex.get(key)] || " ")[0];
      runSet(transcriptHead, where);
      const why = code === "~" ? "running: its transcript comes when it ends"
        : code === "." ? "not run yet"
        : model.get("waiting") || "loading… (the kernel answers once the cell running the evaluation has ended)";
      transcriptBody.append(h("div", { class: "ol-dim" }, why));
      return;
    }
    if (item.missing) {
      runSet(transcriptHead, where);
      transcriptBody.append(h("div", { class: "ol-dim" }, item.missing));
      return;
    }
    const facts = [`reward ${ORS.fmt(item.reward)}`, item.finish_reason, `${item.steps} steps`,
      ORS.duration(item.duration_s)];
    if (item.tokens) facts.push(`${(item.tokens.input || 0) + (item.tokens.output || 0)} tokens`);
    runSet(transcriptHead, `${where} · ${facts.join(" · ")}`);
    if (item.error) transcriptBody.append(h("div", { class: "ol-err" }, `${item.error_type || "error"}: ${item.error}`));
    for (const part of item.parts || []) transcriptBody.append(runPart(part));
  };

  const select = (key) => {
    if (selected !== null && cellIndex.has(selected)) cellNodes[cellIndex.get(selected)]?.classList.remove("ol-selected");
    selected = store.selected = key;
    if (key === null) { transcript.style.display = "none"; return; }
    cellNodes[cellIndex.get(key)]?.classList.add("ol-selected");
    transcript.style.display = "";
    showTranscript(key);
    selectedCode = (codes[cellIndex.get(key)] || " ")[0];
    if (!cache.has(key) && selectedCode !== "~" && selectedCode !== ".") model.send({ transcript: key });
  };

  // -- the grid ----------------------------------------------------------------------------------
  let cellIndex = new Map();
  const buildGrid = (g) => {
    grid.replaceChildren();
    cellNodes = [];
    cellIndex = new Map();
    codes = "";
    const size = g.rollouts > 16 ? 8 : 12;
    let n = 0;
    for (const [first, last] of g.tasks) {
      for (let task = first; task <= last; task++) {
        const column = h("div", { style: "display: flex; flex-direction: column; gap: 1px", title: `task ${task}` });
        for (let rollout = 0; rollout < g.rollouts; rollout++, n++) {
          const key = `${task}/${rollout}`;
          const cell = h("div", { class: "ol-cell ol-pending", style: `width: ${size}px; height: ${size}px`,
            title: `task ${task} · rollout ${rollout}`, "data-key": key, onclick: () => select(key) });
          cellIndex.set(key, n);
          cellNodes.push(cell);
          column.append(cell);
        }
        grid.append(column);
      }
    }
    if (selected !== null) cellNodes[cellIndex.get(selected)]?.classList.add("ol-selected");
  };

  const drawGrid = (g) => {
    const key = `${g.rollouts}:${JSON.stringify(g.tasks)}`;
    if (key !== shape) { shape = key; buildGrid(g); }
    const next = g.cells;
    const deltas = g.deltas && colourBy === "delta" ? g.deltas : "";
    const drawn = [];
    for (let i = 0; i < next.length && i < cellNodes.length; i++) {
      const code = next[i], delta = deltas[i] || " ";
      drawn.push(code + delta);
      if (code + delta === codes[i]) continue;
      const cell = cellNodes[i];
      const fill = runCodeColour(code, delta);
      cell.style.background = fill;
      cell.classList.toggle("ol-pending", !fill);
      cell.style.opacity = code === " " ? "0" : "";
      cell.style.outline = code === "~" ? "1px dashed #0969da" : "";
      cell.dataset.state = code === "x" ? "failed" : fill ? "done" : code === "~" ? "running" : "waiting";
      if (delta !== " ") cell.dataset.delta = ((delta.charCodeAt(0) - 97) / 10 - 1).toFixed(1);
    }
    codes = drawn;
    runSet(gridNote, g.more_tasks ? `and ${g.more_tasks} more tasks (the result has them all)` : "");
  };

  // -- the charts --------------------------------------------------------------------------------
  const drawHist = (hi) => {
    const counts = hi.counts || [];
    while (histBars.length < counts.length) {
      const rect = runSvg("rect", { y: 0, height: 0 });
      hist.insertBefore(rect, histLo);
      histBars.push(rect);
    }
    const most = Math.max(1, ...counts);
    const width = RUN_W / Math.max(counts.length, 1);
    const room = RUN_H - 16;
    counts.forEach((count, i) => {
      const height = (room * count) / most;
      const centre = hi.lo + ((i + 0.5) * (hi.hi - hi.lo)) / counts.length;
      const rect = histBars[i];
      rect.setAttribute("x", i * width + 1);
      rect.setAttribute("width", Math.max(width - 2, 1));
      rect.setAttribute("y", RUN_H - 14 - height);
      rect.setAttribute("height", height);
      rect.setAttribute("fill", ORS.colour(centre));
      rect.replaceChildren(runSvg("title"));
      rect.firstChild.textContent = `${count} episodes`;
    });
    runSet(histLo, ORS.fmt(hi.lo));
    runSet(histHi, ORS.fmt(hi.hi));
  };

  const drawLine = (series, elapsed) => {
    const times = series.t || [], values = series.mean || [];
    const end = Math.max(elapsed || 0, ...times, 1e-9);
    const top = Math.max(1, ...values);
    const room = RUN_H - 18;
    const points = times.map((t, i) => `${((RUN_W * t) / end).toFixed(1)},${(RUN_H - 14 - (room * values[i]) / top).toFixed(1)}`);
    linePath.setAttribute("points", points.join(" "));
    runSet(lineEnd, ORS.duration(end));
    runSet(lineTop, ORS.fmt(top));
  };

  // -- against the baseline ----------------------------------------------------------------------
  const fixed = (v, sign = false) => (v === null || v === undefined ? "-" : `${sign && v > 0 ? "+" : ""}${v.toFixed(3)}`);
  const drawVersus = (b) => {
    for (const node of [versus, deltaTitle, deltaChart]) node.style.display = b ? "" : "none";
    colourPick.style.display = b ? "" : "none";
    if (!b) return;
    const figures = b.tasks ? [
      ["mean_delta", `delta ${fixed(b.mean_delta, true)}${b.stderr === null ? "" : ` ± ${fixed(b.stderr)}`}`],
      ["ci_low", b.ci_low === null ? "" : `95% [${fixed(b.ci_low, true)}, ${fixed(b.ci_high, true)}]`],
      ["p_value", b.p_value === null ? "" : `p ${ORS.fmt(b.p_value)}`],
      ["wins", `${b.wins}/${b.losses}/${b.ties} of ${b.tasks} tasks`],
    ] : [["tasks", "no task compared yet"]];
    const text = `vs ${b.name}: ${figures.map(([, t]) => t).filter(Boolean).join(" · ")}`;
    if (versus.dataset.text !== text) {
      versus.dataset.text = text;
      versus.replaceChildren(h("span", { class: "ol-dim" }, `vs ${b.name} `), ...figures.filter(([, t]) => t).map(([name, t]) =>
        h("b", { class: "ol-run-vs-figure", "data-figure": name, style: "margin-right: 10px" }, t)));
      if (b.unpaired_run || b.unpaired_baseline) versus.append(h("span", { class: "ol-dim" },
        `(unpaired: ${b.unpaired_run} of the run's tasks, ${b.unpaired_baseline} of the baseline's)`));
    }
    const points = (b.series || []).filter((p) => p[1] !== null);
    const last = points.length ? points[points.length - 1][0] : 1;
    let top = 1e-9;
    for (const [, m, lo, hi] of points) top = Math.max(top, Math.abs(m), Math.abs(lo ?? m), Math.abs(hi ?? m));
    const y = (v) => (RUN_H - 14) / 2 - (v / top) * ((RUN_H - 18) / 2);
    const x = (n) => (RUN_W * n) / Math.max(last, 1);
    deltaZero.setAttribute("y1", y(0));
    deltaZero.setAttribute("y2", y(0));
    deltaLine.setAttribute("points", points.map(([n, m]) => `${x(n).toFixed(1)},${y(m).toFixed(1)}`).join(" "));
    const banded = points.filter((p) => p[2] !== null);
    deltaBand.setAttribute("points", [...banded.map(([n, , , hi]) => `${x(n).toFixed(1)},${y(hi).toFixed(1)}`),
      ...banded.reverse().map(([n, , lo]) => `${x(n).toFixed(1)},${y(lo).toFixed(1)}`)].join(" "));
    runSet(deltaEnd, `${last} tasks`);
  };

  // -- the live panes ----------------------------------------------------------------------------
  const drawPanes = (list) => {
    panesTitle.style.display = list.length ? "" : "none";
    const seen = new Set();
    list.forEach((pane, order) => {
      const id = pane.session_id;
      seen.add(id);
      let view = panesByKey.get(id);
      if (!view) {
        const head = h("div", { class: "ol-title" });
        const body = h("div", { class: "ol-run-pane-body", style: "max-height: 14em; overflow: auto; font-size: 12px" });
        view = { root: h("div", { class: "ol-card ol-pane ol-run-pane", "data-session": id }, head, body), head, body, parts: new Map() };
        panesByKey.set(id, view);
      }
      if (panes.children[order] !== view.root) panes.insertBefore(view.root, panes.children[order] || null);
      const where = pane.key ? `task ${pane.key.replace("/", " · rollout ")}` : id;
      runSet(view.head, `${where} · ${ORS.duration(pane.elapsed_s)}${pane.reward === null || pane.reward === undefined ? "" : ` · reward ${ORS.fmt(pane.reward)}`}`);
      const body = view.body;
      const stick = body.scrollTop + body.clientHeight >= body.scrollHeight - 4;
      const wanted = new Set(pane.parts.map((p) => p[0]));
      for (const [seq, node] of view.parts) if (!wanted.has(seq)) { node.remove(); view.parts.delete(seq); }
      for (const part of pane.parts) {
        const node = view.parts.get(part[0]);
        if (node) runSet(node, runPartText(part));
        else { const made = runPart(part); view.parts.set(part[0], made); body.append(made); }
      }
      if (stick) body.scrollTop = body.scrollHeight;
    });
    for (const [id, view] of panesByKey) if (!seen.has(id)) { view.root.remove(); panesByKey.delete(id); }
  };

  // -- one update --------------------------------------------------------------------------------
  const redraw = () => {
    const d = model.get("data") || {};
    if (!d.label) return;
    runSet(title, d.label);
    runSet(subtitle, d.agent ? d.agent : "");
    runSet(status, d.status || "");
    status.className = `ol-pill ${d.status === "finished" ? "ol-ok" : d.status === "running" ? "ol-dim" : "ol-bad"}`;
    bar.style.width = `${runPct(d.done, d.total)}%`;
    bar.style.background = d.errors ? "#bf8700" : "";
    const parts = [`${d.done}/${d.total} episodes`];
    if (d.resumed) parts.push(`${d.resumed} resumed`);
    parts.push(`${ORS.fmt(d.rate, 3)}/s`);
    if (d.status === "running") parts.push(d.eta_s === null || d.eta_s === undefined ? "ETA -" : `ETA ${ORS.duration(d.eta_s)}`);
    else parts.push(ORS.duration(d.elapsed_s));
    if (d.running) parts.push(`${d.running} running`);
    runSet(progress, parts.join(" · "));
    runSet(meanValue, d.mean === null || d.mean === undefined ? "-"
      : `${d.mean.toFixed(3)}${d.stderr === null || d.stderr === undefined ? "" : ` ± ${d.stderr.toFixed(3)}`}`);
    const passes = d.pass || [];
    if (passBox.childElementCount !== passes.length) {
      passBox.replaceChildren(...passes.map(([k]) => stat(`pass@${k}`)[0]));
    }
    passes.forEach(([, value], i) => runSet(passBox.children[i].lastChild, value === null || value === undefined ? "-" : value.toFixed(3)));
    runSet(successValue, d.success_rate === null || d.success_rate === undefined ? "-" : d.success_rate.toFixed(3));
    runSet(note, d.note || "");
    note.style.display = d.note ? "" : "none";
    if (d.tokens) {
      tokensBox.style.display = "";
      const used = (d.tokens.input || 0) + (d.tokens.output || 0);
      runSet(tokensValue, `${used}${d.tokens_per_s ? ` (${Math.round(d.tokens_per_s)}/s)` : ""}`);
    }
    runSet(errorsValue, String(d.errors));
    errorsValue.className = d.errors ? "ol-err" : "";
    errors.style.display = d.errors ? "" : "none";
    runSet(errorsSummary, `last errors (${(d.last_errors || []).length} of ${d.errors})`);
    const errorText = (d.last_errors || []).map(([key, type, message]) => `${key}  ${type}: ${message}`).join("\n");
    if (errorsList.dataset.text !== errorText) {
      errorsList.dataset.text = errorText;
      errorsList.replaceChildren(...(d.last_errors || []).map(([key, type, message]) => h("div", { class: "ol-err" },
        h("a", { href: "#", onclick: (e) => { e.preventDefault(); select(key); } }, key), ` ${type}: ${message}`)));
    }
    drawVersus(d.baseline);
    if (d.grid) drawGrid(d.grid);
    if (d.hist) drawHist(d.hist);
    drawLine(d.series || {}, d.elapsed_s);
    drawPanes(d.panes || []);
    if (selected !== null && !cache.has(selected)) {  // the selected episode ended, its transcript not here
      const code = (codes[cellIndex.get(selected)] || " ")[0];
      if (code !== selectedCode) {
        selectedCode = code;
        showTranscript(selected);
        if (code !== "~" && code !== ".") model.send({ transcript: selected });
      }
    }
  };

  const takeInbox = () => {
    let mine = false;
    for (const item of model.get("inbox") || []) { keep(item); mine = mine || item.key === selected; }
    if (mine) showTranscript(selected);
  };

  const onMessage = (msg) => {
    if (msg && msg.transcript) {
      keep(msg.transcript);
      if (msg.transcript.key === selected) showTranscript(selected);
    }
  };

  takeInbox();
  redraw();
  if (store.selected !== null) select(store.selected);
  model.on("change:data", redraw);
  model.on("change:inbox", takeInbox);
  model.on("msg:custom", onMessage);
  return () => {
    model.off("change:data", redraw);
    model.off("change:inbox", takeInbox);
    model.off("msg:custom", onMessage);
  };
};
