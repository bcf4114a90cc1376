// ors_lab front end: the HTML report of a run (ors_lab.analysis.report), drawn by the notebook's own
// renderers through page models (page.js): a run view (run.js) per evaluation and the trace viewer
// (trace.js). The data is inline and gzipped: "ors-lab-head" holds each run's final dashboard, the
// viewer's summary, every episode's row of the list and which chunk holds its detail; each
// "ors-lab-chunk-N" holds some episodes' timelines and transcripts as ors_lab made them, unpacked on
// the first click that needs one. What the kernel answers in a notebook, the page answers: a page of
// the list by ORS.listPage (TraceState.page's rules), an episode's timeline or transcript from its
// chunk, or a note saying the report does not hold it.

// TraceState.page, for the list the page holds: the rows that match (with errors only; the filter
// found in the environment, split, session id or error, any case, or in "split/task"), sorted stably
// by one column (then by "#"; empty values last either way), and page `page` of them.
ORS.listPage = (rows, message, limits) => {
  const int = (value, otherwise) => {
    const n = Number.parseInt(value, 10);
    return Number.isFinite(n) ? n : otherwise;
  };
  const missing = (value) => value === null || value === undefined;
  const size = Math.min(Math.max(int(message.size, limits.size), 1), limits.max);
  const errors = !!message.errors;
  const filter = String(message.filter || "");
  let matched = errors ? rows.filter((row) => !missing(row.error)) : rows;
  if (filter) {
    const needle = filter.toLowerCase();
    const has = (value) => !missing(value) && String(value).toLowerCase().includes(needle);
    matched = matched.filter((row) => has(row.environment) || has(row.split) || has(row.session_id)
      || has(row.error) || `${row.split ?? ""}/${row.task_index ?? ""}`.includes(needle));
  }
  const sort = limits.sortable.includes(message.sort) ? message.sort : null;
  const desc = !!message.desc;
  if (sort !== null) {
    matched = [...matched].sort((a, b) => {
      const x = a[sort], y = b[sort];
      if (missing(x) || missing(y)) return missing(x) && missing(y) ? a.n - b.n : missing(x) ? 1 : -1;
      if (x < y) return desc ? 1 : -1;
      if (x > y) return desc ? -1 : 1;
      return a.n - b.n;
    });
  }
  const pages = Math.max(1, Math.ceil(matched.length / size));
  const page = Math.min(Math.max(int(message.page, 0), 0), pages - 1);
  return { type: "page", page, pages, size, total: rows.length, matched: matched.length, sort, desc, filter, errors,
    rows: matched.slice(page * size, (page + 1) * size) };
};

ORS.report = async () => {
  const head = await ORS.inline("ors-lab-head");
  const rows = head.list;
  const index = new Map(rows.map((row, i) => [row.key, i]));
  const chunks = new Map();
  const detail = async (key) => {  // {timeline, transcript} of an episode, or null when not in this page
    const n = index.has(key) ? head.chunk[index.get(key)] : -1;
    if (n < 0) return null;
    if (!chunks.has(n)) chunks.set(n, ORS.inline(`ors-lab-chunk-${n}`));
    return (await chunks.get(n))[key] || null;
  };
  const waiting = "reading this episode from the report…";

  for (const run of head.runs) {
    const model = ORS.pageModel({ view: "run", data: run.data, inbox: [], text: "", waiting }, async (message) => {
      if (typeof message.transcript !== "string") return null;
      const key = run.sessions[message.transcript];
      const found = key === undefined ? null : await detail(key);
      if (found && found.transcript) return { transcript: found.transcript };
      const missing = key === undefined ? "not an episode of this run"
        : found ? head.notes.no_transcript : head.notes.transcript;
      return { transcript: { key: message.transcript, missing } };
    });
    ORS.draw(document.getElementById(run.mount), model);
  }

  for (const compared of head.comparisons || []) {  // an evaluation against its baseline: the comparison's view
    ORS.drawComparison(document.getElementById(compared.mount), compared.data, compared.note, waiting,
      async (task, candidate) => (compared.details[task] || {})[candidate]);
  }

  const limits = { size: head.trace.data.page.size, max: head.trace.data.limits.page_size,
    sortable: head.trace.data.sortable };
  const model = ORS.pageModel({ view: "trace", data: head.trace.data, text: "", waiting }, async (message) => {
    if ("open" in message) {
      const key = String(message.open);
      const found = await detail(key);
      if (found) return found.timeline;
      return { type: "timeline", key, episode: index.has(key) ? rows[index.get(key)] : null, rows: 0, items: [],
        more: 0, errors: 0, note: head.notes.timeline };
    }
    if ("page" in message) return ORS.listPage(rows, message, limits);
    return null;
  });
  ORS.draw(document.getElementById(head.trace.mount), model);
};

ORS.ready(ORS.report(), "the report");
