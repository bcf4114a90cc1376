// ors_lab front end: the page of `ors-lab compare BASE CAND... -o cmp.html` (ors_lab.viewer.compare_page), the
// comparison view a notebook shows (compare.js) drawn through a page model (page.js). Its data is inline and
// gzipped: "ors-lab-compare" holds the view's data; "ors-lab-compare-detail" the two runs' episodes side by side
// of the tasks the page holds (task key -> candidate -> what the kernel answers in a notebook). A click on a task
// it does not hold gets a note saying so.

ORS.comparison = async () => {
  const head = await ORS.inline("ors-lab-compare");
  let details = null;
  ORS.drawComparison(document.getElementById("ors-lab-comparison"), head.data, head.note,
    "reading this task from the page…", async (task, candidate) => {
      if (details === null) details = await ORS.inline("ors-lab-compare-detail");
      return (details[task] || {})[candidate];
    });
};

ORS.ready(ORS.comparison(), "the comparison");
