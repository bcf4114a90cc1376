// ors_lab front end: the page of `ors-lab compare BASE CAND... -o cmp.html` (ors_lab.viewer.compare_page), the
// comparison view a notebook shows (compare.js) drawn through a page model (page.js). Its data is inline and
// gzipped: "ors-lab-compare" holds the view's data; "ors-lab-compare-detail" the two runs' episodes side by side
// of the tasks the page holds (task key -> candidate -> what the kernel answers in a notebook). A click on a task
// it does not hold gets a note saying so.

ORS.comparison = async () => {
  const head = await ORS.inline("ors-lab-compare");
  let details = null;
  const model = ORS.pageModel({ view: "compare", data: head.data, text: "", waiting: "reading this task from the page…" },
    async (message) => {
      if (typeof message.task !== "string") return null;
      if (details === null) details = await ORS.inline("ors-lab-compare-detail");
      const found = (details[message.task] || {})[String(message.candidate)];
      if (found) return found;
      return { type: "pair", key: message.task, candidate: message.candidate, names: [head.data.baseline,
        head.data.candidates[message.candidate]], differences: [],
        runs: [0, 1].map((side) => ({ name: side ? head.data.candidates[message.candidate] : head.data.baseline,
          episodes: [], missing: head.note })) };
    });
  ORS.draw(document.getElementById("ors-lab-comparison"), model);
};

ORS.ready(ORS.comparison(), "the comparison");
