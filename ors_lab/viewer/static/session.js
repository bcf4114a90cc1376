// ors_lab front end: the session view (ORS.views.session).
// Draws model.get("data") (SessionState.snapshot()): a compact card with the state, the heartbeat
// (ticked here every second from the last ping's wall time), the totals, the prompt, and the steps:
// the newest whole (input, output as it streams, images drawn), older ones one line each.

const sessionStateColours = { open: "#1a7f37", opening: "#9a6700", closed: "#656d76", expired: "#cf222e",
  failed: "#cf222e", new: "#656d76" };

function sessionBlocks(blocks) {
  return (blocks || []).flatMap((block) => {
    if (block.type === "text") {
      const pre = ORS.h("pre", { class: "ol-pre", style: "max-height:12em" }, block.text);
      return block.more ? [pre, ORS.h("div", { class: "ol-dim" }, `… ${block.more.toLocaleString()} more characters`)] : [pre];
    }
    if (block.type === "image" && block.data) {
      const img = ORS.h("img", { alt: block.mime, style: "max-width:100%;max-height:320px;display:block;margin:2px 0" });
      img.src = `data:${block.mime};base64,${block.data}`;
      return img;
    }
    if (block.type === "image") {
      return ORS.h("div", { class: "ol-dim" }, `[${block.mime} image, ${block.size.toLocaleString()} base64 characters: not drawn live]`);
    }
    return ORS.h("div", { class: "ol-dim" }, `[${block.type} block]`);
  });
}

function sessionReward(value) {
  if (value === null || value === undefined) return ORS.h("span", { class: "ol-dim" }, "-");
  return ORS.h("b", { style: `color:${ORS.colour(value)}` }, ORS.fmt(value));
}

function sessionStatus(row) {
  if (row.status === "streaming") return `receiving… ${row.chunks} chunk${row.chunks === 1 ? "" : "s"}, ${row.chars.toLocaleString()} chars`;
  if (row.status === "sent") return "sent…";
  if (row.status === "running") return "running…";
  if (row.status === "resuming") return `resuming (retry ${row.retries})…`;
  return null;
}

function sessionStepLine(row) {
  const status = sessionStatus(row);
  return ORS.h("div", { class: "ol-session-line", style: "white-space:nowrap;overflow:hidden;text-overflow:ellipsis" },
    ORS.h("span", { class: "ol-dim" }, `#${row.call} `),
    ORS.h("span", { class: "ol-tool" }, row.tool), " ",
    ORS.h("code", {}, row.input), " → ",
    row.error ? ORS.h("span", { class: "ol-err" }, row.error) : (status ? ORS.h("i", {}, status) : row.summary), " · ",
    sessionReward(row.reward),
    row.finished ? ORS.h("span", { class: "ol-ok" }, " · finished") : null);
}

function sessionStepFull(row) {
  const status = sessionStatus(row);
  const head = ORS.h("div", {},
    ORS.h("span", { class: "ol-dim" }, `#${row.call} `),
    ORS.h("b", { class: "ol-tool" }, row.tool),
    status ? ORS.h("i", { class: "ol-dim" }, `  ${status}`) : null,
    row.status === "done" || row.status === "error" ? [
      " · reward ", sessionReward(row.reward),
      row.finished ? ORS.h("span", { class: "ol-ok" }, " · finished") : null,
      row.duration !== null ? ORS.h("span", { class: "ol-dim" }, ` · ${ORS.duration(row.duration)}`) : null,
    ] : null);
  return ORS.h("div", { class: "ol-session-step", style: "margin:4px 0;padding-left:6px;border-left:3px solid " +
      (row.error ? ORS.colour(null, true) : ORS.colour(row.reward)) },
    head,
    ORS.h("details", {}, ORS.h("summary", { class: "ol-dim" }, ORS.h("code", {}, row.input)),
      ORS.h("pre", { class: "ol-pre" }, row.input_full)),
    row.error ? ORS.h("div", { class: "ol-err" }, row.error) : null,
    sessionBlocks(row.output));
}

ORS.views.session = ({ model, el }) => {
  const root = ORS.h("div", { class: "ol-card ol-session" });
  el.append(root);
  let promptOpen = true;
  let beat = null;

  const heartbeat = () => {
    const data = model.get("data") || {};
    if (!beat) return;
    if (data.state !== "open") {
      beat.textContent = data.pings ? `${data.pings} ping${data.pings === 1 ? "" : "s"}` : "";
      return;
    }
    const now = Date.now() / 1000;
    if (data.last_ping) beat.textContent = `♥ last ping ${Math.max(0, Math.round(now - data.last_ping))} s ago`;
    else if (data.opened) beat.textContent = `no ping yet (open ${Math.max(0, Math.round(now - data.opened))} s)`;
    else beat.textContent = "";
  };

  const draw = () => {
    const data = model.get("data") || {};
    const state = data.state || "new";
    beat = ORS.h("span", { class: "ol-dim ol-session-beat", style: "float:right" });
    const title = ORS.h("div", { class: "ol-title" }, "Session",
      ORS.h("span", { class: "ol-sub" }, `${data.environment || "?"} · ${data.task || "?"}`), " ",
      ORS.h("span", { class: "ol-pill ol-session-state", style: `color:${sessionStateColours[state] || "#656d76"}` }, state),
      beat);
    const totals = ORS.h("div", { class: "ol-session-totals" },
      `${data.steps || 0} step${data.steps === 1 ? "" : "s"} · total reward `, sessionReward(data.total),
      " · last ", sessionReward(data.last),
      data.finished ? ORS.h("span", { class: "ol-ok" }, " · finished") : null,
      data.retries ? ORS.h("span", { class: "ol-dim" }, ` · ${data.retries} retries`) : null);
    const parts = [title, totals];
    if (data.error) parts.push(ORS.h("div", { class: "ol-err" }, data.error));
    if (data.prompt) {
      const details = ORS.h("details", { class: "ol-session-prompt" }, ORS.h("summary", {}, "prompt"), sessionBlocks(data.prompt));
      details.open = promptOpen;
      details.addEventListener("toggle", () => { promptOpen = details.open; });
      parts.push(details);
    }
    if (data.tools) parts.push(ORS.h("div", { class: "ol-dim" }, `tools: ${data.tools.join(", ") || "-"}`));
    const steps = ORS.h("div", { class: "ol-session-steps" });
    if (data.earlier) steps.append(ORS.h("div", { class: "ol-dim" }, `… ${data.earlier.toLocaleString()} earlier steps`));
    for (const row of data.rows || []) steps.append(row.full ? sessionStepFull(row) : sessionStepLine(row));
    parts.push(steps);
    parts.push(ORS.h("div", { class: "ol-dim", style: "font-size:11px" }, `session ${data.sid || ""}`));
    root.replaceChildren(...parts);
    heartbeat();
  };

  draw();
  model.on("change:data", draw);
  const timer = setInterval(heartbeat, 1000);
  return () => {
    clearInterval(timer);
    model.off("change:data", draw);
  };
};
