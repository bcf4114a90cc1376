// ors_lab front end, for a page of its own (an HTML report, a page watching a run): the model a
// renderer draws, played by the page instead of a kernel. Joined after main.js (widget.py: page_esm).
//
// ORS.pageModel(values, answer) has what a renderer uses of anywidget's model: get(name), on(name, cb)
// and off(name, cb) for "change:NAME" and "msg:custom", send(message); and set(name, value), which
// changes a value and runs its "change:NAME" callbacks (a live page's updates). A message sent is
// answered by answer(message): a reply, a promise of one, or null for none; a reply reaches the
// renderer as the kernel's custom message does in a notebook. ORS.draw(el, model) draws a model in el
// with its renderer (main.js: render). ORS.inline(id) reads data the page holds in a script element:
// JSON, or (data-encoding="gzip+base64") gzipped JSON in base64, unpacked by the browser's own
// DecompressionStream: no library, no fetch.

ORS.pageModel = (values, answer) => {
  const handlers = new Map();
  const fire = (name, ...args) => {
    for (const callback of [...(handlers.get(name) || [])]) callback(...args);
  };
  return {
    get: (name) => values[name],
    set: (name, value) => {
      values[name] = value;
      fire(`change:${name}`);
    },
    on: (name, callback) => {
      if (!handlers.has(name)) handlers.set(name, []);
      handlers.get(name).push(callback);
    },
    off: (name, callback) => {
      handlers.set(name, (handlers.get(name) || []).filter((h) => h !== callback));
    },
    send: (message) => {
      Promise.resolve()
        .then(() => answer(message))
        .then(
          (reply) => { if (reply !== null && reply !== undefined) fire("msg:custom", reply, []); },
          (error) => console.error("ors_lab: a request of the page went unanswered", message, error),
        );
    },
  };
};

ORS.draw = (el, model) => {
  el.replaceChildren();  // what the page showed before its script ran (a static summary)
  return render({ model, el });
};

ORS.inline = async (id) => {
  const node = document.getElementById(id);
  if (!node) throw new Error(`ors_lab: this page holds no data #${id}`);
  if (node.dataset.encoding !== "gzip+base64") return JSON.parse(node.textContent);
  const text = atob(node.textContent);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return JSON.parse(await new Response(stream).text());
};

// The page drawn (drawing: a promise): <html data-ors-lab="ready"> and the "ors-lab-ready" performance mark, which
// the tests and the benchmarks wait for; "failed" (and the error on the console) if it could not be drawn.
ORS.ready = (drawing, what) => drawing.then(
  () => {
    document.documentElement.dataset.orsLab = "ready";
    performance.mark("ors-lab-ready");
  },
  (error) => {
    console.error(`ors_lab: ${what} could not be drawn`, error);
    document.documentElement.dataset.orsLab = "failed";
  },
);

// A comparison's view (compare.js) drawn in el by a page of its own: the page answers a click on a task with the
// two runs' episodes it holds (held(task, candidate): a promise of them, or of nothing), else with a note.
ORS.drawComparison = (el, data, note, waiting, held) => {
  const model = ORS.pageModel({ view: "compare", data, text: "", waiting }, async (message) => {
    if (typeof message.task !== "string") return null;
    const found = await held(message.task, String(message.candidate));
    if (found) return found;
    const names = [data.baseline, data.candidates[message.candidate]];
    return { type: "pair", key: message.task, candidate: message.candidate, names, differences: [],
      runs: names.map((name) => ({ name, episodes: [], missing: note })) };
  });
  return ORS.draw(el, model);
};
