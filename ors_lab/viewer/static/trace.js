// ors_lab front end: the trace viewer (ORS.views.trace), drawing ors_lab.notebook.trace.TraceState.
// The data holds the summary and the first page only; every other page, and an episode's timeline,
// is asked of the kernel (model.send) and arrives as a custom message ({type: "page" | "timeline"}).
// A timeline with a "note" has no items, and says why (a report that does not hold it).

ORS.traceStyle = `
.ors-lab .ol-tr-bar { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; margin: 6px 0; }
.ors-lab .ol-tr-bar input[type=search] { width: 14em; }
.ors-lab .ol-tr-bar button { cursor: pointer; }
.ors-lab table.ol-tr-list tbody tr { cursor: pointer; }
.ors-lab table.ol-tr-list tbody tr:hover { background: var(--jp-layout-color2, #f6f8fa); }
.ors-lab table.ol-tr-list tbody tr.ol-tr-open { background: #ddf4ff; }
.ors-lab table.ol-tr-list th.ol-tr-sort { cursor: pointer; text-decoration: underline dotted; }
.ors-lab .ol-tr-dot { display: inline-block; width: 9px; height: 9px; border-radius: 2px; margin-right: 4px; }
.ors-lab .ol-tr-panel { margin-top: 8px; border-top: 1px solid var(--jp-border-color2, #d0d7de); padding-top: 6px; }
.ors-lab .ol-tr-item { display: grid; grid-template-columns: 6.5em 6.5em 7.5em 1fr; gap: 0 8px; padding: 1px 0;
  border-left: 3px solid transparent; padding-left: 4px; }
.ors-lab .ol-tr-item.ol-tr-error { border-left-color: #cf222e; background: #ffebe9; }
.ors-lab .ol-tr-item .ol-tr-t, .ors-lab .ol-tr-item .ol-tr-gap { text-align: right; color: #656d76;
  font-variant-numeric: tabular-nums; }
.ors-lab .ol-tr-item .ol-tr-kind { color: #656d76; }
.ors-lab .ol-tr-item.ol-tr-error .ol-tr-title { color: #cf222e; font-weight: 600; }
.ors-lab .ol-tr-item pre.ol-pre { grid-column: 4; max-height: 14em; }
.ors-lab .ol-tr-pause { margin: 2px 0 2px 7em; color: #8c959f; font-size: 11px; border-left: 2px dotted #d0d7de;
  padding-left: 6px; }
.ors-lab .ol-tr-k-reasoning .ol-tr-title { color: #8250df; }
.ors-lab .ol-tr-k-reasoning pre.ol-pre { font-style: italic; }
.ors-lab .ol-tr-k-tool-call .ol-tr-title, .ors-lab .ol-tr-k-tool-input .ol-tr-title { color: #0550ae; }
.ors-lab .ol-tr-k-reward .ol-tr-title { color: #1a7f37; }
.ors-lab .ol-tr-k-ping .ol-tr-title { color: #9a6700; }
.ors-lab .ol-tr-k-turn { margin-top: 4px; font-weight: 600; }
.ors-lab .ol-tr-timeline { max-height: 40em; overflow: auto; }
.ors-lab .ol-tr-hist { display: flex; align-items: flex-end; gap: 2px; height: 48px; margin: 4px 0; }
.ors-lab .ol-tr-hist > div { width: 18px; min-height: 0; }
`;

// Kinds whose detail is worth reading at once; the others (bodies, raw events) fold away.
ORS.traceOpenKinds = new Set(["reasoning", "text", "tool-input", "tool-call", "tool-output", "error", "episode"]);

ORS.traceGap = (s) => {
  if (s === null || s === undefined) return "";
  if (s < 0.001) return `+${Math.round(s * 1e6)} µs`;
  return `+${ORS.duration(s)}`;
};

ORS.traceHistogram = (hist) => {
  if (!hist || !hist.counts || !hist.counts.some((c) => c > 0)) return null;
  const peak = Math.max(...hist.counts);
  const bars = hist.counts.map((count, i) => {
    const mid = (hist.edges[i] + hist.edges[i + 1]) / 2;
    const h = count ? Math.max(1, Math.round((44 * count) / peak)) : 0;
    return ORS.h("div", { style: `height:${h}px;background:${ORS.colour(mid)}`,
      title: `${ORS.fmt(hist.edges[i])} to ${ORS.fmt(hist.edges[i + 1])}: ${count}` });
  });
  return ORS.h("div", { class: "ol-tr-hist", title: hist.title }, bars);
};

