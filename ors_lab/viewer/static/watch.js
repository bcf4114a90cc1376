// ors_lab front end: the page of `ors-lab watch` (ors_lab.feed.watch), the live dashboard of a run behind its
// live feed, drawn by the notebook's run view (run.js) through a page model (page.js). The watch server reads
// the feed and keeps the run's state (the RunState a notebook's dashboard draws); the page subscribes to the
// server with the browser's EventSource ("dashboard" events: the state to draw and how the feed is, at most
// about 10 a second) and asks it for a finished episode's transcript when a grid cell is clicked (POST
// "request": what the kernel answers in a notebook). EventSource reconnects by itself; each connection starts
// with the whole state, so nothing is lost in between.

ORS.watch = () => {
  const mount = document.getElementById("ors-lab-run");
  const line = document.getElementById("ors-lab-feed");
  const ask = async (message) => {
    const response = await fetch("request", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(message),
    });
    return response.ok ? response.json() : null;
  };
  const model = ORS.pageModel({ view: "run", data: {}, inbox: [], text: "", waiting: "asking the watch server…" }, ask);
  let drawn = false;
  const source = new EventSource("dashboard");
  source.addEventListener("dashboard", (event) => {
    const update = JSON.parse(event.data);
    const feed = update.feed || {};
    const lost = feed.resets ? ` · ${feed.resets} reset${feed.resets > 1 ? "s" : ""} (events were lost; the state is whole again)` : "";
    line.textContent = `watching ${feed.url} · feed ${feed.status}${feed.error ? ` (${feed.error})` : ""}${lost}`;
    line.dataset.status = feed.status || "";
    model.set("text", update.text || "");
    model.set("data", update.data || {});
    if (!drawn) {
      ORS.draw(mount, model);
      drawn = true;
      document.documentElement.dataset.orsLab = "ready";
    }
  });
  source.addEventListener("error", () => {
    line.textContent = "the watch server does not answer (ors-lab watch has stopped?); trying again…";
    line.dataset.status = "disconnected";
  });
};

ORS.watch();