ORS.views.trace = ({ model, el }) => {
  const style = ORS.h("style", {}, ORS.traceStyle);
  const root = ORS.h("div", { class: "ol-trace" });
  el.append(style, root);
  let data = model.get("data") || {};
  let page = data.page || { rows: [], page: 0, pages: 1, size: 25, total: 0, matched: 0 };
  let query = { page: 0, size: page.size, sort: page.sort || null, desc: !!page.desc, filter: "", errors: false };
  let openKey = null;
  let waiting = null;
  let filterTimer = null;

  const summary = ORS.h("div", {});
  const bar = ORS.h("div", { class: "ol-tr-bar" });
  const list = ORS.h("div", {});
  const panel = ORS.h("div", { class: "ol-tr-panel", style: "display:none" });
  root.append(summary, bar, list, panel);

  const ask = (message) => {
    waiting = message;
    model.send(message);
    setTimeout(() => {
      if (waiting === message) {  // a page's own model says what it waits for; in a notebook, the kernel
        status.textContent = model.get("waiting") || "waiting for the kernel (it answers once the running cell ends)...";
      }
    }, 600);
  };
  const askPage = (changes) => {
    query = { ...query, ...changes };
    ask({ ...query });
  };

  // -- the summary -------------------------------------------------------------------------------
  const drawSummary = () => {
    const facts = (data.facts || []).map(([k, v]) => [k, k === "mean reward" ? ORS.fmt(v) : v]);
    summary.replaceChildren(ORS.card(data.title || "Trace", (data.path || "").split("/").pop(),
      ORS.h("div", { class: "ol-row" }, ORS.kv(facts), ORS.traceHistogram(data.histogram))));
  };

  // -- the controls ------------------------------------------------------------------------------
  const prev = ORS.h("button", { type: "button", onclick: () => askPage({ page: page.page - 1 }) }, "‹ prev");
  const next = ORS.h("button", { type: "button", onclick: () => askPage({ page: page.page + 1 }) }, "next ›");
  const where = ORS.h("span", { class: "ol-tr-where" });
  const sizes = ORS.h("select", { title: "rows per page", onchange: (e) => askPage({ page: 0, size: Number(e.target.value) }) },
    [10, 25, 50, 100, 200].map((n) => ORS.h("option", { value: n, selected: n === page.size }, `${n} a page`)));
  const search = ORS.h("input", { type: "search", placeholder: "filter: environment, task, id, error",
    oninput: (e) => { clearTimeout(filterTimer); filterTimer = setTimeout(() => askPage({ page: 0, filter: e.target.value }), 250); } });
  const onlyErrors = ORS.h("input", { type: "checkbox", onchange: (e) => askPage({ page: 0, errors: e.target.checked }) });
  const status = ORS.h("span", { class: "ol-dim" });
  bar.append(prev, where, next, sizes, search, ORS.h("label", {}, onlyErrors, " errors only"), status);

  // -- the list ----------------------------------------------------------------------------------
  const cell = (key, row) => {
    const v = row[key];
    if (key === "reward") return [ORS.h("span", { class: "ol-tr-dot", style: `background:${ORS.colour(v, !!row.error)}` }), ORS.fmt(v)];
    if (key === "duration_s") return ORS.duration(v);
    if (key === "error") return v ? ORS.h("span", { class: "ol-err", title: v }, v.length > 90 ? v.slice(0, 90) + "…" : v) : "";
    return ORS.fmt(v);
  };
  const drawList = () => {
    const columns = data.columns || [];
    const sortable = new Set(data.sortable || []);
    const head = columns.map(([key, header, numeric]) => {
      const sortKey = key === "task" ? "task_index" : key;
      const arrow = query.sort === sortKey ? (query.desc ? " ▼" : " ▲") : "";
      return ORS.h("th", { class: [numeric ? "num" : "", sortable.has(sortKey) ? "ol-tr-sort" : ""].join(" ").trim() || null,
        onclick: sortable.has(sortKey) ? () => askPage({ page: 0, sort: sortKey, desc: query.sort === sortKey ? !query.desc : false }) : null },
        header + arrow);
    });
    const body = (page.rows || []).map((row) => ORS.h("tr", {
      class: row.key === openKey ? "ol-tr-open" : null, "data-key": row.key,
      onclick: () => { openKey = row.key; drawList(); panel.style.display = ""; panel.replaceChildren(ORS.h("div", { class: "ol-dim" }, "opening...")); ask({ open: row.key }); },
    }, columns.map(([key, , numeric]) => ORS.h("td", { class: numeric ? "num" : null }, cell(key, row)))));
    list.replaceChildren(ORS.h("table", { class: "ol-table ol-tr-list" }, ORS.h("thead", {}, ORS.h("tr", {}, head)), ORS.h("tbody", {}, body)));
    const label = data.label || "episodes";
    where.textContent = `page ${page.page + 1} of ${page.pages} · ${page.matched === page.total ? page.total : `${page.matched} of ${page.total}`} ${label}`;
    prev.disabled = page.page <= 0;
    next.disabled = page.page >= page.pages - 1;
  };

  // -- one episode's timeline --------------------------------------------------------------------
  const drawTimeline = (reply) => {
    const ep = reply.episode || {};
    const items = reply.items || [];
    const span = items.length ? items[items.length - 1].t : 0;
    const title = `${ep.environment || ""} ${ep.task || ""}${ep.rollout === null || ep.rollout === undefined ? "" : ` rollout ${ep.rollout}`}`;
    const facts = [["reward", ep.reward], ["steps", ep.steps], ["duration", ORS.duration(ep.duration_s)],
      ["timeline", reply.note ? "-" : `${items.length + (reply.more || 0)} items from ${reply.rows} rows`],
      ["session", reply.key]];
    if (ep.error) facts.splice(2, 0, ["error", ORS.h("span", { class: "ol-err" }, ep.error)]);
    const rows = [];
    for (const item of items) {
      // a pause: a gap that is long for this episode is drawn as a line of its own
      if (item.gap !== null && item.gap >= 0.5 && item.gap >= span / 50) {
        rows.push(ORS.h("div", { class: "ol-tr-pause" }, `${ORS.duration(item.gap)} later`));
      }
      const detail = item.detail === null || item.detail === undefined ? null
        : ORS.traceOpenKinds.has(item.kind) || item.error ? ORS.h("pre", { class: "ol-pre" }, item.detail)
          : ORS.h("details", { style: "grid-column: 4" }, ORS.h("summary", { class: "ol-dim" }, "details"), ORS.h("pre", { class: "ol-pre" }, item.detail));
      rows.push(ORS.h("div", { class: `ol-tr-item ol-tr-k-${item.kind}${item.error ? " ol-tr-error" : ""}` },
        ORS.h("span", { class: "ol-tr-t", title: "since the episode's first row" }, ORS.duration(item.t)),
        ORS.h("span", { class: "ol-tr-gap", title: "since the item before" }, ORS.traceGap(item.gap)),
        ORS.h("span", { class: "ol-tr-kind" }, item.kind),
        ORS.h("span", { class: "ol-tr-title" }, item.title, item.span >= 0.001 ? ORS.h("span", { class: "ol-dim" }, ` (over ${ORS.duration(item.span)})`) : null),
        detail));
    }
    if (reply.more) rows.push(ORS.h("div", { class: "ol-dim" }, `... and ${reply.more} more items, not shown (the timeline keeps its first ${items.length})`));
    if (reply.note) rows.push(ORS.h("div", { class: "ol-dim ol-tr-note" }, reply.note));  // why there is none here
    else if (!items.length) rows.push(ORS.h("div", { class: "ol-dim" }, "no rows of this episode are in the trace"));
    panel.style.display = "";
    panel.replaceChildren(ORS.card(title.trim() || reply.key, reply.errors ? `${reply.errors} errors` : "", ORS.kv(facts),
      ORS.h("button", { type: "button", onclick: () => { openKey = null; panel.style.display = "none"; drawList(); } }, "close"),
      ORS.h("div", { class: "ol-tr-timeline" }, rows)));
  };

  const onMessage = (msg) => {
    if (!msg || typeof msg !== "object") return;
    waiting = null;
    status.textContent = "";
    if (msg.type === "page") {
      page = msg;
      query = { ...query, page: msg.page, size: msg.size, sort: msg.sort, desc: msg.desc };
      drawList();
    } else if (msg.type === "timeline" && msg.key === openKey) {
      drawTimeline(msg);
    }
  };
  const onData = () => {
    data = model.get("data") || {};
    page = data.page || page;
    drawSummary();
    drawList();
  };
  model.on("msg:custom", onMessage);
  model.on("change:data", onData);
  drawSummary();
  drawList();
  return () => {
    model.off("msg:custom", onMessage);
    model.off("change:data", onData);
    clearTimeout(filterTimer);
  };
};
